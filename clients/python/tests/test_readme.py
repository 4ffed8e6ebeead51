"""The README's snippets, against the real server binary: the quick start runs as written (with
this server's URL and key), the ask handler it shows is the example's, which test_ask.py runs,
and so are the planner and researcher it shows, which test_call.py runs."""

import json
import os
import re
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, HERE)

from server import SERVICE_KEY, Server  # noqa: E402

with open(os.path.join(ROOT, "README.md")) as f:
    BLOCKS = re.findall(r"```python\n(.*?)```\n", f.read(), re.S)


class ReadmeTest(unittest.TestCase):
    def test_the_quick_start_runs_as_written(self):
        server = Server()
        quick_start = BLOCKS[0]
        code = quick_start.replace('"http://127.0.0.1:8080"', json.dumps(server.url)).replace(
            '"KEY"', json.dumps(SERVICE_KEY))
        self.assertNotEqual(code, quick_start)
        turn_id = server.post("readme", "hi")
        # Run from the package's folder, so `turnstream_worker` imports this package.
        worker = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
        try:
            info = server.wait_turn_end(turn_id)
            self.assertEqual(info["state"], "completed", info)
            self.assertEqual(info["text"], "You said: hi")
            self.assertEqual(info["thinking"], "reading the question")
            self.assertEqual([(t["name"], t.get("output_preview")) for t in info["tools"]],
                             [("clock", "12:00")])
        finally:
            worker.kill()
            worker.wait()
            server.stop()

    def test_the_ask_handler_shown_is_the_example_one(self):
        with open(os.path.join(ROOT, "examples", "ask_worker.py")) as f:
            region = re.search(r"# README: begin\n(.*?)# README: end\n", f.read(), re.S).group(1)
        self.assertIn(region, BLOCKS)

    def test_the_planner_and_researcher_shown_are_the_example_ones(self):
        with open(os.path.join(ROOT, "examples", "planner_researcher.py")) as f:
            region = re.search(r"# README: begin\n(.*?)# README: end\n", f.read(), re.S).group(1)
        self.assertIn(region, BLOCKS)

    def test_the_langgraph_tool_shown_is_the_example_one(self):
        # test_langgraph.py runs the example's graph, and the complete agent as written.
        with open(os.path.join(ROOT, "examples", "langgraph_worker.py")) as f:
            region = re.search(r"# README: begin\n(.*?)# README: end\n", f.read(), re.S).group(1)
        self.assertIn(region, BLOCKS)


if __name__ == "__main__":
    unittest.main()
