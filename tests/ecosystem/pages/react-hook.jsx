// useTurnstream under StrictMode (built once with React 19, once with React 18). The page counts
// live ChatClients and subscriptions by wrapping the package's ChatClient, and exposes
// window.app: mount(session, storage), unmount(), setSession(session), send(text), setTyping(), respond(id, answer),
// cancel(), counts().
import { StrictMode, useState, version } from "react";
import { createRoot } from "react-dom/client";
import { ChatClient } from "turnstream";
import { usePresence, useTurnstream } from "turnstream/react";

const counts = { connects: 0, closes: 0, subscribes: 0, unsubscribes: 0, renders: 0 };
const connect = ChatClient.connect;
ChatClient.connect = async (options) => {
  const c = await connect.call(ChatClient, options);
  counts.connects++;
  return c;
};
const close = ChatClient.prototype.close;
const closed = new WeakSet();
ChatClient.prototype.close = function () {
  if (!closed.has(this)) {
    closed.add(this);
    counts.closes++;
  }
  return close.call(this);
};
const subscribe = ChatClient.prototype.subscribe;
ChatClient.prototype.subscribe = function (listener) {
  counts.subscribes++;
  const unsubscribe = subscribe.call(this, listener);
  let done = false;
  return () => {
    if (!done) {
      done = true;
      counts.unsubscribes++;
    }
    unsubscribe();
  };
};

let api = null;
let typing = null;
function Chat({ sessionId, storage }) {
  const t = useTurnstream({ sessionId, storage });
  const presence = usePresence(t);
  counts.renders++;
  api = t;
  typing = presence.setTyping;
  window.view = { sessionId: t.state.sessionId, connection: t.state.connection, busy: t.state.busy,
    messages: t.state.messages.map((m) => ({ key: m.key, role: m.role, status: m.status, content: m.content, requests: m.requests })),
    presence: { count: presence.count, typing: presence.typing.map((m) => m.memberId),
      members: presence.members.map((m) => ({ id: m.memberId, self: m.self })) } };
  return (
    <ul>
      {t.state.messages.map((m) => <li key={m.key} data-role={m.role} data-status={m.status}>{m.content}</li>)}
    </ul>
  );
}

let setSession = null;
function App({ initial, storage }) {
  const [sessionId, set] = useState(initial);
  setSession = set;
  return <Chat sessionId={sessionId} storage={storage} />;
}

const root = createRoot(document.getElementById("root"));
window.app = {
  reactVersion: version,
  /** `storage`: undefined (the default, IndexedDB) or "memory". */
  mount(session, storage) {
    root.render(<StrictMode><App initial={session} storage={storage} /></StrictMode>);
  },
  unmount() {
    root.render(null);
    api = null;
    window.view = null;
  },
  setSession: (s) => setSession(s),
  send: (text) => api.send(text),
  setTyping: () => typing(),
  cancel: (turnId) => api.cancel(turnId),
  respond: (requestId, answer) => api.respond(requestId, answer),
  loadOlder: () => api.loadOlder(),
  sameCallbacks: () => {
    const first = api;
    return () => first.send === api.send && first.respond === api.respond && first.cancel === api.cancel &&
      first.loadOlder === api.loadOlder;
  },
  counts: () => ({ ...counts, clients: counts.connects - counts.closes, subscriptions: counts.subscribes - counts.unsubscribes }),
};
