// Agent calls (contract v1.3): the `call` event of a worker's `events` batch that opens one,
// how a batch is cut so that a refused call takes nothing else with it, and the error a
// refused call rejects with.

import { WorkerApiError } from "./errors.js";

/** The request kind the server journals for a call. */
export const CALL_KIND = "agent_call";

/**
 * A call the server refused (`409 call_cycle`, `409 call_depth_exceeded`, `422` for an empty
 * or malformed target): `code` says which. Nothing of its batch was journaled and the turn goes on;
 * a handler that does not catch it fails its turn with the message.
 */
export class CallRefused extends WorkerApiError {
  constructor(err, requestId) {
    super(err.status, err.code, err.detail ?? err.message, err.body);
    this.name = "CallRefused";
    this.requestId = requestId;
  }
}

/** Whether the server's refusal of a batch holding only a call is a refusal of that call. */
export function refusesCall(err) {
  if (!(err instanceof WorkerApiError)) return false;
  return err.status === 422 || (err.status === 409 && String(err.code).startsWith("call_"));
}

/**
 * The `call` event of one call: `{ agent, session, content, attachments? }`. Throws a
 * TypeError when a field is missing or of the wrong type; the server judges the values (an
 * agent name, a session id) and refuses a bad one with `422`.
 */
export function callEvent(requestId, { agent, session, content, attachments } = {}) {
  if (typeof agent !== "string") throw new TypeError("a call needs `agent`: the called agent's name");
  if (typeof session !== "string") throw new TypeError("a call needs `session`: the id of the session it runs in");
  if (typeof content !== "string") throw new TypeError("a call needs `content`: the message the called agent gets");
  const event = { type: "call", request_id: requestId, agent, session_id: session, content };
  if (attachments !== undefined) {
    if (!Array.isArray(attachments)) throw new TypeError("a call's `attachments` is an array of `{ url, media_type, name? }`");
    event.attachments = attachments;
  }
  return event;
}

/** Whether `event` opens a request (an ask or a call) rather than being output. */
export function isRequest(event) {
  return event.type === "input_requested" || event.type === "call";
}

/** Whether a journaled event (as sent, or as the server returns it in a continuation) is a call. */
export function isCall(event) {
  return event.type === "call" || (event.type === "input_requested" && event.kind === CALL_KIND);
}

/**
 * Cuts pending events into the batches they are sent in: output together, each call alone, in
 * order. The server refuses a whole batch with a refused call, so a call's batch holds nothing
 * else that would be lost with it.
 */
export function batches(events) {
  const out = [];
  for (const event of events) {
    const last = out[out.length - 1];
    if (event.type === "call") out.push({ call: event, events: [event] });
    else if (last && !last.call) last.events.push(event);
    else out.push({ call: null, events: [event] });
  }
  return out;
}
