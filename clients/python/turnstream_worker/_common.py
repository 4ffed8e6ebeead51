"""What the threaded and the asyncio clients share: the errors they raise (WorkerApiError,
CallRefused, TurnSuspended), which failures are retried, and _Lease, the turn handle's ids, seq,
asks, calls and requests' outcome that Turn and AsyncTurn build on.
"""

import time
import urllib.error

from .asks import Asks, request_event
from .calls import batches, call_event, is_request, refuses_call


class WorkerApiError(Exception):
    """A refusal from the server, in its {"error": {"code", "message"}} shape."""

    def __init__(self, status, code, message, body=None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.detail = message
        self.body = body


class CallRefused(WorkerApiError):
    """A call the server refused (409 call_cycle, 409 call_depth_exceeded, 422 for an empty
    or malformed target): `code` says which. Nothing of its batch was journaled and the turn goes
    on; a handler that does not catch it fails its turn with the message."""

    def __init__(self, err, request_id):
        WorkerApiError.__init__(self, err.status, err.code, err.detail, err.body)
        self.request_id = request_id


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


class _Lease:
    """What sync and async turn handles share: ids, the seq, the asks and the outcome of
    requests."""

    def _init(self, client, turn):
        self.client = client
        self.turn_id = turn["turn_id"]
        self.session_id = turn["session_id"]
        self.user_message = turn["user_message"]
        self.history = turn["history"]
        # The agent the turn is for ("default" unless its message named one); a turn another
        # agent called says by whom: {"turn_id", "session_id", "request_id"}.
        self.agent = turn.get("agent") or "default"
        self.called_by = turn.get("called_by")
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
        return not is_request(event) and self.asks.replayed(event)

    def _ask(self, kind, request_id, **fields):
        """Takes one ask: (answer, None) when the journal holds its answer, else (None, id)
        once its event is pending (or already journaled) and a wait is wanted."""
        if self.error is not None:
            raise self.error
        return self._take(request_event(kind, self.asks.next_id(request_id), **fields))

    def _take_call(self, agent, session, content, attachments, request_id):
        """Takes one call, as _ask takes an ask."""
        if self.error is not None:
            raise self.error
        return self._take(call_event(self.asks.next_id(request_id), agent, session, content,
                                     attachments))

    def _take(self, event):
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

    def _send_events(self, events, refused):
        """Sends `events` in batches, each call alone; a call the server refuses is handed to
        `refused(request_id, CallRefused)` (nothing of it was journaled, the seq stays) and the
        rest goes on."""
        for call_id, batch in batches(events):
            try:
                self._send_once("/events", {"events": batch}, call_id)
            except CallRefused as err:
                self.asks.forget(call_id)
                refused(call_id, err)

    def _send_once(self, path, body, call_id=None):
        """Sends with the next seq, retrying (same seq) while the failure is transient. With
        `call_id` (the batch is that call alone), a refusal of the call raises CallRefused and
        leaves the turn as it was."""
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
                if call_id is not None and refuses_call(err):
                    raise CallRefused(err, call_id) from None
                self._stopped(err)
                raise

    def _heartbeat_once(self):
        if self.suspended:
            return self.state
        ack = self.client.post(f"/turns/{self.turn_id}/heartbeat", {"lease": self.lease})
        if ack["state"] == "cancelled":
            self._stopped(WorkerApiError(409, "turn_cancelled", "the turn was cancelled"))
        return ack["state"]
