"""Runs the client's tests and prints one "N passed, M failed" line (for ./run test); an
argument picks the test files by pattern (./run runs test_langgraph.py in its virtualenv)."""

import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
result = unittest.TextTestRunner(verbosity=2).run(unittest.defaultTestLoader.discover(
    here, pattern=sys.argv[1] if len(sys.argv) > 1 else "test*.py"))
failed = len(result.failures) + len(result.errors)
print(f"{result.testsRun - failed - len(result.skipped)} passed, {failed} failed")
sys.exit(1 if failed else 0)
