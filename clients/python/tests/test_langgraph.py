"""turnstream_worker.langgraph against the real server binary, with LangChain's fake chat model:
a text reply (and its reasoning), a tool call with its tool events, an interrupt that asks for
an approval, answered after a server restart and continued by a new worker from the graph's
checkpoint (and answered while its worker waits, resumed there), a cancel, an error, and the
README's agent as written. Each checks the turn's journaled events and final message exactly."""

import asyncio
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

if importlib.util.find_spec("langgraph") is None and not os.environ.get("TURNSTREAM_LANGGRAPH"):
    # Plain python3 runs the standard-library suites; ./run runs this one in its virtualenv.
    raise unittest.SkipTest("langgraph is not installed (see requirements-langgraph.txt)")

from fake_models import scripted, tool_call  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.types import interrupt  # noqa: E402
from typing_extensions import TypedDict  # noqa: E402
from langgraph_worker import build_graph  # noqa: E402
from server import SERVICE_KEY, Server  # noqa: E402

from turnstream_worker import AsyncWorkerClient, run_worker_async  # noqa: E402
from turnstream_worker.langgraph import run_graph  # noqa: E402


REQUEST_KINDS = ("approval", "client_tool", "question")


def script(events, turn_id):
    """The turn's journaled events, consecutive deltas of one kind joined (batching splits them
    as it goes), each with the fields that say what happened."""
    keep = {"tool": ("call_id", "name", "status", "input_preview", "output_preview"),
            "input_requested": ("tool", "prompt"),
            "input_given": ("answer",),
            "turn_ended": ("state",)}
    items = []
    for event in events:
        kind = event.get("kind")
        if event.get("turn_id") != turn_id or kind in ("message_received", "turn_queued"):
            continue
        kind = {"response_delta": "response", "thinking_delta": "thinking"}.get(kind, kind)
        if kind in REQUEST_KINDS:  # an input_requested event is sent as its request's kind
            kind = f"input_requested {kind}"
            event = dict(event, kind="input_requested")
        if kind in ("response", "thinking"):
            if items and items[-1][0] == kind:
                items[-1] = (kind, items[-1][1] + event["delta"])
            else:
                items.append((kind, event["delta"]))
        else:
            fields = keep.get(event["kind"], ())
            items.append((kind, {k: event[k] for k in fields if k in event}))
    return items


