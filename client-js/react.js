// turnstream/react: useTurnstream(options), a ChatClient for the life of a component, and
// usePresence(session), who is in its session.
import { useCallback, useEffect, useMemo, useRef, useState, useSyncExternalStore } from "react";
import init, { ChatClient } from "./turnstream.js";

/** The state shown until the client is connected (one object per session, so it is stable). */
function placeholder(sessionId) {
  return Object.freeze({
    sessionId,
    connection: "connecting",
    busy: false,
    gap: false,
    hasMore: false,
    historyLoaded: false,
    error: null,
    messages: Object.freeze([]),
    presence: Object.freeze([]),
    presenceCount: 0,
  });
}

const noSubscription = () => () => {};

/**
 * Connects a ChatClient on mount, closes it on unmount, and connects again when `sessionId`,
 * `baseUrl`, `storage` or `historyLimit` change (a new `getToken` function does not reconnect:
 * the latest one is always called). Returns `{ state, send, respond, cancel, loadOlder, client }`.
 */
export function useTurnstream(options) {
  const { baseUrl, sessionId, storage, historyLimit, getToken, wasm } = options ?? {};
  const tokenRef = useRef(getToken);
  tokenRef.current = getToken;
  const hasToken = typeof getToken === "function";
  const key = JSON.stringify([baseUrl ?? null, sessionId ?? null, storage ?? null, historyLimit ?? null, hasToken]);

  // The connection of the current key: { key, promise, client }, replaced when the key changes.
  const [connected, setConnected] = useState(null);
  const pending = useRef(null);

  useEffect(() => {
    let closed = false;
    let client = null;
    const opts = { sessionId };
    if (baseUrl !== undefined) opts.baseUrl = baseUrl;
    if (storage !== undefined) opts.storage = storage;
    if (historyLimit !== undefined) opts.historyLimit = historyLimit;
    if (hasToken) opts.getToken = () => tokenRef.current();
    const promise = (async () => {
      await init(wasm === undefined ? undefined : { module_or_path: wasm });
      return ChatClient.connect(opts);
    })();
    const entry = { key, promise };
    pending.current = entry;
    promise.then(
      (c) => {
        if (closed) {
          c.close();
          return;
        }
        client = c;
        setConnected({ key, client: c });
      },
      (e) => {
        if (!closed) setConnected({ key, error: e });
      },
    );
    return () => {
      closed = true;
      if (pending.current === entry) pending.current = null;
      if (client) client.close();
    };
    // `wasm` is read once, on the first connect (init runs once per page).
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [key]);

  if (connected?.error && connected.key === key) throw connected.error;
  const client = connected?.key === key ? connected.client : null;
  const empty = useMemo(() => placeholder(sessionId), [sessionId]);
  const subscribe = useMemo(() => (client ? (cb) => client.subscribe(cb) : noSubscription), [client]);
  const getSnapshot = useCallback(() => (client ? client.state() : empty), [client, empty]);
  const state = useSyncExternalStore(subscribe, getSnapshot, getSnapshot);

  // The client of the current session, waiting for it when it is still connecting.
  const current = useCallback(async () => {
    const p = pending.current;
    if (!p) throw new Error("turnstream: useTurnstream is not mounted");
    return p.promise;
  }, []);
  const send = useCallback(async (content, opts) => (await current()).send(content, opts), [current]);
  /** Answers a request of the agent (`state.messages[].requests[]`). */
  const respond = useCallback(async (requestId, answer) => (await current()).respond(requestId, answer), [current]);
  const loadOlder = useCallback(async () => (await current()).loadOlder(), [current]);
  const edit = useCallback(async (key, content) => (await current()).edit(key, content), [current]);
  const regenerate = useCallback(async (key) => (await current()).regenerate(key), [current]);
  const switchBranch = useCallback(async (key, index) => (await current()).switchBranch(key, index), [current]);
  /** Cancels `turnId`, or without one the session's oldest queued or running turn. */
  const cancel = useCallback(async (turnId) => {
    const c = await current();
    if (turnId === undefined) {
      const open = c.state().messages.find((m) => m.role === "assistant" && (m.status === "queued" || m.status === "streaming" || m.status === "waiting"));
      if (!open) return null;
      turnId = open.turnId;
    }
    return c.cancel(turnId);
  }, [current]);

  return { state, send, respond, cancel, loadOlder, edit, regenerate, switchBranch, client };
}

const noPresence = Object.freeze([]);

/**
 * Presence (contract v1.3) of the session of `session` (what `useTurnstream` returns, or a
 * `ChatClient`): `{ members, count, typing, setPresence, setTyping }`. `members` is
 * `state.presence` (this browser's member first, `self`), `typing` the other members typing.
 */
export function usePresence(session) {
  const client = session && typeof session.setTyping === "function" ? session : session?.client ?? null;
  const state = session?.state ?? null;
  const own = useSyncExternalStore(
    useMemo(() => (client && !state ? (cb) => client.subscribe(cb) : noSubscription), [client, state]),
    () => (state ?? (client ? client.state() : null)),
    () => (state ?? (client ? client.state() : null)),
  );
  const members = own?.presence ?? noPresence;
  const typing = useMemo(() => members.filter((m) => !m.self && m.state.typing === true), [members]);
  const setPresence = useCallback((s) => client?.setPresence(s), [client]);
  const setTyping = useCallback(() => client?.setTyping(), [client]);
  return { members, count: own?.presenceCount ?? 0, typing, setPresence, setTyping };
}
