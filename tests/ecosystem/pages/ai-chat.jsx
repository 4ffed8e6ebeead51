// useChat over turnstream/ai-sdk, built once per AI SDK major (ai5, ai6, ai7: `@ai-sdk/react`
// aliased to the major's package). ?session=<id>&resume=1&initial=1&watch=1&wait=<ms>
// - initial: useChat starts with `await transport.messages(session)` (`wait`: its timeoutMs);
// - watch: `transport.watch(session, setMessages)` while the component is mounted;
// - asks: the agent's requests answered the AI SDK way: `onToolCall` runs the client tool
//   `get_location` (`addToolOutput`, `addToolResult` in ai 5) and useChat sends again once the
//   last reply's tool calls are answered (`sendAutomaticallyWhen`, with the major's helpers).
// Published for the tests: window.view (what useChat shows), window.initial (what `messages`
// answered), window.requests (every chunk the transport produced, per request), window.seen
// (every messages array useChat rendered, to check nothing was ever shown twice) and
// window.aiVersion (the `ai` this page was bundled with).
import { useChat } from "@ai-sdk/react";
import { useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import { TurnstreamChatTransport } from "turnstream/ai-sdk";
import * as aiExports from "ai-helpers";

const params = new URLSearchParams(location.search);
const session = params.get("session");
const resume = params.get("resume") === "1";
const watch = params.get("watch") === "1";
const asks = params.get("asks") === "1";
// ai 5 has no approvals (and no helper for them).
const ai = { ...aiExports };
/** What the page's client tool returns. */
window.LOCATION = { lat: 48.85, lon: 2.35, label: "Paris" };
window.aiVersion = __AI_VERSION__;

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
let initial;
if (params.get("initial") === "1") {
  const wait = params.get("wait");
  initial = await transport.messages(session, wait ? { timeoutMs: Number(wait) } : undefined);
  window.initial = { fromCache: initial.fromCache, messages: JSON.parse(JSON.stringify(initial)) };
}

const textOf = (m) => m.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
window.seen = [];

function Chat() {
  const answers = asks ? {
    // A client tool's output or an approval's answer: either completes the reply's last step.
    sendAutomaticallyWhen: (o) => ai.lastAssistantMessageIsCompleteWithToolCalls(o) ||
      (ai.lastAssistantMessageIsCompleteWithApprovalResponses?.(o) ?? false),
    onToolCall: ({ toolCall }) => {
      if (toolCall.toolName !== "get_location") return;
      const add = window.chat.addToolOutput ?? window.chat.addToolResult;
      // Not awaited inside onToolCall (the AI SDK's advice).
      add({ tool: toolCall.toolName, toolCallId: toolCall.toolCallId, output: window.LOCATION });
    },
  } : {};
  const { messages, sendMessage, regenerate, setMessages, stop, status, error, addToolOutput, addToolResult, addToolApprovalResponse } =
    useChat({ id: session, transport, resume, messages: initial, ...answers });
  useEffect(() => (watch ? transport.watch(session, setMessages) : undefined), [setMessages]);
  useEffect(() => {
    window.seen.push(messages.map((m) => ({ id: m.id, role: m.role, text: textOf(m) })));
  }, [messages]);
  window.chat = { sendMessage, regenerate, stop, addToolOutput, addToolResult, addToolApprovalResponse };
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
            <div key={i} data-part={p.type}>{p.type === "text" || p.type === "reasoning" ? p.text : p.type === "file" ? p.url : JSON.stringify(p.output ?? p.input ?? null)}</div>
          ))}
        </article>
      ))}
    </div>
  );
}

createRoot(document.getElementById("root")).render(<Chat />);