class LangGraphTest(unittest.TestCase):
    def setUp(self):
        self.server = Server()

    def tearDown(self):
        self.server.stop()

    def with_worker(self, graph, until, worker_id, input=lambda turn: None):
        """Runs run_graph for every claimed turn (run_worker_async) while until() runs."""
        async def main():
            stop = asyncio.Event()
            client = AsyncWorkerClient(self.server.url, SERVICE_KEY, worker_id=worker_id)
            loop = asyncio.get_running_loop().create_task(run_worker_async(
                client, lambda turn: run_graph(turn, graph, input(turn)), wait_ms=500, stop=stop))
            try:
                return await asyncio.to_thread(until)
            finally:
                stop.set()
                await asyncio.wait_for(loop, 30)

        return asyncio.run(main())

    def run_turn(self, session, content, graph):
        cursor = self.server.cursor(session)
        turn_id = self.server.post(session, content)
        info = self.with_worker(graph, lambda: self.server.wait_turn_end(turn_id), "py-lg")
        return info, script(self.server.journal(session, cursor, turn_id), turn_id)

    def test_a_text_reply_and_its_reasoning(self):
        model = scripted(AIMessage("Hello there, friend.",
                                   additional_kwargs={"reasoning_content": "A greeting."}))
        info, events = self.run_turn("lg1", "hi", build_graph(model, InMemorySaver()))
        self.assertEqual(info["state"], "completed", info)
        self.assertEqual((info["text"], info["thinking"]), ("Hello there, friend.", "A greeting."))
        self.assertEqual(events, [
            ("turn_started", {}),
            ("response", "Hello there, friend."),
            ("thinking", "A greeting."),
            ("turn_ended", {"state": "completed"}),
        ])

    def test_a_runnable_that_is_not_a_graph_and_a_graph_with_no_checkpointer(self):
        model = scripted("Just a model.")
        turn_id = self.server.post("lg8", "hi")
        graph = model  # with_worker's handler passes the user's text to it instead of a state
        info = self.with_worker(
            graph, lambda: self.server.wait_turn_end(turn_id), "py-lg-e",
            input=lambda turn: turn.user_message["content"])
        self.assertEqual((info["state"], info["text"]), ("completed", "Just a model."), info)
        # A graph compiled without a checkpointer (it cannot interrupt; nothing is looked up).
        turn_id = self.server.post("lg8", "again")
        graph = build_graph(scripted("No memory."), checkpointer=None)
        info = self.with_worker(graph, lambda: self.server.wait_turn_end(turn_id), "py-lg-e")
        self.assertEqual((info["state"], info["text"]), ("completed", "No memory."), info)

    def test_a_tool_call_with_its_tool_events_and_the_final_message(self):
        model = scripted(tool_call("add", {"a": 2, "b": 3}, "call_add"), "2 + 3 = 5.")
        info, events = self.run_turn("lg2", "what is 2 + 3?", build_graph(model, InMemorySaver()))
        self.assertEqual(info["state"], "completed", info)
        self.assertEqual(info["text"], "2 + 3 = 5.")
        self.assertEqual(events, [
            ("turn_started", {}),
            ("tool", {"call_id": "call_add", "name": "add", "status": "started",
                      "input_preview": '{"a": 2, "b": 3}'}),
            ("tool", {"call_id": "call_add", "name": "add", "status": "finished",
                      "output_preview": "5"}),
            ("response", "2 + 3 = 5."),
            ("turn_ended", {"state": "completed"}),
        ])

    def test_an_interrupt_answered_after_a_server_restart_resumes_the_graph(self):
        checkpointer = InMemorySaver()
        model = scripted(tool_call("deploy", {"target": "prod"}, "call_deploy"),
                         "Deployed: prod is live.")
        cursor = self.server.cursor("lg3")
        turn_id = self.server.post("lg3", "deploy prod")
        # The graph interrupts, the turn asks and waits; this worker then stops.
        waiting = self.with_worker(build_graph(model, checkpointer),
                                   lambda: self.server.wait_open_requests(turn_id), "py-lg-a")
        self.assertEqual(
            {k: waiting["requests"][0].get(k) for k in ("kind", "prompt", "tool")},
            {"kind": "approval", "prompt": "Deploy prod?",
             "tool": {"call_id": "call_deploy", "name": "deploy", "input": {"target": "prod"}}},
        )
        self.server.restart()
        request_id = waiting["requests"][0]["request_id"]
        self.server.give(turn_id, {"request_id": request_id, "approved": True})
        # A new worker, with a new graph on the same checkpointer, continues the turn.
        info = self.with_worker(build_graph(model, checkpointer),
                                lambda: self.server.wait_turn_end(turn_id), "py-lg-b")
        self.assertEqual(info["state"], "completed", info)
        self.assertEqual(info["text"], "Deployed: prod is live.")
        deploy = {"call_id": "call_deploy", "name": "deploy"}
        self.assertEqual(script(self.server.journal("lg3", cursor, turn_id), turn_id), [
            ("turn_started", {}),
            ("tool", dict(deploy, status="started", input_preview='{"target": "prod"}')),
            ("input_requested approval", {"prompt": "Deploy prod?",
                                          "tool": dict(deploy, input={"target": "prod"})}),
            ("input_given", {"answer": {"approved": True}}),
            ("tool", dict(deploy, status="finished", output_preview="prod is live")),
            ("response", "Deployed: prod is live."),
            ("turn_ended", {"state": "completed"}),
        ])

    def test_an_interrupt_answered_while_its_worker_waits_resumes_there(self):
        model = scripted(tool_call("deploy", {"target": "qa"}, "call_qa"), "Not deployed.")
        cursor = self.server.cursor("lg6")
        turn_id = self.server.post("lg6", "deploy qa")

        def until():
            waiting = self.server.wait_open_requests(turn_id)
            self.server.give(turn_id, {"request_id": waiting["requests"][0]["request_id"],
                                       "approved": False, "reason": "frozen"})
            return self.server.wait_turn_end(turn_id)

        info = self.with_worker(build_graph(model, InMemorySaver()), until, "py-lg-c")
        self.assertEqual((info["state"], info["text"]), ("completed", "Not deployed."), info)
        # The tool that interrupted ran again on the answer: the same call, started once.
        qa = {"call_id": "call_qa", "name": "deploy"}
        self.assertEqual(script(self.server.journal("lg6", cursor, turn_id), turn_id), [
            ("turn_started", {}),
            ("tool", dict(qa, status="started", input_preview='{"target": "qa"}')),
            ("input_requested approval", {"prompt": "Deploy qa?",
                                          "tool": dict(qa, input={"target": "qa"})}),
            ("input_given", {"answer": {"approved": False, "reason": "frozen"}}),
            ("tool", dict(qa, status="finished", output_preview="not deployed: frozen")),
            ("response", "Not deployed."),
            ("turn_ended", {"state": "completed"}),
        ])

    def test_a_tool_that_ended_and_runs_again_with_one_that_interrupted_keeps_its_id(self):
        calls = [{"name": "add", "args": {"a": 1, "b": 1}, "id": "call_add"},
                 {"name": "deploy", "args": {"target": "dev"}, "id": "call_dev"}]
        model = scripted(AIMessage("", tool_calls=calls), "Done.")
        turn_id = self.server.post("lg11", "add and deploy")

        def until():
            request = self.server.wait_open_requests(turn_id)["requests"][0]
            self.server.give(turn_id, {"request_id": request["request_id"], "approved": True})
            return self.server.wait_turn_end(turn_id)

        info = self.with_worker(build_graph(model, InMemorySaver()), until, "py-lg-h")
        self.assertEqual((info["state"], info["text"]), ("completed", "Done."), info)
        # ToolNode runs both calls again on the answer; each stays one tool of the turn.
        self.assertEqual(
            sorted((t["call_id"], t["status"], t.get("output_preview")) for t in info["tools"]),
            [("call_add", "finished", "2"), ("call_dev", "finished", "dev is live")],
        )

    def test_a_node_that_interrupts_twice_gets_each_answer_where_it_asked(self):
        class Order(TypedDict, total=False):
            reply: str

        def order(state):
            colour = interrupt("Colour?")["text"]
            size = interrupt({"prompt": "Size?", "options": ["M", "L"]})["text"]
            return {"reply": f"{colour}, {size}"}

        builder = StateGraph(Order)
        builder.add_node("order", order)
        builder.add_edge(START, "order")
        graph = builder.compile(checkpointer=InMemorySaver())
        turn_id = self.server.post("lg9", "order")

        def until():
            for prompt, text in (("Colour?", "red"), ("Size?", "L")):
                request = self.server.wait_turn(
                    turn_id, lambda t: any(r["prompt"] == prompt and "answer" not in r
                                           for r in t.get("requests", [])), prompt)["requests"][-1]
                self.server.give(turn_id, {"request_id": request["request_id"], "text": text})
            return self.server.wait_turn_end(turn_id)

        info = self.with_worker(graph, until, "py-lg-f", input=lambda turn: {})
        self.assertEqual(info["state"], "completed", info)
        self.assertEqual([(r["prompt"], r["answer"]) for r in info["requests"]],
                         [("Colour?", {"text": "red"}), ("Size?", {"text": "L"})])
        values = graph.get_state({"configurable": {"thread_id": "lg9"}}).values
        self.assertEqual(values, {"reply": "red, L"})

    def test_interrupts_of_parallel_nodes_are_asked_at_once_and_resumed_each_with_its_own(self):
        class Order(TypedDict, total=False):
            colour: str
            size: str

        builder = StateGraph(Order)
        builder.add_node("colour", lambda s: {"colour": interrupt("Colour?")["text"]})
        builder.add_node("size", lambda s: {"size": interrupt({"prompt": "Size?",
                                                               "options": ["M", "L"]})["text"]})
        builder.add_edge(START, "colour")
        builder.add_edge(START, "size")
        graph = builder.compile(checkpointer=InMemorySaver())
        turn_id = self.server.post("lg10", "order")

        def until():
            requests = self.server.wait_open_requests(turn_id, 2)["requests"]
            ids = {r["prompt"]: r["request_id"] for r in requests}
            self.assertEqual([r.get("options") for r in requests if r["prompt"] == "Size?"],
                             [["M", "L"]])
            self.server.give(turn_id, {"request_id": ids["Size?"], "text": "L"})
            self.server.give(turn_id, {"request_id": ids["Colour?"], "text": "red"})
            return self.server.wait_turn_end(turn_id)

        info = self.with_worker(graph, until, "py-lg-g", input=lambda turn: {})
        self.assertEqual(info["state"], "completed", info)
        values = graph.get_state({"configurable": {"thread_id": "lg10"}}).values
        self.assertEqual(values, {"colour": "red", "size": "L"})

    def test_a_cancel_stops_the_graph(self):
        self.server.stop()
        self.server = Server("--worker-lease-secs", "3")  # heartbeats (which hear it) every second
        model = scripted("Starting. ")
        stopped = threading.Event()

        async def agent(state):
            reply = await model.ainvoke(state["messages"])
            try:
                await asyncio.Event().wait()  # a model call that takes its time
            except asyncio.CancelledError:
                stopped.set()
                raise
            return {"messages": [reply]}

        builder = StateGraph(MessagesState)
        builder.add_node("agent", agent)
        builder.add_edge(START, "agent")
        turn_id = self.server.post("lg7", "go")

        def until():
            self.server.wait_turn(turn_id, lambda t: t["text"] == "Starting. ", "text")
            status, _ = self.server.api("POST", f"/turns/{turn_id}/cancel")
            self.assertEqual(status, 200)
            self.assertTrue(stopped.wait(30), "the graph's run was not stopped")
            return self.server.wait_turn_end(turn_id)

        info = self.with_worker(builder.compile(checkpointer=InMemorySaver()), until, "py-lg-d")
        self.assertEqual((info["state"], info["text"]), ("cancelled", "Starting. "), info)

    def test_an_error_fails_the_turn_with_its_message_and_keeps_the_text(self):
        model = scripted("Looking it up.")

        async def agent(state):
            return {"messages": [await model.ainvoke(state["messages"])]}

        def lookup(state):
            raise RuntimeError("the index is down")

        builder = StateGraph(MessagesState)
        builder.add_node("agent", agent)
        builder.add_node("lookup", lookup)
        builder.add_edge(START, "agent")
        builder.add_edge("agent", "lookup")
        graph = builder.compile(checkpointer=InMemorySaver())
        info, events = self.run_turn("lg5", "find it", graph)
        self.assertEqual((info["state"], info["error"]), ("failed", "the index is down"), info)
        self.assertEqual((info["text"], info["message"]["status"]), ("Looking it up.", "failed"))
        self.assertEqual(events, [
            ("turn_started", {}),
            ("response", "Looking it up."),
            ("turn_ended", {"state": "failed"}),
        ])

    def test_the_readme_agent_runs_as_written_with_a_fake_model(self):
        with open(os.path.join(HERE, "..", "README.md")) as f:
            section = f.read().split("## A LangGraph agent", 1)[1]
        agent = re.search(r"```python\n(.*?)```\n", section, re.S).group(1)
        self.assertLessEqual(len(agent.splitlines()), 25)
        model = 'scripted(tool_call("add", {"a": 2, "b": 3}, "call_add"), "It is 5.")'
        code = agent.replace("from langchain_openai import ChatOpenAI",
                             "from fake_models import scripted, tool_call").replace(
            'ChatOpenAI(model="gpt-4o-mini")', model)
        self.assertEqual(code.count("scripted"), 2)
        cursor = self.server.cursor("lg4")
        turn_id = self.server.post("lg4", "2 + 3?")
        worker = subprocess.Popen(
            [sys.executable, "-c", code], cwd=os.path.join(HERE, ".."),
            env=dict(os.environ, PYTHONPATH=HERE, TURNSTREAM_URL=self.server.url,
                     TURNSTREAM_SERVICE_KEY=SERVICE_KEY),
        )
        try:
            info = self.server.wait_turn_end(turn_id)
        finally:
            worker.kill()
            worker.wait()
        self.assertEqual(info["state"], "completed", info)
        self.assertEqual(info["text"], "It is 5.")
        self.assertEqual(script(self.server.journal("lg4", cursor, turn_id), turn_id), [
            ("turn_started", {}),
            ("tool", {"call_id": "call_add", "name": "add", "status": "started",
                      "input_preview": json.dumps({"a": 2, "b": 3})}),
            ("tool", {"call_id": "call_add", "name": "add", "status": "finished",
                      "output_preview": "5"}),
            ("response", "It is 5."),
            ("turn_ended", {"state": "completed"}),
        ])


if __name__ == "__main__":
    unittest.main()
