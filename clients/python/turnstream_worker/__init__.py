"""turnstream-worker: a client of turnstream's worker API (contract v1.1) for Python 3.9+, with
the standard library only. Claim turns, stream their output through a turn handle (batched,
retried with the same seq, lease renewed), and end them; sync (threads) and asyncio.
"""

import asyncio
import json
import os
import threading
import time
import urllib.error
import urllib.request

__all__ = [
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
    """What sync and async turn handles share: ids, the seq and the outcome of requests."""

    def _init(self, client, turn):
        self.client = client
        self.turn_id = turn["turn_id"]
        self.session_id = turn["session_id"]
        self.user_message = turn["user_message"]
        self.history = turn["history"]
        self.lease = turn["lease"]["token"]
        self.ttl_s = max(1.0, turn["lease"]["expires_at"] / 1000 - time.time())
        self.state = "running"
        self.seq = 0
        self.error = None
        self._pending = []

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
        if self.cancelled.is_set():
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
            with self._lock:
                events, self._pending = self._pending, []
            if events:
                try:
                    self._send_once("/events", {"events": events})
                finally:
                    if self.error is not None:
                        self.cancelled.set()

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


def run_worker(client, handler, concurrency=4, wait_ms=30000, stop=None):
    """Claims turns and runs handler(turn) for each in a thread, until `stop` (a
    threading.Event) is set. A handler that returns completes its turn (unless it ended it); one
    that raises fails it with the exception's message."""
    stop = stop or threading.Event()
    slots = threading.Semaphore(concurrency)
    threads = []

    def work(turn):
        try:
            handler(turn)
            if turn.state == "running" and not turn.cancelled.is_set():
                turn.complete()
        except Exception as err:  # noqa: BLE001 - reported as the turn's error
            if turn.state == "running" and not turn.cancelled.is_set():
                try:
                    turn.fail(str(err))
                except Exception:  # noqa: BLE001
                    pass
        finally:
            turn.close()
            slots.release()

    while not stop.is_set():
        slots.acquire()
        free = 1
        while free < concurrency and slots.acquire(blocking=False):
            free += 1
        try:
            turns = client.claim(wait_ms=wait_ms, max_turns=free)
        except Exception:  # noqa: BLE001 - try again after a pause
            turns = []
            time.sleep(client.retry_ms / 1000)
        for _ in range(free - len(turns)):
            slots.release()
        for turn in turns:
            t = threading.Thread(target=work, args=(turn,), daemon=True)
            t.start()
            threads.append(t)
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
    every batch_ms; `cancelled` (an asyncio.Event) is set on a cancel or a lost lease."""

    def __init__(self, client, turn):
        self._init(client, turn)
        self.cancelled = asyncio.Event()
        self._send = asyncio.Lock()
        self._flush_task = None
        self._beat = asyncio.get_running_loop().create_task(self._beats())

    def _push(self, event):
        if self.cancelled.is_set():
            return
        self._pending.append(event)
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

    async def flush(self):
        events, self._pending = self._pending, []
        if events:
            await self._call(self._send_once, "/events", {"events": events})

    async def heartbeat(self):
        return await self._call(self._heartbeat_once)

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


async def run_worker_async(client, handler, concurrency=4, wait_ms=30000, stop=None):
    """Claims turns and runs `await handler(turn)` for each until `stop` (an asyncio.Event) is
    set; completes or fails turns as run_worker does."""
    stop = stop or asyncio.Event()
    running = set()

    async def work(turn):
        try:
            await handler(turn)
            if turn.state == "running" and not turn.cancelled.is_set():
                await turn.complete()
        except Exception as err:  # noqa: BLE001 - reported as the turn's error
            if turn.state == "running" and not turn.cancelled.is_set():
                try:
                    await turn.fail(str(err))
                except Exception:  # noqa: BLE001
                    pass
        finally:
            turn.close()

    while not stop.is_set():
        if len(running) >= concurrency:
            await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            continue
        try:
            turns = await client.claim(wait_ms=wait_ms, max_turns=concurrency - len(running))
        except Exception:  # noqa: BLE001 - try again after a pause
            await asyncio.sleep(client.retry_ms / 1000)
            continue
        for turn in turns:
            task = asyncio.get_running_loop().create_task(work(turn))
            running.add(task)
            task.add_done_callback(running.discard)
    if running:
        await asyncio.wait(running)
