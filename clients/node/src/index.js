// turnstream-worker: a client of turnstream's worker API (contract v1.3) for Node 18+, with no
// dependencies beyond the platform's fetch. Claim turns (of some agents or all), stream their
// output through a turn handle (batched, retried with the same seq, lease renewed), ask a
// person or the browser and wait for the answer (`requestApproval`, `requestClientTool`,
// `ask`), call another agent and wait for its turn's end (`call`), and end them.

import { Asks, requestEvent } from "./asks.js";
import { CallRefused, batches, callEvent, isRequest, refusesCall } from "./calls.js";
import { WorkerApiError } from "./errors.js";

export { ContinuationMismatch, requestEvent } from "./asks.js";
export { CallRefused, callEvent } from "./calls.js";
export { WorkerApiError } from "./errors.js";

/**
 * An ask that will not be answered in this run of the handler: the turn waits for its answer
 * and will be continued by whichever worker claims it then (the handler runs again there).
 * Thrown by an ask when no loop can resume this handler, or when the loop gave up on it.
 */
export class TurnSuspended extends Error {
  constructor(turnId, why) {
    super(`turn ${turnId} waits for input (${why}); it continues when claimed again`);
    this.name = "TurnSuspended";
    this.turnId = turnId;
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Talks to one turnstream server with a service key. */
export class WorkerClient {
  /**
   * @param {object} options
   * @param {string} options.baseUrl  the server, e.g. `http://127.0.0.1:8080`
   * @param {string} options.serviceKey  one of the server's `--service-key`s
   * @param {string} [options.workerId]  names this worker in leases (default: `node-<pid>`)
   * @param {number} [options.batchMs]  how long output is gathered before it is sent (20)
   * @param {number} [options.retryMs]  first wait before a failed request is retried (200)
   */
  constructor({ baseUrl, serviceKey, workerId, batchMs = 20, retryMs = 200, fetch: f }) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.serviceKey = serviceKey;
    this.workerId = workerId ?? `node-${process.pid}`;
    this.batchMs = batchMs;
    this.retryMs = retryMs;
    this.fetch = f ?? globalThis.fetch;
  }

  /** One POST; resolves to the JSON body or throws a WorkerApiError (or a network error). */
  async post(path, body, signal) {
    const res = await this.fetch(`${this.baseUrl}/api/worker${path}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${this.serviceKey}`,
        "content-type": "application/json",
      },
      body: JSON.stringify(body),
      signal,
    });
    const json = await res.json().catch(() => null);
    if (!res.ok) {
      const err = json?.error ?? {};
      throw new WorkerApiError(res.status, err.code ?? "http_error", err.message ?? res.statusText, json);
    }
    return json;
  }

  /**
   * Claims up to `maxTurns` turns, waiting up to `waitMs` for one: the claim's raw turns. With
   * `agents` (names), only turns of those agents; without, turns of every agent.
   */
  async claimRaw({ waitMs = 30000, maxTurns = 1, agents, signal } = {}) {
    const body = { worker_id: this.workerId, wait_ms: waitMs, max_turns: maxTurns };
    if (agents !== undefined && agents !== null) body.agents = agentNames(agents);
    return (await this.post("/claim", body, signal)).turns;
  }

  /**
   * Claims up to `maxTurns` turns (of `agents`, when given), waiting up to `waitMs` for one.
   * Resolves to turn handles (possibly none); a turn that waited for input and was answered
   * has `continuation`.
   */
  async claim(options) {
    return (await this.claimRaw(options)).map((t) => new TurnHandle(this, t));
  }
}

/** `agents` as the claim sends it: a non-empty array of names (the server judges the names). */
function agentNames(agents) {
  if (!Array.isArray(agents) || agents.length === 0 || !agents.every((a) => typeof a === "string")) {
    throw new TypeError("`agents` is a non-empty array of agent names");
  }
  return agents;
}

/** Whether a failed request is worth sending again with the same seq. */
function retryable(err) {
  if (err instanceof WorkerApiError) return err.status >= 500 || err.status === 429;
  return err?.name !== "AbortError";
}

/**
 * One claimed turn. Output methods return at once; output is sent in order, batched every
 * `batchMs`, each batch retried with its seq until the server answers. `signal` fires when the
 * turn is cancelled or its lease is lost: stop working then.
 *
 * A turn claimed again after it waited for input carries `continuation` (the raw claim field)
 * and `answers` (request id -> answer); its handler runs again from the start and replays: see
 * `request`. `agent` names the agent the turn is for (`default` unless the message named one);
 * a turn another agent called has `calledBy` (`{turn_id, session_id, request_id}`).
 */
