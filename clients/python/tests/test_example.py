"""The OpenAI example worker against the real server and an in-test OpenAI-compatible upstream
that speaks the streaming format, tool calls included."""

import json
import os
import sys
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

from openai_worker import answer  # noqa: E402
from server import SERVICE_KEY, Server  # noqa: E402
from turnstream_worker import WorkerClient, run_worker  # noqa: E402

REQUESTS = []


def chunk(delta, finish_reason=None):
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


class FakeOpenAI(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        REQUESTS.append(body)
        tool = next((m for m in body["messages"] if m["role"] == "tool"), None)
        if tool is None:
            chunks = [
                chunk({"role": "assistant", "reasoning_content": "The user wants the time."}),
                chunk({"tool_calls": [{"index": 0, "id": "call_t1", "type": "function",
                                       "function": {"name": "get_time", "arguments": ""}}]}),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
                chunk({}, "tool_calls"),
            ]
        else:
            chunks = [chunk({"content": "It is "}), chunk({"content": tool["content"]}),
                      chunk({"content": "."}, "stop")]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for c in chunks:
            self.wfile.write(f"data: {json.dumps(c)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


class OpenAiExampleTest(unittest.TestCase):
    def setUp(self):
        self.server = Server()
        self.upstream = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
        threading.Thread(target=self.upstream.serve_forever, daemon=True).start()

    def tearDown(self):
        self.server.stop()
        self.upstream.shutdown()

    def test_example_runs_the_tool_and_streams_the_reply(self):
        turn_id = self.server.post("ex", "what time is it?")
        stop = threading.Event()
        upstream = {"base_url": f"http://127.0.0.1:{self.upstream.server_port}/v1", "model": "fake"}

        def handler(turn):
            stop.set()
            answer(turn, upstream)

        run_worker(WorkerClient(self.server.url, SERVICE_KEY), handler, wait_ms=1000, stop=stop)
        info = self.server.wait_turn_end(turn_id)
        self.assertEqual(info["state"], "completed", info)
        self.assertEqual(len(REQUESTS), 2)
        self.assertEqual(REQUESTS[0]["messages"][0]["role"], "system")
        self.assertEqual(REQUESTS[0]["tools"][0]["function"]["name"], "get_time")
        tool = next(m for m in REQUESTS[1]["messages"] if m["role"] == "tool")
        self.assertEqual(tool["tool_call_id"], "call_t1")
        self.assertRegex(tool["content"], r"^\d{4}-\d{2}-\d{2}T")
        self.assertEqual(info["text"], f"It is {tool['content']}.")
        self.assertEqual(info["thinking"], "The user wants the time.")
        self.assertEqual(
            [(t["call_id"], t["name"], t["status"], t.get("output_preview")) for t in info["tools"]],
            [("call_t1", "get_time", "finished", tool["content"])],
        )


if __name__ == "__main__":
    unittest.main()
