// turnstream/ai-sdk: a ChatTransport for the AI SDK's `useChat` (AI SDK 5, 6 and 7), over a
// ChatClient, with the calls that give useChat the server's conversation (`messages`) and keep
// it in step with the client (`watch`). Plain JS with no import of `ai`: it only produces the UI
// message chunks and UI messages useChat reads.
import init, { ChatClient } from "./turnstream.js";

const ENDED = new Set(["complete", "cancelled", "failed", "interrupted"]);
/** A turn state the server reports that is not an end: a later contract's is in flight too. */
const inFlight = (state) => !["completed", "cancelled", "failed", "interrupted", "unknown"].includes(state);
/** How long `reconnectToStream` waits for the stream to be live before it decides from what it has. */
const LIVE_WAIT_MS = 10_000;
/** How long `messages` waits for the server's history before it answers with the cache. */
const HISTORY_WAIT_MS = 5_000;

export class TurnstreamChatTransport {
  /**
   * A resumed stream (`reconnectToStream`) replays the turn from its start: AI SDK 6 and 7 then
   * reset the message they were streaming before they apply it (AI SDK 5 does not read it).
   */
  resumeStreamIsReplay = true;
  #connect;
  #wasm;
  #baseUrl;
  #getToken;
  #clients = new Map();
  /** Per chat: what `watch` needs to know of the transport's own sends and streams. */
  #chats = new Map();

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

  /**
   * The chat's messages for useChat's `messages`, once the client has read the server's history
   * (a new browser gets the whole conversation). When the history cannot be read within
   * `timeoutMs` (offline, the server down, a refused token), the messages this browser cached,
   * with `fromCache: true` on the array (`false` when they are the server's).
   */
  async messages(chatId, { timeoutMs = HISTORY_WAIT_MS } = {}) {
    const client = await this.client(chatId);
    const state = await historyRead(client, timeoutMs);
    const chat = this.#chat(chatId);
    const out = chat.convert(state);
    chat.give(out);
    out.fromCache = !state.historyLoaded;
    return out;
  }

  /**
   * Keeps a mounted useChat in step with the chat's ChatClient: calls `setMessages` (useChat's)
   * whenever the client's view changes, with useChat's messages joined with the client's: what
   * other tabs and devices sent and what answered them appear, and the reply useChat is
   * streaming itself (a send or a resume of this transport) is left to useChat. Returns the
   * function that stops it.
   */
  watch(chatId, setMessages) {
    const chat = this.#chat(chatId);
    let stopped = false;
    let unsubscribe = null;
    const watcher = (state) => {
      if (stopped || chat.sending > 0) return;
      setMessages((prev) => chat.merge(prev ?? [], state));
    };
    this.client(chatId).then((client) => {
      if (stopped) return;
      chat.client = client;
      chat.watchers.add(watcher);
      unsubscribe = client.subscribe(watcher);
      watcher(client.state());
    }, () => {});
    return () => {
      stopped = true;
      chat.watchers.delete(watcher);
      unsubscribe?.();
    };
  }

