// turnstream-worker: a client of turnstream's worker API (contract v1.1) for Node 18+, with no
// dependencies beyond the platform's fetch. Claim turns, stream their output through a turn
// handle (batched, retried with the same seq, lease renewed), and end them.

/** A refusal from the server, in its `{"error": {"code", "message"}}` shape. */
export class WorkerApiError extends Error {
  constructor(status, code, message, body) {
    super(`${status} ${code}: ${message}`);
    this.status = status;
    this.code = code;
    this.body = body;
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
   * Claims up to `maxTurns` turns, waiting up to `waitMs` for one. Resolves to turn handles
   * (possibly none).
   */
  async claim({ waitMs = 30000, maxTurns = 1, signal } = {}) {
    const body = await this.post(
      "/claim",
      { worker_id: this.workerId, wait_ms: waitMs, max_turns: maxTurns },
      signal,
    );
    return body.turns.map((t) => new TurnHandle(this, t));
  }
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
 */
export class TurnHandle {
  constructor(client, turn) {
    this.client = client;
    this.turnId = turn.turn_id;
    this.sessionId = turn.session_id;
    this.userMessage = turn.user_message;
    this.history = turn.history;
    this.lease = turn.lease.token;
    this.state = "running";
    this.seq = 0; // the next seq to send
    this.pending = [];
    this.timer = null;
    this.chain = Promise.resolve();
    this.error = null;
    this.abort = new AbortController();
    this.signal = this.abort.signal;
    const ttl = Math.max(1000, turn.lease.expires_at - Date.now());
    this.heartbeatTimer = setInterval(() => this.heartbeat().catch(() => {}), ttl / 3);
    this.heartbeatTimer.unref?.();
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
    if (this.signal.aborted) return;
    this.pending.push(event);
    if (!this.timer) {
      this.timer = setTimeout(() => {
        this.timer = null;
        this.flush().catch(() => {});
      }, this.client.batchMs);
    }
  }

  /** Sends what is pending now; resolves once the server accepted it. */
  flush() {
    clearTimeout(this.timer);
    this.timer = null;
    if (this.pending.length > 0) {
      const events = this.pending.splice(0);
      this.chain = this.chain.then(() => this.send("/events", (seq) => ({ seq, events })));
    }
    return this.chain;
  }

  /** Sends a request with the next seq, retrying it (same seq) until answered. */
  async send(path, body) {
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
    if (!this.signal.aborted) this.abort.abort(err);
  }

  close() {
    clearInterval(this.heartbeatTimer);
    clearTimeout(this.timer);
  }

  /** Renews the lease; fires `signal` when the turn was cancelled meanwhile. */
  async heartbeat() {
    if (this.signal.aborted || this.state !== "running") return this.state;
    try {
      const ack = await this.client.post(`/turns/${this.turnId}/heartbeat`, { lease: this.lease });
      if (ack.state === "cancelled") this.stop(new WorkerApiError(409, "turn_cancelled", "the turn was cancelled"));
      return ack.state;
    } catch (err) {
      if (!retryable(err)) this.stop(err);
      throw err;
    }
  }

  /** Sends what is pending, then completes the turn. */
  async complete() {
    await this.flush();
    const ack = await this.send("/complete", (seq) => ({ seq }));
    this.close();
    return ack;
  }

  /** Sends what is pending, then fails the turn with `message`. */
  async fail(message) {
    await this.flush().catch(() => {});
    const ack = await this.send("/fail", (seq) => ({ seq, error: { message: String(message || "the worker failed") } }));
    this.close();
    return ack;
  }
}

/**
 * Claims turns and runs `handler(turn)` for each until `signal` fires, up to `concurrency` at
 * once. A handler that returns completes its turn (unless it already ended it); one that throws
 * fails it with the error's message; a cancelled turn's handler sees `turn.signal` fire.
 */
export async function runWorker(client, handler, { concurrency = 4, waitMs = 30000, signal } = {}) {
  const running = new Set();
  while (!signal?.aborted) {
    const free = concurrency - running.size;
    if (free <= 0) {
      await Promise.race(running);
      continue;
    }
    let turns;
    try {
      turns = await client.claim({ waitMs, maxTurns: free, signal });
    } catch (err) {
      if (signal?.aborted) break;
      await sleep(client.retryMs);
      continue;
    }
    for (const turn of turns) {
      const job = (async () => {
        try {
          await handler(turn);
          if (turn.state === "running" && !turn.signal.aborted) await turn.complete();
        } catch (err) {
          if (turn.state === "running" && !turn.signal.aborted) {
            await turn.fail(err?.message ?? String(err)).catch(() => {});
          }
        } finally {
          turn.close();
        }
      })();
      running.add(job);
      job.finally(() => running.delete(job));
    }
  }
  await Promise.allSettled(running);
}
