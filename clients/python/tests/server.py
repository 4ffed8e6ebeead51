"""Starts the real turnstream binary on port 0 with a temporary database, in worker mode."""

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

SERVICE_KEY = "svc-python-client-test"
HERE = os.path.dirname(os.path.abspath(__file__))


class Server:
    def __init__(self, *extra):
        binary = os.environ.get("TURNSTREAM_BIN") or os.path.join(
            HERE, "..", "..", "..", "target", "debug", "turnstream"
        )
        self.dir = tempfile.mkdtemp(prefix="turnstream-py-")
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--db", os.path.join(self.dir, "t.db"),
             "--agent", "worker", "--service-key", SERVICE_KEY, *extra],
            stdout=subprocess.PIPE,
            env=dict(os.environ, RUST_LOG="warn"),
        )
        line = self.proc.stdout.readline().decode()
        if not line.startswith("turnstream listening on "):
            self.stop()
            raise RuntimeError(f"unexpected first line {line!r}")
        self.url = line.strip().replace("turnstream listening on ", "")

    def api(self, method, path, body=None):
        req = urllib.request.Request(
            f"{self.url}/api{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"authorization": f"Bearer {SERVICE_KEY}", "content-type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as res:
                return res.status, json.loads(res.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def post(self, session, content):
        status, body = self.api("POST", f"/sessions/{session}/messages", {"content": content})
        assert status == 202, (status, body)
        return body["turn_id"]

    def wait_turn_end(self, turn_id, deadline_s=30):
        end = time.monotonic() + deadline_s
        while True:
            _, info = self.api("GET", f"/turns/{turn_id}")
            if info["state"] not in ("queued", "running"):
                return info
            if time.monotonic() > end:
                raise AssertionError(f"turn {turn_id} did not end")
            time.sleep(0.02)

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
