// A turn's journal as a browser reads it: the session's SSE stream from a cursor taken before
// the turn, up to the turn's end, consecutive deltas of one kind joined (how output is batched
// is not the contract; its text, order and count are).
import { SERVICE_KEY } from "../server.mjs";

export async function cursorOf(server, session) {
  const { body } = await server.api("GET", `/sessions/${session}/history`);
  return body.cursor ?? "";
}

/** The turn's events from `cursor`: `[{event, ...fields}]` without ids and timestamps. */
export async function journalOf(server, session, cursor, turnId) {
  const stop = new AbortController();
  const timer = setTimeout(() => stop.abort(new Error(`no turn_ended of ${turnId} within 30 s`)), 30000);
  const url = `${server.url}/api/stream?session=${encodeURIComponent(session)}&cursor=${encodeURIComponent(cursor)}`;
  const res = await fetch(url, { headers: { authorization: `Bearer ${SERVICE_KEY}` }, signal: stop.signal });
  const events = [];
  let buffer = "";
  const decoder = new TextDecoder();
  try {
    for await (const bytes of res.body) {
      buffer += decoder.decode(bytes, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const lines = frame.split("\n");
        const field = (name) => lines.filter((l) => l.startsWith(`${name}:`)).map((l) => l.slice(name.length + 1).trim()).join("\n");
        const data = field("data");
        if (!data) continue;
        const event = field("event");
        const { id, ts, session_id, turn_id, ...fields } = JSON.parse(data);
        if (turn_id !== turnId) continue;
        // `kind` is the event's own, except in input_requested (the request's kind).
        if (fields.kind === event) delete fields.kind;
        const last = events[events.length - 1];
        if ((event === "response_delta" || event === "thinking") && last?.event === event) last.delta += fields.delta;
        else events.push({ event, ...fields });
        if (event === "turn_ended") return events;
      }
    }
  } finally {
    clearTimeout(timer);
    stop.abort();
  }
  throw new Error(`the stream ended before turn ${turnId} did: ${JSON.stringify(events)}`);
}
