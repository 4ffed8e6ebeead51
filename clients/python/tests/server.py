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
        self.argv = [binary, "serve", "--listen", "127.0.0.1:0", "--db",
                     os.path.join(self.dir, "t.db"), "--agent", "worker", "--service-key",
                     SERVICE_KEY, *extra]
        self._start()

    def _start(self):
        self.proc = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, env=dict(os.environ, RUST_LOG="warn")
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

    def post(self, session, content, agent=None):
        """Posts a user message (for `agent`, when given): its turn's id."""
        message = {"content": content} if agent is None else {"content": content, "agent": agent}
        status, body = self.api("POST", f"/sessions/{session}/messages", message)
        assert status == 202, (status, body)
        return body["turn_id"]

    def wait_turn(self, turn_id, done, what="the condition", deadline_s=30):
        """The turn's info once done(info) holds."""
        end = time.monotonic() + deadline_s
        while True:
            _, info = self.api("GET", f"/turns/{turn_id}")
            if done(info):
                return info
            if time.monotonic() > end:
                raise AssertionError(f"turn {turn_id}: no {what} in {deadline_s} s: {info}")
            time.sleep(0.02)

    def wait_turn_end(self, turn_id, deadline_s=30):
        return self.wait_turn(
            turn_id, lambda t: t["state"] not in ("queued", "running", "waiting"), "end",
            deadline_s,
        )

    def wait_open_requests(self, turn_id, n=1):
        """The turn's info once it waits with n requests open."""
        def done(t):
            open_ = [r for r in t.get("requests", []) if "answer" not in r]
            return t["state"] == "waiting" and len(open_) == n
        return self.wait_turn(turn_id, done, f"wait with {n} open requests")

    def give(self, turn_id, body):
        """Answers a request over HTTP, as a browser does."""
        status, reply = self.api("POST", f"/turns/{turn_id}/input", body)
        assert status == 200, (status, reply)
        return reply

    def cursor(self, session):
        """The journal position of now, from the session's history."""
        status, page = self.api("GET", f"/sessions/{session}/history")
        assert status == 200, (status, page)
        return page["cursor"]

    def journal(self, session, cursor, turn_id, deadline_s=30):
        """The session's journaled events after `cursor`, up to the turn's `turn_ended`."""
        req = urllib.request.Request(
            f"{self.url}/api/stream?session={session}&cursor={cursor}",
            headers={"authorization": f"Bearer {SERVICE_KEY}"},
        )
        events = []
        with urllib.request.urlopen(req, timeout=deadline_s) as res:
            for line in res:
                if not line.startswith(b"data:"):
                    continue
                event = json.loads(line[5:])
                events.append(event)
                if event.get("kind") == "turn_ended" and event.get("turn_id") == turn_id:
                    return events
        raise AssertionError(f"the stream ended before turn {turn_id} did: {events}")

    def restart(self):
        """Kills the server and starts it again on the same database (on a new port: `url`)."""
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self._start()

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        shutil.rmtree(self.dir, ignore_errors=True)