export class TurnHandle {
  constructor(client, turn) {
    this.client = client;
    this.turnId = turn.turn_id;
    this.sessionId = turn.session_id;
    this.userMessage = turn.user_message;
    this.history = turn.history;
    this.agent = turn.agent ?? "default";
    this.calledBy = turn.called_by ?? null;
    this.continuation = turn.continuation ?? null;
    this.asks = new Asks(this.continuation);
    this.open = new Map(); // request id -> {resolve, reject} of asks waiting in this process
    this.waitWanted = false;
    this.suspended = false;
    /** Set by a loop that can resume this handler when its continuation is claimed here. */
    this.onSuspend = null;
    this.pending = [];
    this.timer = null;
    this.chain = Promise.resolve();
    this.error = null;
    this.abort = new AbortController();
    this.signal = this.abort.signal;
    this.takeLease(turn);
  }

  /** Starts working under the lease of a claim (the first one, or a continuation's). */
  takeLease(turn) {
    this.lease = turn.lease.token;
    this.state = "running";
    this.seq = turn.continuation?.seq ?? 0; // the next seq to send
    this.suspended = false;
    const ttl = Math.max(1000, turn.lease.expires_at - Date.now());
    clearInterval(this.heartbeatTimer);
    this.heartbeatTimer = setInterval(() => this.heartbeat().catch(() => {}), ttl / 3);
    this.heartbeatTimer.unref?.();
  }

  /** Answers given so far, by request id (what `requestApproval` and co. resolve to). */
  get answers() {
    return Object.fromEntries([...this.asks.answers].map(([id, a]) => [id, a.answer]));
  }

  /** True while a handler run on a continuation re-runs what the journal already holds (see `Asks`). */
  get replaying() {
    return this.asks.replaying;
  }

  thinking(delta) {
    if (delta) this.push({ type: "thinking", delta });
  }

  response(delta) {
    if (delta) this.push({ type: "response", delta });
  }

  /** A tool call update: `{ call_id, name, status, input_preview?, output_preview? }`. */
  tool(call) {
    this.push({ type: "tool", ...call });
  }

  push(event) {
    // Replayed output is in the journal already (the run that asked sent it).
    if (this.signal.aborted || (!isRequest(event) && this.asks.replayed(event))) return;
    this.pending.push(event);
    if (!this.timer) {
      this.timer = setTimeout(() => {
        this.timer = null;
        this.flush().catch(() => {});
      }, this.client.batchMs);
    }
  }

  /**
   * Asks for a tool call's approval: `{ tool: { call_id, name, input }, prompt?, expiresAt?,
   * requestId? }`. Resolves to `{ approved, reason? }`, or `{ timed_out: true }`.
   */
  requestApproval(ask) {
    return this.request("approval", ask);
  }

  /**
   * Asks the browser to run a tool: `{ tool: { call_id, name, input }, prompt?, expiresAt?,
   * requestId? }`. Resolves to `{ output }` or `{ error }`, or `{ timed_out: true }`.
   */
  requestClientTool(ask) {
    return this.request("client_tool", ask);
  }

  /** Asks a question: `{ prompt, options?, expiresAt?, requestId? }`. Resolves to `{ text }` or `{ timed_out: true }`. */
  ask(ask) {
    return this.request("question", ask);
  }

  /**
   * Calls another agent (v1.3): `{ agent, session, content, attachments?, requestId? }` posts
   * `content` as a message for `agent` in session `session` and resolves, once that turn ends,
   * to its result `{ turn_id, state, text, error? }` (`state` is the called turn's end:
   * `completed`, `failed`, `cancelled` or `interrupted`). The turn waits for it as for an ask,
   * and continues the same way (see `request`). Rejects with CallRefused (`code`
   * `call_cycle`, `call_depth_exceeded` or `invalid_body`) when the server refuses the call; the
   * turn then goes on. Several calls at once (`Promise.all`) run at once.
   */
  call(call = {}) {
    return this.openRequest(() => callEvent(this.asks.nextId(call.requestId), call));
  }

  /**
   * Opens a request of `kind` and resolves to its answer. The request is journaled with the
   * output before it; the turn then waits, holding no lease, and this promise resolves when
   * this process claims the turn again (`runWorker` does). Where another process continues the
   * turn, the handler runs there again from its start: asks the journal holds resolve at once
   * to their answers (they must be the same asks, else ContinuationMismatch) and output up to
   * the last of them is not sent again. Ask several at once with `Promise.all`.
   */
  request(kind, ask = {}) {
    return this.openRequest(() => requestEvent(kind, this.asks.nextId(ask.requestId), ask));
  }

