// turnstream/ai-sdk: a ChatTransport for the AI SDK's `useChat` (AI SDK 5), over a ChatClient.
// Plain JS with no import of `ai`: it only produces the UI message chunks `useChat` reads.
import init, { ChatClient } from "./turnstream.js";

const ENDED = new Set(["complete", "cancelled", "failed", "interrupted"]);
const IN_FLIGHT = new Set(["queued", "running"]);
/** How long `reconnectToStream` waits for the stream to be live before it decides from what it has. */
const LIVE_WAIT_MS = 10_000;

export class TurnstreamChatTransport {
  #connect;
  #wasm;
  #baseUrl;
  #getToken;
  #clients = new Map();

  /**
   * @param {{ baseUrl?: string, getToken?: () => Promise<string>, storage?: "indexeddb" | "memory",
   *   historyLimit?: number, wasm?: unknown }} [options] The options of `ChatClient.connect`
   *   (the session id is useChat's chat id), and `wasm`: what to pass to `init` when the
   *   package's wasm is not next to its JS (a URL, a Response or a compiled module).
   */
  constructor(options = {}) {
    const { wasm, ...connect } = options;
    for (const k of Object.keys(connect)) if (connect[k] === undefined) delete connect[k];
    if ("sessionId" in connect) throw new Error("turnstream: the session is useChat's chat id, not an option");
    this.#connect = connect;
    this.#wasm = wasm;
    this.#baseUrl = String(connect.baseUrl ?? "").trim().replace(/\/+$/, "");
    this.#getToken = connect.getToken;
  }

