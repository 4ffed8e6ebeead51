"""Agents that ask, through the Python worker client, against the real server binary: the ask
example's approval and client tool answered over HTTP and continued by the handler that asked;
two asks at once (asyncio); an ask that expires; and a worker process that asked, waited and was
killed, its turn continued by another process with the answer and the next seq."""

import asyncio
import os
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

from ask_worker import answer  # noqa: E402
from server import SERVICE_KEY, Server  # noqa: E402
from turnstream_worker import AsyncWorkerClient, WorkerClient, run_worker, run_worker_async  # noqa: E402


class AskTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def with_worker(self, handler, until, worker_id="py-ask", **options):
        """Runs handler in run_worker while until() runs; returns what until returns."""
        stop = threading.Event()
        client = WorkerClient(self.server.url, SERVICE_KEY, worker_id=worker_id)
        loop = threading.Thread(target=run_worker, args=(client, handler),
                                kwargs={"wait_ms": 500, "stop": stop, **options})
        loop.start()
        try:
            return until()
        finally:
            stop.set()
            loop.join(30)
            self.assertFalse(loop.is_alive())

    def test_approval_answered_and_the_same_handler_goes_on(self):
        turn_id = self.server.post("pa1", "deploy prod")
        runs = []

        def handler(turn):
            runs.append(turn.turn_id)
            answer(turn)

        def until():
            waiting = self.server.wait_open_requests(turn_id)
            request = waiting["requests"][0]
            self.assertEqual(
                {k: request.get(k) for k in ("request_id", "kind", "prompt", "tool")},
                {"request_id": "ask-1", "kind": "approval", "prompt": "Deploy prod?",
                 "tool": {"call_id": "call_deploy", "name": "deploy", "input": {"target": "prod"}}},
            )
            self.assertEqual(waiting["text"], "Deploying prod needs your approval. ")
            self.server.give(turn_id, {"request_id": "ask-1", "approved": True})
            return self.server.wait_turn_end(turn_id)

        info = self.with_worker(handler, until)
        self.assertEqual(info["state"], "completed", info)
        self.assertEqual(info["text"], "Deploying prod needs your approval. Done: prod is live.")
        self.assertEqual(
            [(t["call_id"], t["status"], t.get("output_preview")) for t in info["tools"]],
            [("call_deploy", "finished", "prod is live")],
        )
        self.assertEqual(runs, [turn_id], "the handler that asked went on; it was not run again")

    def test_client_tool_output_is_the_reply(self):
        turn_id = self.server.post("pa2", "Where am I?")

        def until():
            waiting = self.server.wait_open_requests(turn_id)
            self.assertEqual(waiting["requests"][0]["kind"], "client_tool")
            self.assertEqual(waiting["requests"][0]["tool"],
                             {"call_id": "call_location", "name": "get_location", "input": {}})
            self.server.give(turn_id, {"request_id": "ask-1", "output": {"city": "Porto"}})
            return self.server.wait_turn_end(turn_id)

        info = self.with_worker(answer, until)
        self.assertEqual(info["state"], "completed", info)
        self.assertEqual(info["text"], "You are in Porto.")

    def test_asyncio_two_asks_at_once_wait_for_both(self):
        turn_id = self.server.post("pa3", "two things")

        runs = []

        async def handler(turn):
            runs.append(turn.continuation)
            turn.response("Asking. ")
            verdict, reply = await asyncio.gather(
                turn.request_approval({"call_id": "c1", "name": "rm", "input": {"path": "/tmp/x"}}),
                turn.ask("Which colour?", options=["red", "blue"], request_id="colour"),
            )
            turn.response(f"{'Removed' if verdict['approved'] else 'Kept'}, {reply['text']}.")

        def answers():
            waiting = self.server.wait_open_requests(turn_id, 2)
            self.assertEqual([r["request_id"] for r in waiting["requests"]], ["ask-1", "colour"])
            self.assertEqual(self.server.give(turn_id, {"request_id": "colour", "text": "blue"})["state"],
                             "waiting")
            self.server.give(turn_id, {"request_id": "ask-1", "approved": False})

        async def main():
            stop = asyncio.Event()
            client = AsyncWorkerClient(self.server.url, SERVICE_KEY, worker_id="py-ask-async")
            loop = asyncio.get_running_loop().create_task(
                run_worker_async(client, handler, wait_ms=500, stop=stop))
            await asyncio.to_thread(answers)
            info = await asyncio.to_thread(self.server.wait_turn_end, turn_id)
            stop.set()
            await asyncio.wait_for(loop, 30)
            return info

        info = asyncio.run(main())
        self.assertEqual(info["state"], "completed", info)
        self.assertEqual(info["text"], "Asking. Kept, blue.")
        self.assertEqual(runs, [None], "the handler that asked went on; it was not run again")

    def test_an_ask_whose_time_runs_out_returns_timed_out(self):
        turn_id = self.server.post("pa4", "quick question")

        def handler(turn):
            reply = turn.ask("Now?", expires_at=int(time.time() * 1000) + 1000)
            turn.response("No answer." if reply.get("timed_out") else f"You said {reply['text']}.")

        info = self.with_worker(handler, lambda: self.server.wait_turn_end(turn_id))
        self.assertEqual(info["state"], "completed", info)
        self.assertEqual(info["text"], "No answer.")
        self.assertEqual(info["requests"][0]["answer"], {"timed_out": True})

    def test_a_handler_let_go_after_suspend_s_runs_again_on_the_continuation(self):
        turn_id = self.server.post("pa6", "deploy staging")
        runs = []
        let_go = []
        was_let_go = threading.Event()

        def handler(turn):
            runs.append("first" if turn.continuation is None else "continuation")
            try:
                answer(turn)
            except Exception as err:
                let_go.append(type(err).__name__)
                was_let_go.set()
                raise

        def until():
            self.assertTrue(was_let_go.wait(30))
            self.assertEqual(self.server.api("GET", f"/turns/{turn_id}")[1]["state"], "waiting")
            self.server.give(turn_id, {"request_id": "ask-1", "approved": True})
            return self.server.wait_turn_end(turn_id)

        info = self.with_worker(handler, until, "py-lets-go", suspend_s=0.3)
        self.assertEqual(info["state"], "completed", info)
        self.assertEqual(info["text"], "Deploying staging needs your approval. Done: staging is live.")
        self.assertEqual((runs, let_go), (["first", "continuation"], ["TurnSuspended"]))

    def test_a_worker_that_died_waiting_is_continued_by_another_with_the_next_seq(self):
        turn_id = self.server.post("pa5", "deploy prod")
        dead = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "..", "examples", "ask_worker.py")],
            env=dict(os.environ, TURNSTREAM_URL=self.server.url,
                     TURNSTREAM_SERVICE_KEY=SERVICE_KEY, TURNSTREAM_WORKER_ID="py-dies"),
        )
        try:
            self.server.wait_open_requests(turn_id)
        finally:
            dead.kill()
            dead.wait()
        self.server.give(turn_id, {"request_id": "ask-1", "approved": False, "reason": "not today"})
        continued = []

        def handler(turn):
            continued.append((turn.continuation, turn.seq, turn.replaying))
            answer(turn)

        info = self.with_worker(handler, lambda: self.server.wait_turn_end(turn_id), "py-continues")
        self.assertEqual(info["state"], "completed", info)
        self.assertEqual(info["text"], "Deploying prod needs your approval. Not deployed: not today")
        self.assertEqual(len(continued), 1)
        continuation, seq, replaying = continued[0]
        # The dead worker sent one events request (seq 0) and its wait (seq 1).
        self.assertEqual((continuation["seq"], seq, replaying), (2, 2, True))
        self.assertEqual(
            [(a["request_id"], a["answer"]) for a in continuation["answers"]],
            [("ask-1", {"approved": False, "reason": "not today"})],
        )
        self.assertEqual(
            [(e["type"], e.get("delta") or e.get("request_id")) for e in continuation["events"]],
            [("response", "Deploying prod needs your approval. "), ("input_requested", "ask-1")],
        )


if __name__ == "__main__":
    unittest.main()