  /** Opens the request `build()` makes (an ask or a call) and resolves to its answer. */
  openRequest(build) {
    let event;
    let taken;
    try {
      if (this.error) throw this.error;
      event = build();
      taken = this.asks.take(event);
    } catch (err) {
      return Promise.reject(err);
    }
    if (taken.answer) return Promise.resolve(taken.answer.answer);
    const id = event.request_id;
    if (!taken.recorded) this.push(event);
    const answer = new Promise((resolve, reject) => this.open.set(id, { resolve, reject }));
    // A handler that returns without awaiting an ask must not bring the process down when the
    // ask is let go; one that awaits still sees the rejection.
    answer.catch(() => {});
    this.waitWanted = true;
    if (!this.timer) this.timer = setTimeout(() => ((this.timer = null), this.flush().catch(() => {})), 0);
    return answer;
  }

  /** Sends what is pending now (then `wait` when asks are open); resolves once accepted. */
  flush() {
    if (this.suspended) return this.chain;
    clearTimeout(this.timer);
    this.timer = null;
    for (const batch of batches(this.pending.splice(0))) {
      const send = batch.call
        ? () => this.sendCall(batch.call)
        : () => this.send("/events", (seq) => ({ seq, events: batch.events }));
      this.chain = this.chain.then(send);
    }
    if (this.waitWanted) {
      this.waitWanted = false;
      this.chain = this.chain.then(() => this.wait());
    }
    return this.chain;
  }

  /**
   * Sends a call's batch (the call alone). A refusal of the call rejects its promise only:
   * nothing was journaled, the seq stays, and the turn goes on.
   */
  async sendCall(event) {
    try {
      await this.send("/events", (seq) => ({ seq, events: [event] }), event.request_id);
    } catch (err) {
      if (!(err instanceof CallRefused)) throw err;
      this.asks.forget(event.request_id);
      const waiter = this.open.get(event.request_id);
      this.open.delete(event.request_id);
      waiter?.reject(err);
    }
  }

  /** Ends the lease; the turn waits for the open asks' answers. */
  async wait() {
    if (this.open.size === 0 || this.suspended) return;
    // Events pushed since this wait was queued (a handler that went on after a refused call
    // and asked again) go first: the flush their push scheduled sends them, then waits.
    if (this.pending.length > 0) {
      this.waitWanted = true;
      return;
    }
    await this.send("/wait", (seq) => ({ seq }));
    this.suspended = true;
    clearInterval(this.heartbeatTimer);
    if (this.onSuspend) this.onSuspend(this);
    else this.giveUp("nothing here claims it again");
  }

  /** Continues under a claim of this turn's continuation: resolves the asks it answers. */
  resume(turn) {
    this.takeLease(turn);
    this.asks.addAnswers(turn.continuation?.answers ?? []);
    for (const [id, waiter] of this.open) {
      const given = this.asks.answers.get(id);
      if (given) {
        this.open.delete(id);
        waiter.resolve(given.answer);
      }
    }
    if (this.open.size > 0) this.waitWanted = true;
    if (this.pending.length > 0 || this.waitWanted) this.flush().catch(() => {});
  }

  /** Lets go of a suspended turn: its open asks reject with TurnSuspended. */
  giveUp(why) {
    this.close();
    const err = new TurnSuspended(this.turnId, why);
    for (const waiter of this.open.values()) waiter.reject(err);
    this.open.clear();
  }

  /**
   * Sends a request with the next seq, retrying it (same seq) until answered. With `callId`
   * (the batch is that call alone), a refusal of the call throws CallRefused and leaves the
   * turn as it was.
   */
  async send(path, body, callId) {
    if (this.error) throw this.error;
    const seq = this.seq;
    let wait = this.client.retryMs;
    for (;;) {
      try {
        const ack = await this.client.post(`/turns/${this.turnId}${path}`, {
          lease: this.lease,
          ...body(seq),
        });
        this.seq = seq + 1;
        this.state = ack.state;
        return ack;
      } catch (err) {
        if (retryable(err)) {
          await sleep(wait);
          wait = Math.min(wait * 2, 5000);
          continue;
        }
        if (callId !== undefined && refusesCall(err)) throw new CallRefused(err, callId);
        this.stop(err);
        throw err;
      }
    }
  }

  stop(err) {
    this.error ??= err;
    if (err instanceof WorkerApiError) {
      if (err.code === "turn_cancelled") this.state = "cancelled";
      if (err.code === "lease_lost") this.state = "interrupted";
    }
    this.close();
    for (const waiter of this.open.values()) waiter.reject(err);
    this.open.clear();
    if (!this.signal.aborted) this.abort.abort(err);
  }

  close() {
    clearInterval(this.heartbeatTimer);
    clearTimeout(this.timer);
  }