  /** The ChatClient of a chat (connected on first use, then shared by every call for that chat). */
  client(chatId) {
    let p = this.#clients.get(chatId);
    if (!p) {
      p = (async () => {
        await init(this.#wasm === undefined ? undefined : { module_or_path: this.#wasm });
        return ChatClient.connect({ ...this.#connect, sessionId: chatId });
      })();
      this.#clients.set(chatId, p);
      p.catch(() => {
        if (this.#clients.get(chatId) === p) this.#clients.delete(chatId);
      });
    }
    return p;
  }

  /** Posts the last user message and streams its turn's reply as UI message chunks. */
  async sendMessages({ chatId, messages, abortSignal, trigger }) {
    if (trigger === "regenerate-message") {
      throw new Error("turnstream: regenerating a reply is not supported (send the message again)");
    }
    const last = messages?.[messages.length - 1];
    if (!last || last.role !== "user") throw new Error("turnstream: the last message must be the user's");
    const text = (last.parts ?? []).filter((p) => p.type === "text").map((p) => p.text).join("");
    abortSignal?.throwIfAborted();
    const client = await this.client(chatId);
    const { clientMessageId } = await client.send(text);
    return followTurn(client, { clientMessageId }, abortSignal);
  }

  /**
   * Resumes the turn in flight (queued, running, or a message not posted yet), replayed from its
   * start; `null` when nothing is in flight.
   */
  async reconnectToStream({ chatId, abortSignal }) {
    const client = await this.client(chatId);
    const state = await settled(client, abortSignal);
    if (!state || abortSignal?.aborted) return null;
    const users = state.messages.filter((m) => m.role === "user" && m.status !== "rejected");
    const last = users[users.length - 1];
    if (!last) return null;
    if (!last.turnId) return followTurn(client, { clientMessageId: last.clientMessageId }, abortSignal);
    const reply = assistantOf(state, last.turnId);
    if (reply && ENDED.has(reply.status)) return null;
    // The view may be a cache, or the stream's snapshot may not have arrived yet: ask the server.
    const serverState = await this.#turnState(last.turnId).catch(() => null);
    if (abortSignal?.aborted) return null;
    if (serverState ? !IN_FLIGHT.has(serverState) : !reply) return null;
    // Turns run one at a time per session, oldest first: resume the oldest one still open.
    let turnId = last.turnId;
    for (let i = users.length - 2; i >= 0; i--) {
      const earlier = users[i].turnId && assistantOf(state, users[i].turnId);
      if (!earlier || ENDED.has(earlier.status)) break;
      turnId = users[i].turnId;
    }
    return followTurn(client, { turnId }, abortSignal);
  }

  /** Closes every ChatClient this transport opened (never cancels a turn). */
  async close() {
    const clients = [...this.#clients.values()];
    this.#clients.clear();
    await Promise.all(clients.map((p) => p.then((c) => c.close(), () => {})));
  }

  async #turnState(turnId) {
    const url = `${this.#baseUrl}/api/turns/${encodeURIComponent(turnId)}`;
    for (let attempt = 0; attempt < 2; attempt++) {
      const headers = {};
      if (this.#getToken) headers.authorization = `Bearer ${await this.#getToken()}`;
      const res = await fetch(url, { headers, cache: "no-store" });
      if (res.status === 401 && this.#getToken && attempt === 0) continue;
      if (res.status === 404) return "unknown";
      if (!res.ok) throw new Error(`turnstream: GET /api/turns answered ${res.status}`);
      return (await res.json()).state;
    }
  }
}

/**
 * A ChatClient state's messages as UI messages (for useChat's `messages`): each entry under its
 * key, so a resumed turn (whose `start` names the same key) replaces its entry instead of
 * adding a second reply. Messages the server refused are left out.
 */
export function toUIMessages(state) {
  const out = [];
  for (const m of state.messages) {
    if (m.role === "user") {
      if (m.status !== "rejected") out.push({ id: m.key, role: "user", parts: [{ type: "text", text: m.content }] });
      continue;
    }
    const done = ENDED.has(m.status);
    const parts = [];
    if (m.thinking) parts.push({ type: "reasoning", text: m.thinking, state: done ? "done" : "streaming" });
    for (const t of m.tools) {
      const part = { type: `tool-${t.name}`, toolCallId: t.callId, state: "input-available", input: parsePreview(t.inputPreview), providerExecuted: true };
      if (t.status === "finished") Object.assign(part, { state: "output-available", output: parsePreview(t.outputPreview) });
      else if (t.status === "failed") Object.assign(part, { state: "output-error", errorText: t.outputPreview || "the tool failed" });
      parts.push(part);
    }
    if (m.content) parts.push({ type: "text", text: m.content, state: done ? "done" : "streaming" });
    out.push({ id: m.key, role: "assistant", parts });
  }
  return out;
}

const assistantOf = (state, turnId) => state.messages.find((m) => m.role === "assistant" && m.turnId === turnId);

/** The state once the stream is live (or the link is down for good, or after a deadline); null if aborted. */
function settled(client, signal) {
  const ready = (s) => s.connection !== "connecting" && s.connection !== "reconnecting" && s.connection !== "resyncing";
  const now = client.state();
  if (ready(now)) return Promise.resolve(now);
  return new Promise((resolve) => {
    const done = (v) => {
      unsubscribe();
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      resolve(v);
    };
    const onAbort = () => done(null);
    const unsubscribe = client.subscribe((s) => ready(s) && done(s));
    const timer = setTimeout(() => done(client.state()), LIVE_WAIT_MS);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

const parsePreview = (s) => {
  if (s == null) return undefined;
  try {
    return JSON.parse(s);
  } catch {
    return s;
  }
};

/**
 * A ReadableStream of UI message chunks for one turn, from `start` to `finish` / `error` /
 * `abort`, built by comparing each state's entry of the turn with what was already sent.
 * `target` is the user message (`clientMessageId`) or the turn (`turnId`).
 */
function followTurn(client, target, signal) {
  let turnId = target.turnId ?? null;
  let unsubscribe = null;
  let reading = true; // the consumer still reads the stream
  let cancelWanted = false;
  let cancelSent = false;
  let started = false;
  let open = null; // the text or reasoning part being streamed: { kind, id }
  let parts = 0;
  let text = "";
  let thinking = "";
  const tools = new Map(); // callId -> { input: bool, output: bool }
  let controller;

  const stop = () => {
    if (!reading && (!cancelWanted || cancelSent)) {
      unsubscribe?.();
      unsubscribe = null;
      signal?.removeEventListener("abort", onAbort);
    }
  };
  const end = () => {
    if (reading) {
      reading = false;
      controller.close();
    }
    cancelWanted = false;
    stop();
  };
  const emit = (chunk) => reading && controller.enqueue(chunk);
  const openPart = (kind) => {
    if (open?.kind === kind) return open.id;
    closePart();
    open = { kind, id: `${kind}-${++parts}` };
    emit({ type: `${kind}-start`, id: open.id });
    return open.id;
  };
  const closePart = () => {
    if (open) emit({ type: `${open.kind}-end`, id: open.id });
    open = null;
  };
  const sendCancel = () => {
    if (!cancelWanted || cancelSent || !turnId) return;
    cancelSent = true;
    client.cancel(turnId).catch(() => {});
    stop();
  };
  function onAbort() {
    cancelWanted = true;
    sendCancel();
  }

  const onState = (state) => {
    if (!reading && !cancelWanted) return;
    if (!turnId) {
      const user = state.messages.find((m) => m.role === "user" && m.clientMessageId === target.clientMessageId);
      if (!user) return;
      if (user.status === "rejected") {
        emit({ type: "error", errorText: user.error?.message || "the message was not accepted" });
        end();
        return;
      }
      if (!user.turnId) return;
      turnId = user.turnId;
      sendCancel();
    }
    if (!reading) return;
    const entry = assistantOf(state, turnId);
    if (!entry) return;
    if (!started) {
      started = true;
      emit({ type: "start", messageId: entry.key });
    }
    if (entry.thinking.length > thinking.length && entry.thinking.startsWith(thinking)) {
      emit({ type: "reasoning-delta", id: openPart("reasoning"), delta: entry.thinking.slice(thinking.length) });
      thinking = entry.thinking;
    }
    for (const t of entry.tools) {
      let sent = tools.get(t.callId);
      if (!sent) {
        closePart();
        tools.set(t.callId, (sent = { output: false }));
        emit({ type: "tool-input-available", toolCallId: t.callId, toolName: t.name, input: parsePreview(t.inputPreview), providerExecuted: true });
      }
      if (!sent.output && (t.status === "finished" || t.status === "failed")) {
        closePart();
        sent.output = true;
        emit(t.status === "finished"
          ? { type: "tool-output-available", toolCallId: t.callId, output: parsePreview(t.outputPreview), providerExecuted: true }
          : { type: "tool-output-error", toolCallId: t.callId, errorText: t.outputPreview || "the tool failed", providerExecuted: true });
      }
    }
    if (entry.content.length > text.length && entry.content.startsWith(text)) {
      emit({ type: "text-delta", id: openPart("text"), delta: entry.content.slice(text.length) });
      text = entry.content;
    }
    if (ENDED.has(entry.status)) {
      closePart();
      if (entry.status === "complete") emit({ type: "finish" });
      else if (entry.status === "cancelled") emit({ type: "abort" });
      else emit({ type: "error", errorText: entry.error?.message || `the turn ${entry.status === "failed" ? "failed" : "was interrupted"}` });
      end();
    }
  };

  return new ReadableStream({
    start(c) {
      controller = c;
      unsubscribe = client.subscribe(onState);
      if (signal?.aborted) onAbort();
      else signal?.addEventListener("abort", onAbort, { once: true });
      onState(client.state());
    },
    cancel() {
      // The reader is gone (useChat's stop() cancels it after aborting): a cancel asked for
      // through the signal still goes out once the turn's id is known.
      reading = false;
      stop();
    },
  });
}
