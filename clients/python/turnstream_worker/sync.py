"""The threaded (sync) client: WorkerClient (the HTTP requests, which the asyncio client runs
in threads too), Turn (output sent by a thread of its own, asks and calls that block) and
run_worker.
"""

import json
import os
import threading
import time
import urllib.error
import urllib.request

from ._common import TurnSuspended, WorkerApiError, _Lease
from .calls import call_fields


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

    def claim_raw(self, wait_ms=30000, max_turns=1, agents=None):
        """The claim's raw turns; with `agents` (names), only turns of those agents."""
        body = {"worker_id": self.worker_id, "wait_ms": wait_ms, "max_turns": max_turns}
        if agents is not None:
            body["agents"] = agent_names(agents)
        return self.post("/claim", body, timeout=wait_ms / 1000 + 30)["turns"]

    def claim(self, wait_ms=30000, max_turns=1, agents=None):
        """Claims up to max_turns turns (of `agents`, when given; else of every agent), waiting
        up to wait_ms for one: a list of Turn."""
        return [Turn(self, t) for t in self.claim_raw(wait_ms, max_turns, agents)]


def agent_names(agents):
    """`agents` as the claim sends it: a non-empty list of names (the server judges the
    names); ValueError otherwise."""
    if isinstance(agents, str) or not agents or not all(isinstance(a, str) for a in agents):
        raise ValueError("`agents` is a non-empty list of agent names")
    return list(agents)


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
        self._refusals = {}  # request id -> CallRefused, for a call the server refused
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
                    self._send_events(events, self._refused)
                finally:
                    if self.error is not None:
                        self.cancelled.set()

    def _refused(self, request_id, err):
        """A call the server refused: its `call` raises `err`."""
        self._refusals[request_id] = err
        answered = self._open.pop(request_id, None)
        if answered is not None:
            answered.set()

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

    def call(self, agent=None, session=None, content=None, attachments=None, request_id=None):
        """Calls another agent (v1.3): posts `content` as a message for `agent` in session
        `session` and blocks until that turn ends: its result {"turn_id", "state", "text",
        "error"?} (`state` is how the called turn ended: completed, failed, cancelled or
        interrupted). The fields may also come as one dict. The turn waits as for an ask, and
        continues the same way (see `request`). Raises CallRefused (`code` call_cycle,
        call_depth_exceeded or invalid_body) when the server refuses the call; the turn goes
        on."""
        f = call_fields(agent, session, content, attachments, request_id)
        given, rid = self._take_call(f["agent"], f["session"], f["content"], f["attachments"],
                                     f["request_id"])
        return self._await(given, rid)

    def request(self, kind, request_id=None, **fields):
        """Opens a request of `kind` and returns its answer. The request is journaled with the
        output before it; the turn then waits, holding no lease, and this call returns when this
        process claims the turn again (run_worker does). Where another process continues the
        turn, the handler runs there again from its start: asks the journal holds return at once
        with their answers (they must be the same asks, else ContinuationMismatch) and output up
        to the last of them is not sent again."""
        return self._await(*self._ask(kind, request_id, **fields))

    def _await(self, given, rid):
        """Blocks until request `rid` is answered (or returns `given`'s answer at once)."""
        if given is not None:
            return given["answer"]
        answered = threading.Event()
        self._open[rid] = answered
        self.flush()
        refused = self._refusals.pop(rid, None)
        if refused is not None:
            self._wait_wanted = False
            raise refused
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


def run_worker(client, handler, concurrency=4, wait_ms=30000, stop=None, suspend_s=900,
               agents=None):
    """Claims turns and runs handler(turn) for each in a thread, until `stop` (a
    threading.Event) is set, with up to `concurrency` turns holding a lease at once; with
    `agents` (names), only turns of those agents. A handler
    that returns completes its turn (unless it ended it); one that raises fails it with the
    exception's message.

    A handler blocked on an ask holds no slot. When this loop claims that turn's continuation,
    the ask returns and the handler goes on; a continuation claimed here whose handler is not
    waiting here (another process asked, or `suspend_s` passed) runs the handler again with
    `turn.continuation`. Once `stop` is set, handlers still waiting are let go (their asks raise
    TurnSuspended): the turns continue wherever they are claimed next."""
    if agents is not None:
        agent_names(agents)
    stop = stop or threading.Event()
    slots = threading.Semaphore(concurrency)
    threads = []
    suspended = {}  # turn id -> (turn, timer)
    lock = threading.Lock()
    refused = None

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
            raws = client.claim_raw(wait_ms=wait_ms, max_turns=free, agents=agents)
        except WorkerApiError as err:
            if err.status == 422:
                # A claim the server finds malformed (a bad agent name) fails every time.
                refused = err
                for _ in range(free):
                    slots.release()
                break
            raws = []
            time.sleep(client.retry_ms / 1000)
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
    if refused is not None:
        raise refused
