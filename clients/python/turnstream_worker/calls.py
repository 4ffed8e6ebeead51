"""Agent calls (contract v1.3): the `call` event of a worker's `events` batch that opens one,
how a batch is cut so that a refused call takes nothing else with it, and whether a refusal is
the call's."""

CALL_KIND = "agent_call"


def call_event(request_id, agent, session, content, attachments=None):
    """The `call` event of one call; ValueError when a field is missing or of the wrong type
    (the server judges the values, an agent name or a session id, and refuses a bad one with
    422)."""
    if not isinstance(agent, str):
        raise ValueError("a call needs `agent`: the called agent's name")
    if not isinstance(session, str):
        raise ValueError("a call needs `session`: the id of the session it runs in")
    if not isinstance(content, str):
        raise ValueError("a call needs `content`: the message the called agent gets")
    event = {"type": "call", "request_id": request_id, "agent": agent, "session_id": session,
             "content": content}
    if attachments is not None:
        if not isinstance(attachments, (list, tuple)):
            raise ValueError("a call's `attachments` is a list of {url, media_type, name?}")
        event["attachments"] = list(attachments)
    return event


def call_fields(agent=None, session=None, content=None, attachments=None, request_id=None):
    """A call's fields, given as keywords or as one dict (`turn.call({"agent": ...})`)."""
    if isinstance(agent, dict):
        given = dict(agent)
        unknown = set(given) - {"agent", "session", "content", "attachments", "request_id"}
        if unknown:
            raise ValueError(f"a call has no field {', '.join(sorted(unknown))}")
        return call_fields(**given)
    return {"agent": agent, "session": session, "content": content, "attachments": attachments,
            "request_id": request_id}


def is_request(event):
    """Whether `event` opens a request (an ask or a call) rather than being output."""
    return event.get("type") in ("input_requested", "call")


def is_call(event):
    """Whether a journaled event (as sent, or as a continuation gives it back) is a call."""
    return event.get("type") == "call" or (
        event.get("type") == "input_requested" and event.get("kind") == CALL_KIND)


def refuses_call(err):
    """Whether the server's refusal of a batch holding only a call is a refusal of that call:
    409 call_cycle / call_depth_exceeded, or 422 (an empty or malformed target)."""
    status = getattr(err, "status", None)
    code = str(getattr(err, "code", ""))
    return status == 422 or (status == 409 and code.startswith("call_"))


def batches(events):
    """Cuts pending events into the batches they are sent in, in order: output together, each
    call alone (its request id, events). The server refuses a whole batch with a refused call,
    so a call's batch holds nothing else that would be lost with it."""
    out = []
    for event in events:
        if event.get("type") == "call":
            out.append((event["request_id"], [event]))
        elif out and out[-1][0] is None:
            out[-1][1].append(event)
        else:
            out.append((None, [event]))
    return out
