"""Agent calls (contract v1.3) through the Python worker client, against the real server
binary: the planner/researcher example as two worker processes, and its planner killed while
it waits, continued by a new process; claims of some agents only; a planner continued by
another loop, whose call returns at once on replay; a child that ends before the caller's
`wait`; refused calls (threads and asyncio); three calls at once (asyncio.gather), each child's
end (completed, failed, cancelled) reaching the caller; chains of calls, a cycle and one too
deep refused with their codes; and a call into a full session sent again until it fits."""

import asyncio
import os
import subprocess
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

from planner_researcher import planner, researcher  # noqa: E402
from server import SERVICE_KEY, Server  # noqa: E402
from turnstream_worker import (  # noqa: E402
    AsyncWorkerClient, CallRefused, WorkerApiError, WorkerClient, run_worker, run_worker_async)

EXAMPLE = os.path.join(HERE, "..", "examples", "planner_researcher.py")
FILE = {"url": "https://files.example.com/notes.txt", "media_type": "text/plain",
        "name": "notes.txt"}


def example_text(session, topic):
    return (f"Asking the researcher about {topic}. Plan: start from "
            f'"{topic}: three sources found, for session {session}."')


class Recording(WorkerClient):
    """A WorkerClient that keeps the path of each request it sent."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sent = []

    def post(self, path, body, timeout=90):
        self.sent.append(path)
        return super().post(path, body, timeout)


class Worker:
    """run_worker(handler, agents) in a thread until stop()."""

    def __init__(self, server, handler, agents, worker_id, client=None):
        self.stop_event = threading.Event()
        client = client or WorkerClient(server.url, SERVICE_KEY, worker_id=worker_id)
        self.thread = threading.Thread(
            target=run_worker, args=(client, handler),
            kwargs={"wait_ms": 500, "stop": self.stop_event, "agents": agents}, daemon=True)
        self.thread.start()

    def stop(self):
        self.stop_event.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the worker loop did not stop"


class CallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_the_example_a_planner_process_calls_a_researcher_process(self):
        # A server of its own: the processes are killed at the end, their claims with them.
        server = Server()
        env = dict(os.environ, TURNSTREAM_URL=server.url, TURNSTREAM_SERVICE_KEY=SERVICE_KEY)
        workers = [subprocess.Popen([sys.executable, EXAMPLE, role], env=env)
                   for role in ("planner", "researcher")]
        try:
            turn_id = server.post("pyplan1", "the tides", agent="planner")
            info = server.wait_turn_end(turn_id)
            self.assertEqual(info["state"], "completed", info)
            self.assertEqual(info["agent"], "planner")
            self.assertEqual(info["text"], example_text("pyplan1", "the tides"))
            [request] = info["requests"]
            self.assertEqual(request["kind"], "agent_call")
            self.assertEqual(request["request_id"], "ask-1")
            self.assertEqual(request["call"]["agent"], "researcher")
            self.assertEqual(request["call"]["session_id"], "pyplan1.research")
            child_id = request["call"]["turn_id"]
            self.assertEqual(request["answered_by"], f"turn:{child_id}")
            self.assertEqual(request["answer"], {
                "turn_id": child_id, "state": "completed",
                "text": "the tides: three sources found, for session pyplan1."})
            status, child = server.api("GET", f"/turns/{child_id}")
            self.assertEqual(status, 200, child)
            self.assertEqual((child["agent"], child["session_id"], child["state"]),
                             ("researcher", "pyplan1.research", "completed"))
            self.assertEqual(child["text"], request["answer"]["text"])
        finally:
            for w in workers:
                w.kill()
                w.wait()
            server.stop()

    def test_the_example_planner_killed_while_it_waits_and_a_new_one_continues(self):
        server = Server()  # of its own, as above
        env = dict(os.environ, TURNSTREAM_URL=server.url, TURNSTREAM_SERVICE_KEY=SERVICE_KEY)

        def start(role):
            return subprocess.Popen([sys.executable, EXAMPLE, role], env=env)

        workers = []
        try:
            turn_id = server.post("pyplan9", "the wind", agent="planner")
            first = start("planner")
            workers.append(first)
            waiting = server.wait_open_requests(turn_id)
            self.assertEqual(waiting["requests"][0]["kind"], "agent_call")
            first.kill()  # it held no lease: the turn waits in the server, not in the process
            first.wait()
            workers += [start("researcher"), start("planner")]
            info = server.wait_turn_end(turn_id)
            self.assertEqual(info["state"], "completed", info)
            self.assertEqual(info["text"], example_text("pyplan9", "the wind"))
            self.assertEqual([r["answer"]["state"] for r in info["requests"]], ["completed"])
        finally:
            for w in workers:
                w.kill()
                w.wait()
            server.stop()

    def test_claim_of_some_agents_and_of_every_agent(self):
        plain = self.server.post("pyagents1", "for anyone")
        research = self.server.post("pyagents2", "for the researcher", agent="researcher")
        plan = self.server.post("pyagents3", "for the planner", agent="planner")
        client = WorkerClient(self.server.url, SERVICE_KEY, worker_id="py-agents")
        got = client.claim(wait_ms=0, max_turns=8, agents=["researcher"])
        self.assertEqual([(t.turn_id, t.agent, t.called_by) for t in got],
                         [(research, "researcher", None)])
        rest = client.claim(wait_ms=0, max_turns=8)  # (and any other test's left queued)
        self.assertLessEqual({(plain, "default"), (plan, "planner")},
                             {(t.turn_id, t.agent) for t in rest})
        for t in got + rest:
            t.complete()
        with self.assertRaises(ValueError):
            client.claim(wait_ms=0, agents=[])
        with self.assertRaises(WorkerApiError) as refused:
            client.claim(wait_ms=0, agents=["Not A Name"])
        self.assertEqual(refused.exception.status, 422)

        async def claim_async():
            aclient = AsyncWorkerClient(self.server.url, SERVICE_KEY, worker_id="py-agents-aio")
            turn_id = self.server.post("pyagents4", "async", agent="researcher")
            [turn] = await aclient.claim(wait_ms=0, max_turns=8, agents=["researcher"])
            self.assertEqual((turn.turn_id, turn.agent), (turn_id, "researcher"))
            await turn.complete()
        asyncio.run(claim_async())

    def test_another_process_continues_the_planner_and_the_call_returns_on_replay(self):
        runs = []

        def tracked(turn):
            runs.append((turn.continuation is not None, turn.replaying))
            planner(turn)

        turn_id = self.server.post("pyplan2", "the moon", agent="planner")
        first = Worker(self.server, tracked, ["planner"], "py-planner-a")
        waiting = self.server.wait_open_requests(turn_id)
        self.assertEqual(waiting["text"], "Asking the researcher about the moon. ")
        first.stop()  # the handler waiting there is let go
        research = Worker(self.server, researcher, ["researcher"], "py-researcher-2")
        second = Worker(self.server, tracked, ["planner"], "py-planner-b")
        try:
            info = self.server.wait_turn_end(turn_id)
            self.assertEqual(info["state"], "completed", info)
            self.assertEqual(info["text"], example_text("pyplan2", "the moon"))
            self.assertEqual(runs, [(False, False), (True, True)])
            self.assertEqual(len(info["requests"]), 1, "the replayed call opened no second call")
        finally:
            research.stop()
            second.stop()

    def test_a_child_that_ends_before_the_wait(self):
        turn_id = self.server.post("pyplan3", "the sun", agent="planner")
        server = self.server
        waits = []

        class SlowWait(WorkerClient):
            """Holds the planner's `wait` until the researcher's turn has answered the call."""

            def post(self, path, body, timeout=90):
                if path.endswith("/wait"):
                    server.wait_turn(turn_id, lambda t: "answer" in (t.get("requests") or [{}])[0],
                                     "the call's answer")
                    ack = super().post(path, body, timeout)
                    waits.append(ack["state"])
                    return ack
                return super().post(path, body, timeout)

        runs = []
        research = Worker(self.server, researcher, ["researcher"], "py-researcher-3")
        plan = Worker(self.server, lambda turn: (runs.append(1), planner(turn)), ["planner"],
                      None, client=SlowWait(self.server.url, SERVICE_KEY, worker_id="py-planner-3"))
        try:
            info = self.server.wait_turn_end(turn_id)
            self.assertEqual(info["state"], "completed", info)
            self.assertEqual(info["text"], example_text("pyplan3", "the sun"))
            self.assertEqual(waits, ["running"])
            self.assertEqual(runs, [1], "the handler that called went on; it was not run again")
        finally:
            research.stop()
            plan.stop()

    def test_chains_of_calls_a_cycle_and_one_too_deep(self):
        # Each turn calls one level further down and appends "+" to what came back; the call
        # that would go deeper than 8 is refused, and its code travels back up the chain.
        nexts = {
            "down": lambda turn: (f"{turn.session_id}.d", "down"),
            "out": lambda turn: (f"{turn.session_id}.b", "home"),  # A -> B ...
            "home": lambda turn: (turn.called_by["session_id"], "x"),  # ... -> A
        }

        def deep(turn):
            session, content = nexts[turn.user_message["content"]](turn)
            try:
                found = turn.call(agent="deep", session=session, content=content)
                turn.response(found["text"] + "+")
            except CallRefused as err:
                turn.response(err.code)

        worker = Worker(self.server, deep, ["deep"], "py-deep")
        try:
            info = self.server.wait_turn_end(self.server.post("pychain.deep", "down", "deep"))
            self.assertEqual(info["state"], "completed", info)
            self.assertEqual(info["text"], "call_depth_exceeded" + "+" * 8)
            info = self.server.wait_turn_end(self.server.post("pychain.top", "out", "deep"))
            self.assertEqual(info["state"], "completed", info)
            self.assertEqual(info["text"], "call_cycle+")
        finally:
            worker.stop()

    def test_a_call_into_a_full_session_is_sent_again_until_it_fits(self):
        server = Server()  # a session of its own, filled with turns nobody serves
        tries = []

        class Counting(WorkerClient):
            def post(self, path, body, timeout=90):
                is_call = path.endswith("/events") and body["events"][0]["type"] == "call"
                try:
                    ack = super().post(path, body, timeout)
                except WorkerApiError as err:
                    if is_call:
                        tries.append(err.status)
                    raise
                if is_call:
                    tries.append(200)
                return ack

        def calling(turn):
            turn.response(turn.call(agent="nobody", session="pyfull", content="one more")["state"])

        try:
            # A session takes a call's child behind at most 64 turns in flight.
            full = [server.post("pyfull", f"turn {i}", agent="nobody") for i in range(64)]
            turn_id = server.post("pycaller", "call into pyfull", agent="planner")
            client = Counting(server.url, SERVICE_KEY, worker_id="py-full", retry_ms=50)
            plan = Worker(server, calling, ["planner"], None, client=client)
            try:
                server.wait_turn(turn_id, lambda _: len(tries) >= 2, "two refused sends")
                self.assertEqual(tries[:2], [429, 429])
                self.assertEqual(server.api("POST", f"/turns/{full[0]}/cancel")[0], 200)
                waiting = server.wait_open_requests(turn_id)
                self.assertEqual(tries[-1], 200, "the call went in once there was room")
                child = waiting["requests"][0]["call"]["turn_id"]
                self.assertEqual(server.api("POST", f"/turns/{child}/cancel")[0], 200)
                info = server.wait_turn_end(turn_id)
                self.assertEqual((info["state"], info["text"]), ("completed", "cancelled"), info)
            finally:
                plan.stop()
        finally:
            server.stop()

    def refusing(self, outcomes):
        def handler(turn):
            turn.response("Before. ")
            for session in (turn.session_id, ""):  # its own session (a cycle); an empty target
                try:
                    turn.call({"agent": "researcher", "session": session, "content": "x"})
                    outcomes.append("answered")
                except CallRefused as err:
                    outcomes.append((err.status, err.code, err.request_id))
                    turn.response(f"{err.code}. ")
            turn.response("After.")
        return handler

    def check_refused(self, turn_id, outcomes, client):
        info = self.server.wait_turn_end(turn_id)
        self.assertEqual(info["state"], "completed", info)
        self.assertNotIn(f"/turns/{turn_id}/wait", client.sent,
                         "no call was opened, so the turn never waited")
        self.assertEqual(outcomes[0], (409, "call_cycle", "ask-1"))
        self.assertEqual(outcomes[1][0], 422)
        self.assertEqual(info["text"], f"Before. call_cycle. {outcomes[1][1]}. After.")
        self.assertNotIn("requests", info, "a refused call journals no request")

    def test_a_refused_call_raises_its_code_and_the_turn_goes_on(self):
        turn_id = self.server.post("pyplan4", "refuse", agent="planner")
        outcomes = []
        client = Recording(self.server.url, SERVICE_KEY, worker_id="py-planner-4")
        plan = Worker(self.server, self.refusing(outcomes), ["planner"], None, client=client)
        try:
            self.check_refused(turn_id, outcomes, client)
        finally:
            plan.stop()

    def test_asyncio_refused_call_and_three_calls_at_once(self):
        refused_turn = self.server.post("pyplan5", "refuse", agent="planner")
        fan_turn = self.server.post("pyplan6", "fan out", agent="fanner")
        outcomes = []
        held = threading.Event()

        async def refusing(turn):
            turn.response("Before. ")
            for session in (turn.session_id, ""):
                try:
                    await turn.call(agent="researcher", session=session, content="x")
                    outcomes.append("answered")
                except CallRefused as err:
                    outcomes.append((err.status, err.code, err.request_id))
                    turn.response(f"{err.code}. ")
            turn.response("After.")

        async def fan_out(turn):
            results = await asyncio.gather(*(
                turn.call(agent="researcher", session=f"pyfan.{what}", content=what,
                          attachments=[FILE] if what == "ok" else None)
                for what in ("ok", "boom", "held")))
            turn.response(" | ".join(
                f"{r['state']}{' (error)' if r.get('error') else ''}: {r['text']}"
                for r in results))

        def child(turn):
            what = turn.user_message["content"]
            if what == "held":
                turn.response("holding")
                held.wait(30)  # its end then meets the cancel (409 turn_cancelled)
                return
            if what == "boom":
                turn.response("partial")
                raise RuntimeError("the researcher broke")
            files = ",".join(a["name"] for a in turn.user_message.get("attachments", []))
            turn.response(f"{what} done" + (f" with {files}" if files else ""))

        stops = []

        async def main():
            stop = asyncio.Event()
            stops.append(stop)
            client = AsyncWorkerClient(self.server.url, SERVICE_KEY, worker_id="py-aio-calls")
            client.sync = recording

            async def handler(turn):
                await (refusing if turn.agent == "planner" else fan_out)(turn)
            await run_worker_async(client, handler, wait_ms=500, stop=stop,
                                   agents=["planner", "fanner"])

        recording = Recording(self.server.url, SERVICE_KEY, worker_id="py-aio-calls")
        research = Worker(self.server, child, ["researcher"], "py-researcher-6")
        loop = asyncio.new_event_loop()
        runner = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
        runner.start()
        try:
            self.check_refused(refused_turn, outcomes, recording)
            waiting = self.server.wait_turn(
                fan_turn, lambda t: len([r for r in t.get("requests", []) if "answer" in r]) == 2,
                "two answered calls")
            self.assertEqual(waiting["state"], "waiting")
            [open_call] = [r for r in waiting["requests"]
                           if r["call"]["session_id"] == "pyfan.held"]
            self.assertNotIn("answer", open_call)
            child_id = open_call["call"]["turn_id"]
            self.server.wait_turn(child_id, lambda t: t.get("text") == "holding", "its output")
            status, cancel = self.server.api("POST", f"/turns/{child_id}/cancel")
            self.assertEqual((status, cancel["state"]), (200, "cancelled"), cancel)
            held.set()
            info = self.server.wait_turn_end(fan_turn)
            self.assertEqual(info["state"], "completed", info)
            self.assertEqual(info["text"].split(" | "), [
                "completed: ok done with notes.txt", "failed (error): partial",
                "cancelled: holding"])
            self.assertEqual([r["answer"]["state"] for r in info["requests"]],
                             ["completed", "failed", "cancelled"])
        finally:
            held.set()
            loop.call_soon_threadsafe(lambda: [stop.set() for stop in stops])
            runner.join(30)
            self.assertFalse(runner.is_alive(), "the asyncio worker loop did not stop")
            loop.close()
            research.stop()


if __name__ == "__main__":
    unittest.main()
