"""turnstream-worker: a client of turnstream's worker API (contract v1.2) for Python 3.9+, with
the standard library only. Claim turns, stream their output through a turn handle (batched,
retried with the same seq, lease renewed), ask a person or the browser and wait for the answer
(request_approval, request_client_tool, ask), and end them; sync (threads) and asyncio.
"""

import asyncio
import json
import os
import threading
import time
import urllib.error
import urllib.request

from .asks import Asks, ContinuationMismatch, request_event

__all__ = [
    "ContinuationMismatch",
    "TurnSuspended",
    "WorkerApiError",
    "WorkerClient",
    "Turn",
    "run_worker",
    "AsyncWorkerClient",
    "AsyncTurn",
    "run_worker_async",
]


class WorkerApiError(Exception):
    """A refusal from the server, in its {"error": {"code", "message"}} shape."""

    def __init__(self, status, code, message, body=None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.body = body


class TurnSuspended(Exception):
    """An ask that will not be answered in this run of the handler: the turn waits for its
    answer and is continued by whichever worker claims it then (the handler runs again there).
    Raised by an ask when no loop can resume this handler, or when the loop gave up on it."""

    def __init__(self, turn_id, why):
        super().__init__(f"turn {turn_id} waits for input ({why}); it continues when claimed again")
        self.turn_id = turn_id


def _retryable(err):
    if isinstance(err, WorkerApiError):
        return err.status >= 500 or err.status == 429
    return isinstance(err, (OSError, urllib.error.URLError))


class WorkerClient:
    """Talks to one turnstream server with a service key."""

    def __init__(self, base_url, service_key, worker_id=None, batch_ms=20, retry_ms=200):
        self.base_url = base_url.rstrip("/")
        self.service_key = service_key
        self.worker_id = worker_id or f"python-{os.getpid()}"
        self.batch_ms = batch_ms
        self.retry_ms = retry_ms

    def post(self, path, body, timeout=90):
        """One POST; the JSON body, or WorkerApiError (or a network error)."""
        req = urllib.request.Request(
            f"{self.base_url}/api/worker{path}",
            data=json.dumps(body).encode(),
            method="POST",
            headers={
                "authorization": f"Bearer {self.service_key}",
                "content-type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as res:
                return json.loads(res.read() or b"null")
        except urllib.error.HTTPError as e:
            try:
                payload = json.loads(e.read() or b"null")
            except ValueError:
                payload = None
            err = (payload or {}).get("error") or {}
            raise WorkerApiError(
                e.code, err.get("code", "http_error"), err.get("message", str(e)), payload
            ) from None

    def claim_raw(self, wait_ms=30000, max_turns=1):
        body = {"worker_id": self.worker_id, "wait_ms": wait_ms, "max_turns": max_turns}
        return self.post("/claim", body, timeout=wait_ms / 1000 + 30)["turns"]

    def claim(self, wait_ms=30000, max_turns=1):
        """Claims up to max_turns turns, waiting up to wait_ms for one: a list of Turn."""
        return [Turn(self, t) for t in self.claim_raw(wait_ms, max_turns)]


class _Lease:
    """What sync and async turn handles share: ids, the seq, the asks and the outcome of
    requests."""

    def _init(self, client, turn):
        self.client = client
        self.turn_id = turn["turn_id"]
        self.session_id = turn["session_id"]
        self.user_message = turn["user_message"]
        self.history = turn["history"]
        self.continuation = turn.get("continuation")
        self.asks = Asks(self.continuation)
        self.suspended = False
        # Set by a loop that can resume this handler when its continuation is claimed there.
        self.on_suspend = None
        self._given_up = None
        self._wait_wanted = False
        self._open = {}  # request id -> what the handler waits on in this process
        self.error = None
        self._pending = []
        self._take_lease(turn)

    def _take_lease(self, turn):
        """Starts working under the lease of a claim (the first one, or a continuation's)."""
        self.lease = turn["lease"]["token"]
        self.ttl_s = max(1.0, turn["lease"]["expires_at"] / 1000 - time.time())
        self.state = "running"
        self.seq = (turn.get("continuation") or {}).get("seq", 0)
        self.suspended = False

    @property
    def answers(self):
        """Answers given so far, by request id (what request_approval and co. return)."""
        return {rid: given["answer"] for rid, given in self.asks.answers.items()}

    @property
    def replaying(self):
        """True while a handler run on a continuation re-runs what the journal already holds."""
        return self.asks.replaying

    def _replayed(self, event):
        # Replayed output is in the journal already (the run that asked sent it).
        return event["type"] != "input_requested" and self.asks.replayed(event)

    def _ask(self, kind, request_id, **fields):
        """Takes one ask: (answer, None) when the journal holds its answer, else (None, id)
        once its event is pending (or already journaled) and a wait is wanted."""
        if self.error is not None:
            raise self.error
        event = request_event(kind, self.asks.next_id(request_id), **fields)
        recorded, given = self.asks.take(event)
        if given is not None:
            return given, None
        if not recorded:
            self._push(event)
        self._wait_wanted = True
        return None, event["request_id"]

    def _wait_once(self):
        """Ends the lease (`wait`, with the next seq): the turn waits for the open asks."""
        self._wait_wanted = False
        self._send_once("/wait", {})
        self.suspended = True

    def thinking(self, delta):
        if delta:
            self._push({"type": "thinking", "delta": delta})

    def response(self, delta):
        if delta:
            self._push({"type": "response", "delta": delta})

    def tool(self, call_id, name, status, input_preview=None, output_preview=None):
        call = {"type": "tool", "call_id": call_id, "name": name, "status": status}
        if input_preview is not None:
            call["input_preview"] = input_preview
        if output_preview is not None:
            call["output_preview"] = output_preview
        self._push(call)

    def _stopped(self, err):
        if self.error is None:
            self.error = err
        if isinstance(err, WorkerApiError):
            if err.code == "turn_cancelled":
                self.state = "cancelled"
            elif err.code == "lease_lost":
                self.state = "interrupted"

    def _send_once(self, path, body):
        """Sends with the next seq, retrying (same seq) while the failure is transient."""
        if self.error is not None:
            raise self.error
        seq = self.seq
        wait = self.client.retry_ms / 1000
        while True:
            try:
                ack = self.client.post(
                    f"/turns/{self.turn_id}{path}", dict(body, lease=self.lease, seq=seq)
                )
                self.seq = seq + 1
                self.state = ack["state"]
                return ack
            except Exception as err:  # noqa: BLE001 - sorted into retry or stop
                if _retryable(err):
                    time.sleep(wait)
                    wait = min(wait * 2, 5.0)
                    continue
                self._stopped(err)
                raise

    def _heartbeat_once(self):
        if self.suspended:
            return self.state
        ack = self.client.post(f"/turns/{self.turn_id}/heartbeat", {"lease": self.lease})
        if ack["state"] == "cancelled":
            self._stopped(WorkerApiError(409, "turn_cancelled", "the turn was cancelled"))
        return ack["state"]


class Turn(_Lease):
    """A claimed turn (sync). Output methods return at once; a thread sends it in order, batched
    every batch_ms, and renews the lease. `cancelled` (a threading.Event) is set when the turn is
    cancelled or its lease is lost: stop working then."""

    def __init__(self, client, turn):
        self._init(client, turn)
        self.cancelled = threading.Event()
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._wake = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _push(self, event):
        if self.cancelled.is_set() or self._replayed(event):
            return
        with self._lock:
            self._pending.append(event)
        self._wake.set()

    def _run(self):
        last = time.monotonic()
        while not self._done.is_set():
            woke = self._wake.wait(self.ttl_s / 3)
            if self._done.is_set():
                return
            try:
                if woke:
                    time.sleep(self.client.batch_ms / 1000)
                    self._wake.clear()
                    self.flush()
                elif time.monotonic() - last >= self.ttl_s / 3:
                    with self._send_lock:
                        self._heartbeat_once()
            except Exception:  # noqa: BLE001 - the outcome is kept on the handle
                pass
            last = time.monotonic()
            if self.error is not None:
                self.cancelled.set()
                return

    def flush(self):
        """Sends what is pending now; returns once the server accepted it."""
        with self._send_lock:
            if self.suspended:
                return
            with self._lock:
                events, self._pending = self._pending, []
            if events:
                try:
                    self._send_once("/events", {"events": events})
                finally:
                    if self.error is not None:
                        self.cancelled.set()

    def request_approval(self, tool, prompt=None, expires_at=None, request_id=None):
        """Asks for a tool call's approval (tool={"call_id", "name", "input"}) and blocks until
        it is answered: {"approved", "reason"?}, or {"timed_out": True}."""
        return self.request("approval", request_id, tool=tool, prompt=prompt, expires_at=expires_at)

    def request_client_tool(self, tool, prompt=None, expires_at=None, request_id=None):
        """Asks the browser to run a tool (tool={"call_id", "name", "input"}) and blocks until
        it is answered: {"output"} or {"error"}, or {"timed_out": True}."""
        return self.request("client_tool", request_id, tool=tool, prompt=prompt,
                            expires_at=expires_at)

    def ask(self, prompt, options=None, expires_at=None, request_id=None):
        """Asks a question and blocks until it is answered: {"text"}, or {"timed_out": True}."""
        return self.request("question", request_id, prompt=prompt, options=options,
                            expires_at=expires_at)

    def request(self, kind, request_id=None, **fields):
        """Opens a request of `kind` and returns its answer. The request is journaled with the
        output before it; the turn then waits, holding no lease, and this call returns when this
        process claims the turn again (run_worker does). Where another process continues the
        turn, the handler runs there again from its start: asks the journal holds return at once
        with their answers (they must be the same asks, else ContinuationMismatch) and output up
        to the last of them is not sent again."""
        given, rid = self._ask(kind, request_id, **fields)
        if given is not None:
            return given["answer"]
        answered = threading.Event()
        self._open[rid] = answered
        self.flush()
        with self._send_lock:
            if not self.suspended:
                try:
                    self._wait_once()
                finally:
                    if self.error is not None:
                        self.cancelled.set()
        if self.on_suspend is not None:
            self.on_suspend(self)
        else:
            self._give_up("nothing here claims it again")
        answered.wait()
        given = self.asks.answers.get(rid)
        if given is not None:
            return given["answer"]
        raise self._given_up or self.error or TurnSuspended(self.turn_id, "let go")

    def resume(self, turn):
        """Continues under a claim of this turn's continuation: the open ask returns."""
        with self._send_lock:
            self._take_lease(turn)
            self.asks.add_answers(turn["continuation"].get("answers", []))
        for rid, answered in list(self._open.items()):
            if rid in self.asks.answers:
                del self._open[rid]
                answered.set()

    def _give_up(self, why):
        """Lets go of a suspended turn: its open ask raises TurnSuspended."""
        self._given_up = TurnSuspended(self.turn_id, why)
        self.close()
        for answered in self._open.values():
            answered.set()
        self._open.clear()

    def heartbeat(self):
        """Renews the lease; the turn's state (sets `cancelled` on a cancel)."""
        with self._send_lock:
            state = self._heartbeat_once()
        if self.error is not None:
            self.cancelled.set()
        return state

    def _end(self, path, body):
        self.flush()
        with self._send_lock:
            try:
                return self._send_once(path, body)
            finally:
                self.close()

    def complete(self):
        return self._end("/complete", {})

    def fail(self, message):
        return self._end("/fail", {"error": {"message": str(message) or "the worker failed"}})

    def close(self):
        self._done.set()
        self._wake.set()
        if self.error is not None:
            self.cancelled.set()


def run_worker(client, handler, concurrency=4, wait_ms=30000, stop=None, suspend_s=900):
    """Claims turns and runs handler(turn) for each in a thread, until `stop` (a
    threading.Event) is set, with up to `concurrency` turns holding a lease at once. A handler
    that returns completes its turn (unless it ended it); one that raises fails it with the
    exception's message.

    A handler blocked on an ask holds no slot. When this loop claims that turn's continuation,
    the ask returns and the handler goes on; a continuation claimed here whose handler is not
    waiting here (another process asked, or `suspend_s` passed) runs the handler again with
    `turn.continuation`. Once `stop` is set, handlers still waiting are let go (their asks raise
    TurnSuspended): the turns continue wherever they are claimed next."""
    stop = stop or threading.Event()
    slots = threading.Semaphore(concurrency)
    threads = []
    suspended = {}  # turn id -> (turn, timer)
    lock = threading.Lock()

    def let_go(turn_id, why):
        with lock:
            entry = suspended.pop(turn_id, None)
        if entry is not None:
            entry[1].cancel()
            entry[0]._give_up(why)

    def on_suspend(turn):
        timer = threading.Timer(
            suspend_s, let_go, args=(turn.turn_id, f"no answer within {suspend_s} s here")
        )
        timer.daemon = True
        with lock:
            suspended[turn.turn_id] = (turn, timer)
        timer.start()
        slots.release()

    def holds_lease(turn):
        return turn.state == "running" and not turn.suspended and not turn.cancelled.is_set()

    def work(turn):
        try:
            handler(turn)
            if holds_lease(turn):
                turn.complete()
        except Exception as err:  # noqa: BLE001 - reported as the turn's error
            if holds_lease(turn):
                try:
                    turn.fail(str(err))
                except Exception:  # noqa: BLE001
                    pass
        finally:
            if turn.suspended:
                # Returned while its turn waits: whoever claims it next runs it again.
                let_go(turn.turn_id, "the handler returned")
            else:
                slots.release()
            turn.close()

    while not stop.is_set():
        slots.acquire()
        free = 1
        while free < concurrency and slots.acquire(blocking=False):
            free += 1
        try:
            raws = client.claim_raw(wait_ms=wait_ms, max_turns=free)
        except Exception:  # noqa: BLE001 - try again after a pause
            raws = []
            time.sleep(client.retry_ms / 1000)
        for _ in range(free - len(raws)):
            slots.release()
        for raw in raws:
            entry = None
            if raw.get("continuation"):
                with lock:
                    entry = suspended.pop(raw["turn_id"], None)
            if entry is not None:
                entry[1].cancel()
                entry[0].resume(raw)
                continue
            turn = Turn(client, raw)
            turn.on_suspend = on_suspend
            t = threading.Thread(target=work, args=(turn,), daemon=True)
            t.start()
            threads.append(t)
    for turn_id in list(suspended):
        let_go(turn_id, "the worker stopped")
    for t in threads:
        t.join()


class AsyncWorkerClient:
    """The asyncio flavour of WorkerClient (requests run in threads: no extra dependency)."""

    def __init__(self, base_url, service_key, worker_id=None, batch_ms=20, retry_ms=200):
        self.sync = WorkerClient(base_url, service_key, worker_id, batch_ms, retry_ms)
        self.batch_ms = batch_ms
        self.retry_ms = retry_ms

    def post(self, path, body, timeout=90):
        return self.sync.post(path, body, timeout)

    async def claim(self, wait_ms=30000, max_turns=1):
        turns = await asyncio.to_thread(self.sync.claim_raw, wait_ms, max_turns)
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
            await self._call(self._send_once, "/events", {"events": events})
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

    async def request(self, kind, request_id=None, **fields):
        """As Turn.request, awaited."""
        given, rid = self._ask(kind, request_id, **fields)
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
                           suspend_s=900):
    """Claims turns and runs `await handler(turn)` for each until `stop` (an asyncio.Event) is
    set; completes or fails turns, and resumes or lets go of handlers waiting on an ask, as
    run_worker does."""
    stop = stop or asyncio.Event()
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
                client.sync.claim_raw, wait_ms, concurrency - active[0]
            )
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