  /** Renews the lease; fires `signal` when the turn was cancelled meanwhile. */
  async heartbeat() {
    if (this.signal.aborted || this.suspended || this.state !== "running") return this.state;
    try {
      const ack = await this.client.post(`/turns/${this.turnId}/heartbeat`, { lease: this.lease });
      if (ack.state === "cancelled") this.stop(new WorkerApiError(409, "turn_cancelled", "the turn was cancelled"));
      return ack.state;
    } catch (err) {
      if (!retryable(err)) this.stop(err);
      throw err;
    }
  }

  /** Sends what is pending, then completes the turn (with `turn.usage`, when set, as its usage). */
  async complete() {
    await this.flush();
    const ack = await this.send("/complete", (seq) => ({ seq, ...this.usageField() }));
    this.close();
    return ack;
  }

  /** `{usage}` for an end request when the handler set `turn.usage` (token counts, v1.3). */
  usageField() {
    return this.usage ? { usage: this.usage } : {};
  }

  /** Sends what is pending, then fails the turn with `message`. */
  async fail(message) {
    await this.flush().catch(() => {});
    const ack = await this.send("/fail", (seq) => ({ seq, error: { message: String(message || "the worker failed") }, ...this.usageField() }));
    this.close();
    return ack;
  }
}

/**
 * Claims turns and runs `handler(turn)` for each until `signal` fires, up to `concurrency`
 * turns holding a lease at once; with `agents` (names), only turns of those agents. A handler that returns completes its turn (unless it already
 * ended it); one that throws fails it with the error's message; a cancelled turn's handler
 * sees `turn.signal` fire.
 *
 * A handler waiting on an ask holds no slot. When this loop claims that turn's continuation,
 * the handler's ask resolves and it goes on; a continuation claimed here whose handler is not
 * waiting here (another process asked, or `suspendMs` passed) runs the handler again with
 * `turn.continuation`. On `signal`, handlers still waiting are let go (their asks reject with
 * TurnSuspended): the turns continue wherever they are claimed next.
 */
export async function runWorker(
  client,
  handler,
  { concurrency = 4, waitMs = 30000, suspendMs = 15 * 60 * 1000, agents, signal } = {},
) {
  if (agents !== undefined && agents !== null) agentNames(agents);
  const jobs = new Set();
  const suspended = new Map(); // turn id -> {turn, timer}
  let active = 0; // turns holding a lease
  let wake = null;
  const changed = () => {
    wake?.();
    wake = null;
  };
  const release = () => {
    active -= 1;
    changed();
  };
  const letGo = (turnId, why) => {
    const entry = suspended.get(turnId);
    if (!entry) return;
    suspended.delete(turnId);
    clearTimeout(entry.timer);
    entry.turn.giveUp(why);
  };
  const onSuspend = (turn) => {
    const timer = setTimeout(() => letGo(turn.turnId, `no answer within ${suspendMs} ms here`), suspendMs);
    timer.unref?.();
    suspended.set(turn.turnId, { turn, timer });
    release();
  };
  const start = (turn) => {
    active += 1;
    turn.onSuspend = onSuspend;
    const job = (async () => {
      try {
        await handler(turn);
        if (turn.state === "running" && !turn.suspended && !turn.signal.aborted) await turn.complete();
      } catch (err) {
        if (turn.state === "running" && !turn.suspended && !turn.signal.aborted) {
          await turn.fail(err?.message ?? String(err)).catch(() => {});
        }
      } finally {
        // A handler that returns while its turn waits: whoever claims it next runs it again.
        if (turn.suspended) letGo(turn.turnId, "the handler returned");
        else release();
        turn.close();
      }
    })();
    jobs.add(job);
    job.finally(() => jobs.delete(job));
  };

  let refused = null;
  signal?.addEventListener("abort", changed);
  while (!signal?.aborted) {
    const free = concurrency - active;
    if (free <= 0) {
      await new Promise((resolve) => (wake = resolve));
      continue;
    }
    let turns;
    try {
      turns = await client.claimRaw({ waitMs, maxTurns: free, agents, signal });
    } catch (err) {
      if (signal?.aborted) break;
      // A claim the server finds malformed (a bad agent name) fails the same way every time.
      if (err instanceof WorkerApiError && err.status === 422) {
        refused = err;
        break;
      }
      await sleep(client.retryMs);
      continue;
    }
    for (const raw of turns) {
      const entry = raw.continuation && suspended.get(raw.turn_id);
      if (entry) {
        suspended.delete(raw.turn_id);
        clearTimeout(entry.timer);
        active += 1;
        entry.turn.resume(raw);
      } else {
        start(new TurnHandle(client, raw));
      }
    }
  }
  for (const turnId of [...suspended.keys()]) letGo(turnId, "the worker stopped");
  await Promise.allSettled(jobs);
  if (refused) throw refused;
}