  #chat(chatId) {
    let c = this.#chats.get(chatId);
    if (!c) this.#chats.set(chatId, (c = new ChatLink()));
    return c;
  }

  /**
   * Posts the last user message (its text, and its files as attachments) and streams its turn's
   * reply as UI message chunks.
   */
  async sendMessages({ chatId, messages, abortSignal, trigger, messageId }) {
    const last = messages?.[messages.length - 1];
    if (trigger === "regenerate-message") return this.#regenerate(chatId, last, abortSignal);
    if (last?.role === "assistant") return this.#answer(chatId, last, abortSignal);
    if (!last || last.role !== "user") throw new Error("turnstream: the last message must be the user's");
    // `sendMessage({ text, messageId })`: an edit of that message, a new branch (v1.2).
    if (messageId != null && messageId === last.id) return this.#edit(chatId, last, abortSignal);
    const parts = last.parts ?? [];
    const text = parts.filter((p) => p.type === "text").map((p) => p.text).join("");
    const attachments = parts.filter((p) => p.type === "file").map((p) =>
      p.filename == null ? { url: p.url, mediaType: p.mediaType } : { url: p.url, mediaType: p.mediaType, name: p.filename });
    abortSignal?.throwIfAborted();
    const chat = this.#chat(chatId);
    // The client shows the message before `send` resolves with its id: until then a watcher
    // could not tell it is the one useChat already shows, so watchers wait.
    chat.sending++;
    let client, follow;
    try {
      client = await this.client(chatId);
      const { clientMessageId } = await client.send(text, attachments.length ? { attachments } : undefined);
      chat.name(clientMessageId, last.id);
      follow = chat.follow({ clientMessageId });
    } finally {
      chat.sending--;
      chat.resync();
    }
    return followTurn(client, follow, abortSignal, chat);
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
    if (!last.turnId) return followTurn(client, { clientMessageId: last.clientMessageId }, abortSignal, this.#chat(chatId));
    const reply = assistantOf(state, last.turnId);
    if (reply && ENDED.has(reply.status)) return null;
    // The view may be a cache, or the stream's snapshot may not have arrived yet: ask the server.
    const serverState = await this.#turnState(last.turnId).catch(() => null);
    if (abortSignal?.aborted) return null;
    if (serverState ? !inFlight(serverState) : !reply) return null;
    // Turns run one at a time per session, oldest first: resume the oldest one still open.
    let turnId = last.turnId;
    for (let i = users.length - 2; i >= 0; i--) {
      const earlier = users[i].turnId && assistantOf(state, users[i].turnId);
      if (!earlier || ENDED.has(earlier.status)) break;
      turnId = users[i].turnId;
    }
    return followTurn(client, { turnId }, abortSignal, this.#chat(chatId));
  }

  /**
   * Closes every ChatClient this transport opened (never cancels a turn) and stops its watchers.
   * The transport's optional `close` (AI SDK 7's `Chat.dispose()` calls it); a later call of the
   * transport connects again.
   */
  async close() {
    const clients = [...this.#clients.values()];
    this.#clients.clear();
    this.#chats.clear();
    await Promise.all(clients.map((p) => p.then((c) => c.close(), () => {})));
  }

  /**
   * `regenerate()`: another reply to the last user message (a new version, v1.2), streamed as
   * it comes; the earlier replies stay on the server, one `switchBranch` away.
   */
  async #regenerate(chatId, last, abortSignal) {
    if (!last || last.role !== "user") throw new Error("turnstream: regenerate answers the last user message again");
    const client = await this.client(chatId);
    const chat = this.#chat(chatId);
    const state = client.state();
    const key = chat.keyOf(last.id);
    const user = state.messages.find((m) => m.role === "user" && m.key === key);
    if (!user) throw new Error("turnstream: the message to answer again is not this chat's");
    const i = state.messages.indexOf(user);
    const before = state.messages[i + 1]?.role === "assistant" ? state.messages[i + 1].turnId : null;
    client.regenerate(user.key);
    return followTurn(client, { afterKey: user.key, notTurn: before }, abortSignal, chat);
  }

  /** `sendMessage({ text, messageId })`: a new version of that user message and its reply. */
  async #edit(chatId, last, abortSignal) {
    const text = (last.parts ?? []).filter((p) => p.type === "text").map((p) => p.text).join("");
    const chat = this.#chat(chatId);
    chat.sending++;
    let client, follow;
    try {
      client = await this.client(chatId);
      const { clientMessageId } = await client.edit(chat.keyOf(last.id), text);
      chat.name(clientMessageId, last.id);
      follow = chat.follow({ clientMessageId });
    } finally {
      chat.sending--;
      chat.resync();
    }
    return followTurn(client, follow, abortSignal, chat);
  }

  /**
   * useChat answered the agent's requests in its last reply (`addToolApprovalResponse`, or
   * `addToolOutput` after `onToolCall`) and sends again: the answers go to the turn's requests
   * and the same turn streams on into that reply, with no new user message.
   */
  async #answer(chatId, last, abortSignal) {
    const client = await this.client(chatId);
    const entry = client.state().messages.find((m) => m.role === "assistant" && m.key === last.id);
    if (!entry) throw new Error("turnstream: the reply to continue is not this chat's");
    for (const p of last.parts ?? []) {
      const r = entry.requests.find((q) => q.tool?.callId === p.toolCallId && q.answer == null);
      let answer = null;
      if (r?.kind === "approval" && p.state === "approval-responded" && p.approval) {
        answer = { approved: p.approval.approved === true };
        if (typeof p.approval.reason === "string") answer.reason = p.approval.reason;
      } else if (r?.kind === "client_tool" && p.state === "output-available") {
        answer = { output: p.output ?? null };
      } else if (r?.kind === "client_tool" && p.state === "output-error") {
        answer = { error: String(p.errorText ?? "the tool failed") };
      }
      // Posted now or once back online; a refusal (another tab answered first) shows in the
      // client's state, whose answer the reply then carries.
      if (answer) client.respond(r.requestId, answer).catch(() => {});
    }
    return followTurn(client, { turnId: entry.turnId, from: entry }, abortSignal, this.#chat(chatId));
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
 * adding a second reply. A user message's attachments are `file` parts before its text.
 * Messages the server refused, and replies with nothing to show yet, are left out.
 */
export function toUIMessages(state) {
  const out = [];
  for (const m of state.messages) {
    if (m.role === "user" && m.status === "rejected") continue;
    const ui = uiMessage(m, m.key);
    if (ui) out.push(ui);
  }
  return out;
}

/** One entry as a UI message under `id`; null for a reply with no part yet. */
function uiMessage(m, id) {
  if (m.role === "user") {
    const parts = (m.attachments ?? []).map((a) => (a.name == null
      ? { type: "file", mediaType: a.mediaType, url: a.url }
      : { type: "file", mediaType: a.mediaType, filename: a.name, url: a.url }));
    if (m.content || !parts.length) parts.push({ type: "text", text: m.content });
    return { id, role: "user", parts, metadata: { branch: m.branch } };
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
  for (const r of m.requests ?? []) {
    const part = requestPart(r);
    if (part) parts.push(part);
  }
  if (m.content) parts.push({ type: "text", text: m.content, state: done ? "done" : "streaming" });
  const metadata = { branch: m.branch };
  if (m.recovered) metadata.recovered = true; // a live reply's is `{ branch }`, as before
  return parts.length ? { id, role: "assistant", parts, metadata } : null;
}

/** A call of another agent (contract v1.3): the input and output of its `tool-agent_call` part. */
const callInput = (r) => ({ agent: r.call.agent, content: r.prompt ?? "" });
const callOutput = (r) => ({ state: r.call.state, text: r.call.text ?? "" });

/**
 * An approval or a client tool as the AI SDK's tool part: `approval-requested` until answered
 * (then `approval-responded`), `input-available` until the tool's output (or error) is given.
 * A call is `tool-agent_call`, run by the server (`providerExecuted`): `input-available` until
 * the child turn ended, then `output-available` with `{ state, text }`.
 * A question has no AI SDK part: it stays in `ChatClient`'s state.
 */
function requestPart(r) {
  if (r.call) {
    const part = { type: "tool-agent_call", toolCallId: r.requestId, state: "input-available", input: callInput(r), providerExecuted: true };
    return r.answer ? Object.assign(part, { state: "output-available", output: callOutput(r) }) : part;
  }
  if (!r.tool || r.kind === "question") return null;
  const part = { type: `tool-${r.tool.name}`, toolCallId: r.tool.callId, state: "input-available", input: r.tool.input };
  const a = r.answer;
  if (r.kind === "approval") {
    part.approval = { id: r.requestId };
    if (a && "approved" in a) Object.assign(part, { state: "approval-responded", approval: { id: r.requestId, approved: a.approved, reason: a.reason } });
    else part.state = "approval-requested";
  } else if (a && "output" in a) Object.assign(part, { state: "output-available", output: a.output });
  else if (a && ("error" in a || "timed_out" in a)) Object.assign(part, { state: "output-error", errorText: a.error ?? "timed out" });
  return part;
}

/**
 * What the transport knows of one chat beside its ChatClient: the ids useChat gave the messages
 * it sent through the transport, the turns it is streaming to useChat, and its watchers.
 */
class ChatLink {
  /** Sends between `ChatClient.send` and its answer: watchers wait (see `sendMessages`). */
  sending = 0;
  watchers = new Set();
  client = null;
  /** The turns streamed to useChat now: `{ clientMessageId, turnId }`, the turn id once known. */
  follows = new Set();
  /** An entry's key -> useChat's id of that message (a message useChat sent). */
  #ids = new Map();
  /** Ids of messages a watcher gave useChat from the client's view. */
  #given = new Set();
  /** Entry object -> its UI message: an entry that did not change keeps its message object. */
  #memo = new WeakMap();

  /** The message the client knows as `key` is, in useChat, `id`. */
  name(key, id) {
    if (typeof id !== "string" || !id || id === key) return;
    for (const [k, v] of this.#ids) if (v === id) this.#ids.delete(k);
    this.#ids.set(key, id);
  }

  /**
   * From now on watchers leave the reply to `target` (`clientMessageId` or `turnId`) to useChat,
   * which streams it through `followTurn`. A send registers it before watchers run again: the
   * reply may already be in the client's view (another tab posted the message while this one
   * wrote it to disk), and a watcher that gave it to useChat would see useChat's stream start
   * it over from nothing.
   */
  follow(target) {
    const follow = { clientMessageId: target.clientMessageId, turnId: target.turnId ?? null };
    this.follows.add(follow);
    return follow;
  }

  /** The key of the entry useChat knows as `id`. */
  keyOf(id) {
    for (const [k, v] of this.#ids) if (v === id) return k;
    return id;
  }

  /** These messages were given to useChat from the client's view. */
  give(messages) {
    for (const m of messages) this.#given.add(m.id);
  }

  /** The state's messages as useChat knows them (a refused message useChat sent stays). */
  convert(state) {
    const out = [];
    for (const m of state.messages) {
      const named = m.role === "user" ? this.#ids.get(m.key) : undefined;
      if (m.role === "user" && m.status === "rejected" && named === undefined) continue;
      const id = named ?? m.key;
      let memo = this.#memo.get(m);
      if (!memo || memo.id !== id) this.#memo.set(m, (memo = { id, ui: uiMessage(m, id) }));
      if (memo.ui) out.push(memo.ui);
    }
    return out;
  }

  /** Calls every watcher with the client's state (after a send got its id). */
  resync() {
    if (!this.client || this.sending > 0) return;
    const state = this.client.state();
    for (const w of this.watchers) w(state);
  }

  /**
   * useChat's messages `prev` joined with the client's `state`: the client's messages, in its
   * order, with useChat's own copy of the messages it sent and of the replies it is streaming;
   * and, after the message before them, useChat's messages the client does not show (yet),
   * unless a watcher gave them and the client no longer has them. `prev` itself when nothing
   * changed.
   */
  merge(prev, state) {
    const own = new Set();
    for (const f of this.follows) {
      const turnId = f.turnId ?? state.messages.find((m) => m.role === "user" && m.clientMessageId === f.clientMessageId)?.turnId;
      const reply = turnId && assistantOf(state, turnId);
      if (reply) own.add(reply.key);
    }
    const byId = new Map(prev.map((m) => [m.id, m]));
    const sent = new Set(this.#ids.values());
    const out = [];
    for (const m of this.convert(state)) {
      const mine = byId.get(m.id);
      // useChat's own copy of a message it sent (with its metadata) and of a reply it streams.
      if (own.has(m.id) || (mine && sent.has(m.id))) {
        // Its place among its versions is the client's (v1.2): a regeneration moves it.
        const b = m.metadata?.branch;
        const same = !b || (mine?.metadata?.branch?.index === b.index && mine.metadata.branch.count === b.count);
        if (mine) out.push(same ? mine : { ...mine, metadata: { ...mine.metadata, branch: b } });
        continue;
      }
      out.push(m);
    }
    this.give(out);
    const shown = new Set(out.map((m) => m.id));
    const extra = prev.filter((m) => !shown.has(m.id) && (own.has(m.id) || !this.#given.has(m.id)));
    if (extra.length) {
      const kept = new Set(extra);
      const joined = [];
      let next = 0; // the first message of `out` not in `joined` yet
      for (const m of prev) {
        if (kept.has(m)) {
          joined.push(m);
          continue;
        }
        const at = shown.has(m.id) ? out.findIndex((o, i) => i >= next && o.id === m.id) : -1;
        if (at >= 0) {
          joined.push(...out.slice(next, at + 1));
          next = at + 1;
        }
      }
      joined.push(...out.slice(next));
      out.length = 0;
      out.push(...joined);
    }
    return out.length === prev.length && out.every((m, i) => m === prev[i]) ? prev : out;
  }
}

/**
 * The state once the client has read the server's history, or cannot (offline, refused,
 * closed), or after `ms`.
 */
function historyRead(client, ms) {
  const done = (s) => s.historyLoaded || s.connection === "offline" || s.connection === "unauthorized" || s.connection === "closed";
  const now = client.state();
  if (done(now)) return Promise.resolve(now);
  return new Promise((resolve) => {
    const finish = (s) => {
      unsubscribe();
      clearTimeout(timer);
      resolve(s);
    };
    const unsubscribe = client.subscribe((s) => done(s) && finish(s));
    const timer = setTimeout(() => finish(client.state()), ms);
  });
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

/** A chunk with the reply's metadata: `branch` when it has other versions (v1.2), `recovered`. */
const withMeta = (chunk, { branch, recovered }) => {
  const meta = branch?.count > 1 ? { branch } : {};
  if (recovered) meta.recovered = true;
  return meta.branch || recovered ? { ...chunk, messageMetadata: meta } : chunk;
};

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
function followTurn(client, target, signal, chat) {
  // While useChat reads it, watchers leave this turn's reply to useChat.
  const follow = chat.follows.has(target) ? target : chat.follow(target);
  let turnId = follow.turnId;
  const from = target.from;
  let unsubscribe = null;
  let reading = true; // the consumer still reads the stream
  let cancelWanted = false;
  let cancelSent = false;
  let started = false;
  let open = null; // the text or reasoning part being streamed: { kind, id }
  let parts = 0;
  // A continuation picks up where useChat's copy of the reply is (`from`: the entry then).
  let text = from?.content ?? "";
  let thinking = from?.thinking ?? "";
  const tools = new Map((from?.tools ?? []).map((t) => [t.callId, { output: t.status === "finished" || t.status === "failed" }]));
  const asked = new Set((from?.requests ?? []).map((r) => r.requestId));
  const called = new Set((from?.requests ?? []).filter((r) => r.call && r.answer).map((r) => r.requestId));
  let controller;

  const stop = () => {
    if (!reading) chat.follows.delete(follow);
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
    if (!turnId && target.afterKey) {
      // A regeneration: the reply the branch shows after the message once it is a new one.
      const i = state.messages.findIndex((m) => m.key === target.afterKey);
      const next = i >= 0 ? state.messages[i + 1] : null;
      if (next?.role !== "assistant" || next.turnId === target.notTurn) return;
      turnId = follow.turnId = next.turnId;
      sendCancel();
    }
    if (!turnId) {
      const user = state.messages.find((m) => m.role === "user" && m.clientMessageId === target.clientMessageId);
      if (!user) return;
      if (user.status === "rejected") {
        emit({ type: "error", errorText: user.error?.message || "the message was not accepted" });
        end();
        return;
      }
      if (!user.turnId) return;
      turnId = follow.turnId = user.turnId;
      sendCancel();
    }
    if (!reading) return;
    const entry = assistantOf(state, turnId);
    if (!entry) return;
    if (!started) {
      started = true;
      emit(withMeta({ type: "start", messageId: entry.key }, entry));
      // A new step of the same reply: what useChat answered is the step before it.
      if (from) emit({ type: "start-step" });
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
    for (const r of entry.requests) {
      if (r.call) {
        // A call: the server runs it and answers it; the stream goes on meanwhile.
        if (!asked.has(r.requestId)) {
          asked.add(r.requestId);
          closePart();
          emit({ type: "tool-input-available", toolCallId: r.requestId, toolName: "agent_call", input: callInput(r), providerExecuted: true });
        }
        if (r.answer && !called.has(r.requestId)) {
          called.add(r.requestId);
          closePart();
          emit({ type: "tool-output-available", toolCallId: r.requestId, output: callOutput(r), providerExecuted: true });
        }
        continue;
      }
      if (asked.has(r.requestId) || !requestPart(r)) continue;
      asked.add(r.requestId);
      closePart();
      emit({ type: "tool-input-available", toolCallId: r.tool.callId, toolName: r.tool.name, input: r.tool.input });
      if (r.kind === "approval") emit({ type: "tool-approval-request", approvalId: r.requestId, toolCallId: r.tool.callId });
    }
    if (entry.content.length > text.length && entry.content.startsWith(text)) {
      emit({ type: "text-delta", id: openPart("text"), delta: entry.content.slice(text.length) });
      text = entry.content;
    }
    // Waiting on useChat (an approval, a client tool): this request ends here, as a model's
    // step that calls a tool does; useChat's answer sends again and the turn streams on.
    if (entry.status === "waiting" && entry.requests.some((r) => r.answer == null && !r.call && requestPart(r))) {
      closePart();
      emit({ type: "finish" });
      end();
      return;
    }
    if (ENDED.has(entry.status)) {
      closePart();
      if (entry.status === "complete") emit(withMeta({ type: "finish" }, entry));
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
