"""Runs a LangGraph graph (or any LangChain runnable) for a turn: its chat models' chunks become
`response` and `thinking`, its tool runs `tool` events, its `interrupt()`s the turn's asks, the
answers going back as `Command(resume=...)`. Needs the `langgraph` extra; asyncio (AsyncTurn)."""

import asyncio
import json

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.errors import GraphInterrupt
from langgraph.types import Command

from .asks import KINDS


class LangGraphTurn:
    """One turn run through a graph. The graph's checkpointer keeps its state under
    `thread_id` = the session id, so a turn that waited on an answer goes on from the graph's
    own checkpoint, in this process or in another one (there the checkpointer must be a durable
    one shared by the workers, e.g. SqliteSaver or PostgresSaver)."""

    def __init__(self, turn, graph, config=None):
        self.turn = turn
        self.graph = graph
        self.config = dict(config or {})
        self.config["configurable"] = dict(
            self.config.get("configurable") or {}, thread_id=turn.session_id
        )
        self.calls = []  # (call_id, name, args) of the tool calls the models made
        self.done = set()  # calls whose tool ended
        self.tools = {}  # tool run id -> call_id
        # Started calls are not started again when a tool that interrupted runs again.
        self.started = {
            e["call_id"] for e in (turn.continuation or {}).get("events", [])
            if e.get("type") == "tool" and e.get("status") == "started"
        }

    async def run(self, input=None):
        """Streams the graph to the end of its run for this turn, asking where it interrupts."""
        if self.turn.continuation is not None and self._checkpointed():
            # Claimed again after an ask: the graph waits at the interrupt that asked.
            snapshot = await self.graph.aget_state(self.config)
            self._remember_calls(snapshot.values)
            if not snapshot.interrupts:
                raise RuntimeError(
                    "the turn waits on an answer but the graph's checkpointer holds no "
                    f"interrupt for thread {self.turn.session_id}: workers that continue each "
                    "other's turns need a durable checkpointer they share"
                )
            step = await self._answer(snapshot.interrupts)
        else:
            step = input if input is not None else {
                "messages": [{"role": "user", "content": self.turn.user_message["content"]}]
            }
        while step is not None:
            if not await self._until_cancelled(self._stream(step)):
                return
            # A tool cut off by another's interrupt sends no end: none runs on past its stream.
            self.tools.clear()
            step = None
            if self._checkpointed():
                interrupts = (await self.graph.aget_state(self.config)).interrupts
                if interrupts:
                    step = await self._answer(interrupts)

    def _checkpointed(self):
        """A graph with a checkpointer (only those interrupt); not a plain runnable."""
        return hasattr(self.graph, "aget_state") and bool(getattr(self.graph, "checkpointer", None))

    async def _until_cancelled(self, work):
        """Runs work unless the turn is cancelled meanwhile (False then: the run is stopped)."""
        task = asyncio.ensure_future(work)
        cancelled = asyncio.ensure_future(self.turn.cancelled.wait())
        try:
            await asyncio.wait({task, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancelled.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return False
        task.result()
        return True

    async def _stream(self, step):
        async for event in self.graph.astream_events(step, self.config, version="v2"):
            if "nostream" in (event.get("tags") or []):
                continue
            kind = event["event"]
            data = event.get("data") or {}
            if kind == "on_chat_model_stream":
                self._chunk(data.get("chunk"))
            elif kind == "on_chat_model_end":
                self._remember_calls({"messages": [data.get("output")]})
            elif kind == "on_tool_start":
                self._tool_start(event, data)
            elif kind == "on_tool_end":
                self._tool_end(event, data.get("output"))
            elif kind == "on_tool_error":
                error = data.get("error")
                call_id = self.tools.pop(event["run_id"], event["run_id"])
                if not isinstance(error, GraphInterrupt):  # that one runs again once answered
                    self._done(call_id)
                    self.turn.tool(call_id, event["name"], "failed", output_preview=str(error))

    def _chunk(self, chunk):
        """A chat model's chunk: text to `response`, reasoning to `thinking`."""
        if chunk is None:
            return
        for block in getattr(chunk, "content_blocks", None) or []:
            if block.get("type") == "text":
                self.turn.response(block.get("text", ""))
            elif block.get("type") == "reasoning":
                self.turn.thinking(block.get("reasoning", ""))
            elif block.get("type") == "non_standard":
                value = block.get("value") or {}
                if value.get("type") == "thinking":  # Anthropic's, when not translated
                    self.turn.thinking(value.get("thinking", ""))

    def _remember_calls(self, values):
        messages = values.get("messages", []) if isinstance(values, dict) else []
        self.done |= {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
        for message in messages:
            if isinstance(message, AIMessage):
                for call in message.tool_calls:
                    known = any(c[0] == call["id"] for c in self.calls)
                    if call["id"] and not known:
                        self.calls.append((call["id"], call["name"], call["args"]))

    def _call_id(self, event, args):
        """The model's id for the tool call this run executes (the run's id when none fits)."""
        running = set(self.tools.values())
        fits = [c[0] for c in self.calls
                if c[1] == event["name"] and c[2] == args and c[0] not in running]
        # A node that interrupted runs all its tools again, those that ended included.
        fits.sort(key=lambda call_id: call_id in self.done)
        return fits[0] if fits else event["run_id"]

    def _done(self, call_id):
        self.done.add(call_id)

    def _tool_start(self, event, data):
        args = data.get("input")
        call_id = self._call_id(event, args)
        self.tools[event["run_id"]] = call_id
        if call_id not in self.started:
            self.started.add(call_id)
            self.turn.tool(call_id, event["name"], "started", input_preview=_preview(args))

    def _tool_end(self, event, output):
        call_id = self.tools.pop(event["run_id"], event["run_id"])
        status = "finished"
        if isinstance(output, ToolMessage):
            call_id = output.tool_call_id or call_id
            status = "failed" if output.status == "error" else "finished"
            output = output.content
        self._done(call_id)
        self.turn.tool(call_id, event["name"], status,
                       output_preview=output if isinstance(output, str) else _preview(output))

    async def _answer(self, interrupts):
        """Asks what the interrupts ask (at once, so they share one wait); the resume command."""
        answers = await asyncio.gather(*(self._ask(i) for i in interrupts))
        # By id: a node that interrupts again gets each earlier answer where it was asked.
        return Command(resume={i.id: answer for i, answer in zip(interrupts, answers)})

    def _ask(self, interrupt):
        value = interrupt.value
        if isinstance(value, str):
            value = {"prompt": value}
        if not isinstance(value, dict):
            raise ValueError(
                "interrupt() takes a question (a string or {'prompt', 'options'?}) or a tool "
                "call to approve or run in the browser ({'tool': {'call_id', 'name', 'input'}, "
                f"'kind'?: 'approval' | 'client_tool', 'prompt'?}}), not {value!r}"
            )
        kind = value.get("kind") or ("approval" if "tool" in value else "question")
        if kind not in KINDS:
            raise ValueError(f"interrupt kind is one of {', '.join(KINDS)}, not {kind!r}")
        fields = {k: value[k] for k in ("tool", "prompt", "options", "expires_at") if k in value}
        # The interrupt's id is the same in every process that resumes the graph's checkpoint.
        return self.turn.request(kind, value.get("request_id") or interrupt.id, **fields)


def _preview(value):
    return json.dumps(value, default=str, ensure_ascii=False)


async def run_graph(turn, graph, input=None, config=None):
    """Runs `graph` for `turn` (an AsyncTurn) until its run for the turn ends: the handler of
    run_worker_async is `lambda turn: run_graph(turn, graph)`. `input` defaults to
    {"messages": [the user's message]}; `config` is merged with thread_id = the session id."""
    await LangGraphTurn(turn, graph, config).run(input)
