// What a turn handler asks (contract v1.2) and how a continuation replays it: the
// `input_requested` event an ask journals, and the bookkeeping that lets a handler run again
// from its start in another process and meet, ask by ask, the answers given meanwhile. A call
// of another agent (v1.3, `calls.js`) is a request too, answered when the called turn ends.

import { CALL_KIND, isCall, isRequest } from "./calls.js";

/** The kinds of request an agent may open. */
export const KINDS = ["approval", "client_tool", "question"];

/**
 * A handler run again on a continuation asked something else than the run that journaled the
 * request: answering it with the recorded answer could approve a call nobody saw.
 */
export class ContinuationMismatch extends Error {
  constructor(requestId, recorded, asked) {
    super(
      `request ${requestId} was asked as ${JSON.stringify(recorded)} and is now asked as ` +
        `${JSON.stringify(asked)}: a handler must ask the same things, in the same order, when it runs again`,
    );
    this.name = "ContinuationMismatch";
    this.requestId = requestId;
  }
}

/** The `input_requested` event of one ask; throws a TypeError when the ask is malformed. */
export function requestEvent(kind, requestId, { tool, prompt, options, expiresAt } = {}) {
  if (!KINDS.includes(kind)) throw new TypeError(`kind is one of ${KINDS.join(", ")}`);
  const event = { type: "input_requested", request_id: requestId, kind };
  if (kind === "question") {
    if (typeof prompt !== "string") throw new TypeError("a question needs a `prompt`");
  } else {
    if (!tool || typeof tool.call_id !== "string" || typeof tool.name !== "string") {
      throw new TypeError(`a ${kind} request needs \`tool: { call_id, name, input }\``);
    }
    event.tool = { call_id: tool.call_id, name: tool.name, input: tool.input ?? null };
  }
  if (prompt !== undefined) event.prompt = prompt;
  if (options !== undefined) event.options = options;
  if (expiresAt !== undefined) event.expires_at = expiresAt instanceof Date ? expiresAt.getTime() : expiresAt;
  return event;
}

/** JSON equality, whatever the order of object keys. */
export function sameJson(a, b) {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k) => Object.hasOwn(b, k) && sameJson(a[k], b[k]));
}

/**
 * What identifies an ask: its kind, tool (name and input), prompt and options; for a call its
 * agent and session, and its content when the journaled one (`recorded`) says it.
 */
function essence(event, recorded = event) {
  if (isCall(event)) {
    const call = { kind: CALL_KIND, agent: event.agent ?? event.call?.agent ?? null };
    call.session_id = event.session_id ?? event.call?.session_id ?? null;
    if (recorded.content !== undefined) call.content = event.content ?? null;
    return call;
  }
  return {
    kind: event.kind,
    tool: event.tool ? { name: event.tool.name, input: event.tool.input ?? null } : null,
    prompt: event.prompt ?? null,
    options: event.options ?? null,
  };
}

/** The journaled events as the handler's run produced them: consecutive deltas of one kind joined. */
function script(events) {
  const items = [];
  for (const e of events) {
    const last = items[items.length - 1];
    if (e.type === "thinking" || e.type === "response") {
      if (last?.type === e.type) last.text += e.delta;
      else items.push({ type: e.type, text: e.delta });
    } else {
      items.push(e);
    }
  }
  return items;
}

/**
 * A turn's asks across runs of its handler. Ids default to `ask-1`, `ask-2`, ... in the order
 * the handler asks, so a handler run again from its start gives the same ids; an ask the
 * journal holds gets its recorded answer at once.
 *
 * A handler run again on a continuation *replays*: its output is held against the turn's
 * events so far, and what the journal already has is not sent again. The replay ends where the
 * journal does, at the first output that differs from it, or at the first ask the journal does
 * not hold; from there on everything is sent. So a handler that skips an ask whose answer it
 * found in `turn.answers` goes on as well as one that asks again.
 */
export class Asks {
  /** @param {object|null} continuation  the claim's `continuation` (or null for a first run) */
  constructor(continuation) {
    this.count = 0;
    this.recorded = new Map();
    this.answers = new Map();
    this.script = script(continuation?.events ?? []);
    this.at = 0; // the next item of the script the handler is expected to produce
    this.offset = 0; // how much of a text item it has produced
    for (const e of this.script) if (isRequest(e)) this.recorded.set(e.request_id, e);
    this.addAnswers(continuation?.answers ?? []);
  }

  /** Whether the handler is still re-running what the journal already holds. */
  get replaying() {
    return this.at < this.script.length;
  }

  /** Ends the replay: everything from now on is sent. */
  diverge() {
    this.at = this.script.length;
    this.offset = 0;
  }

  /**
   * Whether `event` (thinking, response or tool) is output the journal already holds: true
   * means do not send it. The first event that differs ends the replay.
   */
  replayed(event) {
    if (!this.replaying) return false;
    const item = this.script[this.at];
    if (event.type === "thinking" || event.type === "response") {
      if (item.type === event.type && item.text.startsWith(event.delta, this.offset)) {
        this.offset += event.delta.length;
        if (this.offset === item.text.length) {
          this.at += 1;
          this.offset = 0;
        }
        return true;
      }
    } else if (this.offset === 0 && sameJson(item, event)) {
      this.at += 1;
      return true;
    }
    this.diverge();
    return false;
  }

  /** Records `[{request_id, answer, by}]` (the first answer of a request stays). */
  addAnswers(answers) {
    for (const a of answers) if (!this.answers.has(a.request_id)) this.answers.set(a.request_id, a);
  }

  /** Forgets a request the server refused (a call): nothing of it was journaled. */
  forget(requestId) {
    this.recorded.delete(requestId);
  }

  /** The id of the next ask: `requestId` when given, else `ask-<n>`. */
  nextId(requestId) {
    this.count += 1;
    return requestId ?? `ask-${this.count}`;
  }

  /**
   * Takes one ask's event. `{recorded: false}` for a new request (journal it and wait), or
   * `{recorded: true, answer}` for one the journal holds (`answer` is `{request_id, answer, by}`
   * or undefined while unanswered). Throws ContinuationMismatch when the journal holds another
   * request under that id.
   */
  take(event) {
    const id = event.request_id;
    const recorded = this.recorded.get(id);
    if (!recorded) {
      this.diverge();
      this.recorded.set(id, event);
      return { recorded: false };
    }
    if (!sameJson(essence(recorded), essence(event, recorded))) {
      throw new ContinuationMismatch(id, essence(recorded), essence(event, recorded));
    }
    // The replay goes on after this ask (output the handler left out before it is skipped).
    const index = this.script.indexOf(recorded);
    if (index >= this.at) {
      this.at = index + 1;
      this.offset = 0;
    }
    return { recorded: true, answer: this.answers.get(id) };
  }
}
