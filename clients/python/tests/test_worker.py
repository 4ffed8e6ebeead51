"""The Python worker client against the real server binary: sync and asyncio turns streamed and
completed through the loop helpers, a cancel that sets the turn's `cancelled`, and a raising
handler that fails its turn."""

import asyncio
import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from server import SERVICE_KEY, Server  # noqa: E402
from turnstream_worker import AsyncWorkerClient, WorkerClient, run_worker, run_worker_async  # noqa: E402


class WorkerClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def client(self):
        return WorkerClient(self.server.url, SERVICE_KEY, worker_id="py-test")

    def test_sync_loop_streams_and_completes(self):
        turn_id = self.server.post("p1", "hello python")
        stop = threading.Event()
        seen = []

        def handler(turn):
            seen.append(turn.user_message["content"])
            turn.thinking("pondering ")
            turn.tool("c1", "clock", "started", input_preview="{}")
            turn.tool("c1", "clock", "finished", output_preview="noon")
            for word in ("It ", "is ", "noon."):
                turn.response(word)
            turn.flush()
            turn.response(" Bye.")
            stop.set()

        loop = threading.Thread(target=run_worker, args=(self.client(), handler),
                                kwargs={"wait_ms": 1000, "stop": stop})
        loop.start()
        info = self.server.wait_turn_end(turn_id)
        loop.join(30)
        self.assertFalse(loop.is_alive())
        self.assertEqual(seen, ["hello python"])
        self.assertEqual(info["state"], "completed")
        self.assertEqual(info["text"], "It is noon. Bye.")
        self.assertEqual(info["thinking"], "pondering ")
        self.assertEqual(info["tools"][0]["status"], "finished")

    def test_cancel_sets_cancelled(self):
        turn_id = self.server.post("p2", "slow")
        turns = self.client().claim(wait_ms=10000)
        self.assertEqual([t.turn_id for t in turns], [turn_id])
        turn = turns[0]
        turn.response("partial")
        turn.flush()
        status, body = self.server.api("POST", f"/turns/{turn_id}/cancel")
        self.assertEqual((status, body["state"]), (200, "cancelled"))
        self.assertEqual(turn.heartbeat(), "cancelled")
        self.assertTrue(turn.cancelled.wait(10))
        self.assertEqual(turn.state, "cancelled")
        self.assertEqual(self.server.wait_turn_end(turn_id)["text"], "partial")
        turn.close()

    def test_raising_handler_fails_the_turn(self):
        turn_id = self.server.post("p3", "boom")
        stop = threading.Event()

        def handler(turn):
            turn.response("half")
            stop.set()
            raise RuntimeError("model unreachable")

        run_worker(self.client(), handler, wait_ms=1000, stop=stop)
        info = self.server.wait_turn_end(turn_id)
        self.assertEqual(info["state"], "failed")
        self.assertEqual(info["error"], "model unreachable")
        self.assertEqual(info["text"], "half")

    def test_asyncio_loop_streams_and_completes(self):
        turn_id = self.server.post("p4", "hello asyncio")

        async def main():
            stop = asyncio.Event()

            async def handler(turn):
                turn.thinking("hmm")
                turn.response("async ")
                await asyncio.sleep(0.05)
                turn.response("reply")
                stop.set()

            client = AsyncWorkerClient(self.server.url, SERVICE_KEY, worker_id="py-async")
            await run_worker_async(client, handler, wait_ms=1000, stop=stop)

        asyncio.run(main())
        info = self.server.wait_turn_end(turn_id)
        self.assertEqual(info["state"], "completed")
        self.assertEqual(info["text"], "async reply")
        self.assertEqual(info["thinking"], "hmm")


if __name__ == "__main__":
    unittest.main()
