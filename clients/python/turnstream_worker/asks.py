"""What a turn handler asks (contract v1.2) and how a continuation replays it: the
`input_requested` event an ask journals, and the bookkeeping that lets a handler run again from
its start in another process and meet, ask by ask, the answers given meanwhile. A call of
another agent (v1.3, `calls`) is a request too, answered when the called turn ends."""

import json

from .calls import CALL_KIND, is_call, is_request

KINDS = ("approval", "client_tool", "question")


class ContinuationMismatch(Exception):
    """A handler run again on a continuation asked something else than the run that journaled
    the request: answering it with the recorded answer could approve a call nobody saw."""

    def __init__(self, request_id, recorded, asked):
        super().__init__(
            f"request {request_id} was asked as {json.dumps(recorded)} and is now asked as "
            f"{json.dumps(asked)}: a handler must ask the same things, in the same order, when "
            "it runs again"
        )
        self.request_id = request_id


def request_event(kind, request_id, tool=None, prompt=None, options=None, expires_at=None):
    """The `input_requested` event of one ask; ValueError when the ask is malformed.
    `expires_at` is Unix milliseconds or a datetime."""
    if kind not in KINDS:
        raise ValueError(f"kind is one of {', '.join(KINDS)}")
    event = {"type": "input_requested", "request_id": request_id, "kind": kind}
    if kind == "question":
        if not isinstance(prompt, str):
            raise ValueError("a question needs a `prompt`")
        if tool is not None:
            raise ValueError("a question has no `tool`")
    else:
        if not isinstance(tool, dict) or not isinstance(tool.get("call_id"), str) \
                or not isinstance(tool.get("name"), str):
            raise ValueError(f"a {kind} request needs tool={{'call_id', 'name', 'input'}}")
        event["tool"] = {"call_id": tool["call_id"], "name": tool["name"],
                         "input": tool.get("input")}
    if prompt is not None:
        event["prompt"] = prompt
    if options is not None:
        event["options"] = list(options)
    if expires_at is not None:
        if hasattr(expires_at, "timestamp"):
            expires_at = int(expires_at.timestamp() * 1000)
        event["expires_at"] = int(expires_at)
    return event


def _essence(event, recorded=None):
    """What identifies an ask: its kind, tool (name and input), prompt and options; for a call
    its agent and session, and its content when the journaled one (`recorded`) says it."""
    recorded = event if recorded is None else recorded
    if is_call(event):
        call = event.get("call") or {}
        essence = {"kind": CALL_KIND, "agent": event.get("agent", call.get("agent")),
                   "session_id": event.get("session_id", call.get("session_id"))}
        if "content" in recorded:
            essence["content"] = event.get("content")
        return essence
    tool = event.get("tool")
    return {
        "kind": event.get("kind"),
        "tool": {"name": tool.get("name"), "input": tool.get("input")} if tool else None,
        "prompt": event.get("prompt"),
        "options": event.get("options"),
    }


def _script(events):
    """The journaled events as the handler's run produced them: consecutive deltas of one kind
    joined."""
    items = []
    for event in events:
        kind = event.get("type")
        if kind in ("thinking", "response"):
            if items and items[-1].get("type") == kind and "text" in items[-1]:
                items[-1]["text"] += event["delta"]
            else:
                items.append({"type": kind, "text": event["delta"]})
        else:
            items.append(event)
    return items


class Asks:
    """A turn's asks across runs of its handler. Ids default to `ask-1`, `ask-2`, ... in the
    order the handler asks, so a handler run again from its start gives the same ids; an ask
    the journal holds gets its recorded answer at once.

    A handler run again on a continuation *replays*: its output is held against the turn's
    events so far, and what the journal already has is not sent again. The replay ends where
    the journal does, at the first output that differs from it, or at the first ask the journal
    does not hold; from there on everything is sent. So a handler that skips an ask whose
    answer it found in `turn.answers` goes on as well as one that asks again."""

    def __init__(self, continuation=None):
        continuation = continuation or {}
        self.count = 0
        self.answers = {}
        self.script = _script(continuation.get("events", []))
        self.at = 0  # the next item of the script the handler is expected to produce
        self.offset = 0  # how much of a text item it has produced
        self.recorded = {}  # request id -> its input_requested event
        self.position = {}  # request id -> its index in the script
        for index, event in enumerate(self.script):
            if is_request(event):
                self.recorded[event["request_id"]] = event
                self.position[event["request_id"]] = index
        self.add_answers(continuation.get("answers", []))

    @property
    def replaying(self):
        return self.at < len(self.script)

    def diverge(self):
        """Ends the replay: everything from now on is sent."""
        self.at = len(self.script)
        self.offset = 0

    def replayed(self, event):
        """Whether `event` (thinking, response or tool) is output the journal already holds:
        True means do not send it. The first event that differs ends the replay."""
        if not self.replaying:
            return False
        item = self.script[self.at]
        if event["type"] in ("thinking", "response"):
            if item.get("type") == event["type"] and "text" in item \
                    and item["text"].startswith(event["delta"], self.offset):
                self.offset += len(event["delta"])
                if self.offset == len(item["text"]):
                    self.at += 1
                    self.offset = 0
                return True
        elif self.offset == 0 and item == event:
            self.at += 1
            return True
        self.diverge()
        return False

    def add_answers(self, answers):
        """Records [{request_id, answer, by}] (the first answer of a request stays)."""
        for given in answers:
            self.answers.setdefault(given["request_id"], given)

    def forget(self, request_id):
        """Forgets a request the server refused (a call): nothing of it was journaled."""
        self.recorded.pop(request_id, None)

    def next_id(self, request_id=None):
        self.count += 1
        return request_id or f"ask-{self.count}"

    def take(self, event):
        """Takes one ask's event: (False, None) for a new request (journal it and wait), or
        (True, answer) for one the journal holds (answer is {request_id, answer, by}, or None
        while unanswered). ContinuationMismatch when the journal holds another request under
        that id."""
        rid = event["request_id"]
        recorded = self.recorded.get(rid)
        if recorded is None:
            self.diverge()
            self.recorded[rid] = event
            return False, None
        if _essence(recorded) != _essence(event, recorded):
            raise ContinuationMismatch(rid, _essence(recorded), _essence(event, recorded))
        # The replay goes on after this ask (output the handler left out before it is skipped).
        index = self.position.get(rid, -1)
        if index >= self.at:
            self.at = index + 1
            self.offset = 0
        return True, self.answers.get(rid)
