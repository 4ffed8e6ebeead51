"""The asyncio client: AsyncWorkerClient (WorkerClient's requests run in threads), AsyncTurn
(output sent by tasks, asks and calls awaited) and run_worker_async.
"""

import asyncio

from ._common import TurnSuspended, WorkerApiError, _Lease
from .calls import call_fields
from .sync import WorkerClient, agent_names


class AsyncWorkerClient:
    """The asyncio flavour of WorkerClient (requests run in threads: no extra dependency)."""

    def __init__(self, base_url, service_key, worker_id=None, batch_ms=20, retry_ms=200):
        self.sync = WorkerClient(base_url, service_key, worker_id, batch_ms, retry_ms)
        self.batch_ms = batch_ms
        self.retry_ms = retry_ms

    def post(self, path, body, timeout=90):
        return self.sync.post(path, body, timeout)

    async def claim(self, wait_ms=30000, max_turns=1, agents=None):
        """Claims up to max_turns turns (of `agents`, when given), waiting up to wait_ms for
        one: a list of AsyncTurn."""
        turns = await asyncio.to_thread(self.sync.claim_raw, wait_ms, max_turns, agents)
        return [AsyncTurn(self, t) for t in turns]


class AsyncTurn(_Lease):
    """A claimed turn (asyncio). Output methods return at once; output is sent in order, batched
    every batch_ms; `cancelled` (an asyncio.Event) is set on a cancel or a lost lease. Asks are
    awaited; several at once (asyncio.gather) share one wait."""

    def __init__(self, client, turn):
        self._init(client, turn)
        self.cancelled = asyncio.Event()
        self._send = asyncio.Lock()
        self._flush_task = None
        self._beat = asyncio.get_running_loop().create_task(self._beats())

    def _push(self, event):
        if self.cancelled.is_set() or self._replayed(event):
            return
        self._pending.append(event)
        self._schedule()

    def _schedule(self):
        if self._flush_task is None:
            self._flush_task = asyncio.get_running_loop().create_task(self._later())

    async def _later(self):
        await asyncio.sleep(self.client.batch_ms / 1000)
        self._flush_task = None
        try:
            await self.flush()
        except Exception:  # noqa: BLE001 - the outcome is kept on the handle
            pass

    async def _beats(self):
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            try:
                await self.heartbeat()
            except Exception:  # noqa: BLE001
                pass
            if self.error is not None:
                return

    async def _call(self, fn, *args):
        async with self._send:
            try:
                return await asyncio.to_thread(fn, *args)
            finally:
                if self.error is not None:
                    self.cancelled.set()
                    for waiter in self._open.values():
                        if not waiter.done():
                            waiter.set_exception(self.error)
                    self._open.clear()

    async def flush(self):
        """Sends what is pending now (then `wait` when asks are open)."""
        if self.suspended:
            return
        events, self._pending = self._pending, []
        if events:
            refusals = []
            try:
                await self._call(self._send_events, events, lambda *r: refusals.append(r))
            finally:
                for rid, err in refusals:  # calls the server refused: their awaits raise
                    waiter = self._open.pop(rid, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_exception(err)
        if self._wait_wanted and self._open and not self.suspended:
            await self._call(self._wait_once)
            if self.on_suspend is not None:
                self.on_suspend(self)
            else:
                self._give_up("nothing here claims it again")

    async def heartbeat(self):
        return await self._call(self._heartbeat_once)

    async def request_approval(self, tool, prompt=None, expires_at=None, request_id=None):
        """Asks for a tool call's approval (tool={"call_id", "name", "input"}):
        {"approved", "reason"?}, or {"timed_out": True}."""
        return await self.request("approval", request_id, tool=tool, prompt=prompt,
                                  expires_at=expires_at)

    async def request_client_tool(self, tool, prompt=None, expires_at=None, request_id=None):
        """Asks the browser to run a tool (tool={"call_id", "name", "input"}): {"output"} or
        {"error"}, or {"timed_out": True}."""
        return await self.request("client_tool", request_id, tool=tool, prompt=prompt,
                                  expires_at=expires_at)

    async def ask(self, prompt, options=None, expires_at=None, request_id=None):
        """Asks a question: {"text"}, or {"timed_out": True}."""
        return await self.request("question", request_id, prompt=prompt, options=options,
                                  expires_at=expires_at)

    async def call(self, agent=None, session=None, content=None, attachments=None,
                   request_id=None):
        """As Turn.call, awaited; several calls at once (asyncio.gather) run at once."""
        f = call_fields(agent, session, content, attachments, request_id)
        return await self._await(*self._take_call(f["agent"], f["session"], f["content"],
                                                  f["attachments"], f["request_id"]))

    async def request(self, kind, request_id=None, **fields):
        """As Turn.request, awaited."""
        return await self._await(*self._ask(kind, request_id, **fields))

    async def _await(self, given, rid):
        if given is not None:
            return given["answer"]
        answered = asyncio.get_running_loop().create_future()
        self._open[rid] = answered
        self._schedule()
        return await answered

    def resume(self, turn):
        """Continues under a claim of this turn's continuation: the asks it answers return."""
        self._take_lease(turn)
        self.asks.add_answers(turn["continuation"].get("answers", []))
        for rid, answered in list(self._open.items()):
            given = self.asks.answers.get(rid)
            if given is not None:
                del self._open[rid]
                if not answered.done():
                    answered.set_result(given["answer"])
        if self._open:
            self._wait_wanted = True
        if self._pending or self._open:
            self._schedule()

    def _give_up(self, why):
        """Lets go of a suspended turn: its open asks raise TurnSuspended."""
        self._given_up = TurnSuspended(self.turn_id, why)
        self.close()
        for answered in self._open.values():
            if not answered.done():
                answered.set_exception(self._given_up)
        self._open.clear()

    async def _end(self, path, body):
        if self._flush_task is not None:
            self._flush_task.cancel()
            self._flush_task = None
        await self.flush()
        try:
            return await self._call(self._send_once, path, body)
        finally:
            self.close()

    async def complete(self):
        return await self._end("/complete", {})

    async def fail(self, message):
        return await self._end("/fail", {"error": {"message": str(message) or "the worker failed"}})

    def close(self):
        self._beat.cancel()


async def run_worker_async(client, handler, concurrency=4, wait_ms=30000, stop=None,
                           suspend_s=900, agents=None):
    """Claims turns (of `agents`, when given) and runs `await handler(turn)` for each until
    `stop` (an asyncio.Event) is set; completes or fails turns, and resumes or lets go of
    handlers waiting on an ask or a call, as run_worker does."""
    if agents is not None:
        agent_names(agents)
    stop = stop or asyncio.Event()
    refused = None
    running = set()
    suspended = {}  # turn id -> (turn, timer handle)
    active = [0]  # turns holding a lease
    changed = asyncio.Event()

    def release():
        active[0] -= 1
        changed.set()

    def let_go(turn_id, why):
        entry = suspended.pop(turn_id, None)
        if entry is not None:
            entry[1].cancel()
            entry[0]._give_up(why)

    def on_suspend(turn):
        timer = asyncio.get_running_loop().call_later(
            suspend_s, let_go, turn.turn_id, f"no answer within {suspend_s} s here"
        )
        suspended[turn.turn_id] = (turn, timer)
        release()

    def holds_lease(turn):
        return turn.state == "running" and not turn.suspended and not turn.cancelled.is_set()

    async def work(turn):
        try:
            await handler(turn)
            if holds_lease(turn):
                await turn.complete()
        except Exception as err:  # noqa: BLE001 - reported as the turn's error
            if holds_lease(turn):
                try:
                    await turn.fail(str(err))
                except Exception:  # noqa: BLE001
                    pass
        finally:
            if turn.suspended:
                let_go(turn.turn_id, "the handler returned")
            else:
                release()
            turn.close()

    async def stopped():
        await stop.wait()
        changed.set()

    watcher = asyncio.get_running_loop().create_task(stopped())
    while not stop.is_set():
        if active[0] >= concurrency:
            changed.clear()
            await changed.wait()
            continue
        try:
            raws = await asyncio.to_thread(
                client.sync.claim_raw, wait_ms, concurrency - active[0], agents
            )
        except WorkerApiError as err:
            if err.status == 422:
                # A claim the server finds malformed (a bad agent name) fails every time.
                refused = err
                break
            await asyncio.sleep(client.retry_ms / 1000)
            continue
        except Exception:  # noqa: BLE001 - try again after a pause
            await asyncio.sleep(client.retry_ms / 1000)
            continue
        for raw in raws:
            active[0] += 1
            entry = suspended.pop(raw["turn_id"], None) if raw.get("continuation") else None
            if entry is not None:
                entry[1].cancel()
                entry[0].resume(raw)
                continue
            turn = AsyncTurn(client, raw)
            turn.on_suspend = on_suspend
            task = asyncio.get_running_loop().create_task(work(turn))
            running.add(task)
            task.add_done_callback(running.discard)
    watcher.cancel()
    for turn_id in list(suspended):
        let_go(turn_id, "the worker stopped")
    if running:
        await asyncio.wait(running)
    if refused is not None:
        raise refused
