// What a TypeScript app writes: type-checked (strict, no skipLibCheck) against the package's
// declarations, ai@5's ChatTransport and @ai-sdk/react's useChat.
import { useChat } from "@ai-sdk/react";
import type { ChatTransport, UIMessage, UIMessageChunk } from "ai";
import init, { type ChatState } from "turnstream";
import { TurnstreamChatTransport, toUIMessages } from "turnstream/ai-sdk";
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
  const messages: MyMessage[] = toUIMessages<MyMessage>((await transport.client("support-42")).state());
  const chat = useChat<MyMessage>({ id: "support-42", transport: asTransport, resume: true, messages });
  await chat.sendMessage({ text: "hello" });
  const client = await transport.client("support-42");
  const state: ChatState = client.state();
  void state;
  await transport.close();
}

export function react(): number {
  const r: UseTurnstreamResult = useTurnstream({ sessionId: "s", storage: "indexeddb", getToken: async () => "t" });
  void r.send("hi").then((x) => x.clientMessageId);
  void r.cancel().then((x) => x?.state);
  void r.cancel("turn-1");
  void r.loadOlder().then((x) => x.added);
  return r.state.messages.filter((m) => m.role === "assistant" && m.status === "streaming").length;
}
