// useChat (AI SDK 5, @ai-sdk/react) over turnstream/ai-sdk. ?session=<id>&resume=1&initial=1
// (initial: useChat starts with the messages the ChatClient has, through toUIMessages).
// What the page shows is also published as window.view; every chunk the transport produced, per
// request, is recorded in window.requests.
import { useChat } from "@ai-sdk/react";
import { useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import { TurnstreamChatTransport, toUIMessages } from "turnstream/ai-sdk";

const params = new URLSearchParams(location.search);
const session = params.get("session");
const resume = params.get("resume") === "1";

window.requests = [];
const record = (kind, stream) => {
  if (!stream) {
    window.requests.push({ kind, chunks: null });
    return stream;
  }
  const log = { kind, chunks: [], closed: false };
  window.requests.push(log);
  return stream.pipeThrough(new TransformStream({
    transform(chunk, c) {
      log.chunks.push(chunk);
      c.enqueue(chunk);
    },
    flush() {
      log.closed = true;
    },
  }));
};

class RecordingTransport extends TurnstreamChatTransport {
  async sendMessages(options) {
    return record("send", await super.sendMessages(options));
  }
  async reconnectToStream(options) {
    return record("reconnect", await super.reconnectToStream(options));
  }
}

const transport = new RecordingTransport({ storage: "indexeddb" });
window.transport = transport;
const initial = params.get("initial") === "1" ? toUIMessages((await transport.client(session)).state()) : undefined;
window.initial = initial;

function Chat() {
  const { messages, sendMessage, stop, status, error } = useChat({ id: session, transport, resume, messages: initial });
  window.chat = { sendMessage, stop };
  window.view = { status, error: error ? error.message : null, messages };
  const [, force] = useState(0);
  useEffect(() => {
    window.rerender = () => force((n) => n + 1);
  }, []);
  return (
    <div>
      <p data-testid="status">{status}</p>
      {error && <p data-testid="error">{error.message}</p>}
      {messages.map((m) => (
        <article key={m.id} data-testid="message" data-role={m.role} data-id={m.id}>
          {m.parts.map((p, i) => (
            <div key={i} data-part={p.type}>{p.type === "text" || p.type === "reasoning" ? p.text : JSON.stringify(p.output ?? p.input ?? null)}</div>
          ))}
        </article>
      ))}
    </div>
  );
}

createRoot(document.getElementById("root")).render(<Chat />);
