// What a TypeScript app writes: type-checked (strict, no skipLibCheck) against the package's
// declarations, once per AI SDK major (5, 6, 7): `ai`'s ChatTransport and `@ai-sdk/react`'s
// useChat are that major's.
import { useChat } from "@ai-sdk/react";
import type { ChatTransport, FileUIPart, UIMessage, UIMessageChunk } from "ai";
import init, { type ChatState } from "turnstream";
import { TurnstreamChatTransport, toUIMessages, type ChatMessages } from "turnstream/ai-sdk";
import { useTurnstream, type UseTurnstreamResult } from "turnstream/react";

type Meta = { createdAt: number };
type MyMessage = UIMessage<Meta>;

export async function aiSdk(): Promise<void> {
  await init();
  const transport = new TurnstreamChatTransport<MyMessage>({ baseUrl: "https://chat.example.com", getToken: async () => "t", storage: "memory" });
  const asTransport: ChatTransport<MyMessage> = transport;
  const plain: ChatTransport<UIMessage> = new TurnstreamChatTransport();
  const stream: ReadableStream<UIMessageChunk> | null = await plain.reconnectToStream({ chatId: "s" });
  void stream;
  const replay: boolean | undefined = transport.resumeStreamIsReplay;
  void replay;
  const messages: ChatMessages<MyMessage> = await transport.messages("support-42", { timeoutMs: 3000 });
  const fromCache: boolean = messages.fromCache;
  void fromCache;
  const chat = useChat<MyMessage>({ id: "support-42", transport: asTransport, resume: true, messages });
  const stopWatching: () => void = transport.watch("support-42", chat.setMessages);
  stopWatching();
  const files: FileUIPart[] = [{ type: "file", mediaType: "image/png", filename: "a.png", url: "https://files.example.com/a.png" }];
  await chat.sendMessage({ text: "hello", files });
  const cached: MyMessage[] = toUIMessages<MyMessage>((await transport.client("support-42")).state());
  void cached;
  const client = await transport.client("support-42");
  const state: ChatState = client.state();
  const loaded: boolean = state.historyLoaded;
  void loaded;
  await transport.close();
}

export function react(): number {
  const r: UseTurnstreamResult = useTurnstream({ sessionId: "s", storage: "indexeddb", getToken: async () => "t" });
  void r.send("hi").then((x) => x.clientMessageId);
  void r.cancel().then((x) => x?.state);
  void r.cancel("turn-1");
  void r.loadOlder().then((x) => x.added);
  // Agents that ask (v1.2): the reply's requests, answered with respond; onBusy on send.
  void r.send("stop that", { onBusy: "interrupt" });
  for (const m of r.state.messages) {
    if (m.role !== "assistant") continue;
    for (const q of m.requests) {
      if (q.answer !== null) continue;
      if (q.kind === "approval") void r.respond(q.requestId, { approved: true, reason: `runs ${q.tool?.name}` });
      else if (q.kind === "client_tool") void r.respond(q.requestId, { output: { input: q.tool?.input } });
      else void r.respond(q.requestId, q.options?.[0] ?? "yes").catch((e: { code: string }) => e.code);
    }
  }
  return r.state.messages.filter((m) => m.role === "assistant" && (m.status === "streaming" || m.status === "waiting")).length;
}
