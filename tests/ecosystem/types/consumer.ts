// What a TypeScript app writes: type-checked (strict, no skipLibCheck) against the package's
// declarations, once per AI SDK major (5, 6, 7): `ai`'s ChatTransport and `@ai-sdk/react`'s
// useChat are that major's.
import { useChat } from "@ai-sdk/react";
import type { ChatTransport, FileUIPart, UIMessage, UIMessageChunk } from "ai";
import init, { type ChatState } from "turnstream";
import { TurnstreamChatTransport, toUIMessages, type ChatMessages, type TurnstreamMetadata } from "turnstream/ai-sdk";
import { usePresence, useTurnstream, type UsePresenceResult, type UseTurnstreamResult } from "turnstream/react";

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
  // Branches (v1.2): another reply, an edit of a message, another version shown.
  await chat.regenerate();
  await chat.sendMessage({ text: "hello again", messageId: "m-1" });
  const edited: string = (await client.edit("c-1", "hi")).clientMessageId;
  void edited;
  client.regenerate("turn:t-1");
  client.switchBranch("turn:t-1", 0);
  // `recovered`, the guard for side effects: on the transport's metadata, and in onFinish.
  const guarded = new TurnstreamChatTransport<UIMessage<TurnstreamMetadata>>();
  useChat<UIMessage<TurnstreamMetadata>>({
    id: "support-42", transport: guarded,
    onFinish: ({ message }) => {
      const recovered: true | undefined = message.metadata?.recovered;
      void recovered;
    },
  });
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
  // Branches (v1.2): each entry's place among its versions, and the calls that change it.
  for (const m of r.state.messages) {
    const b: { readonly index: number; readonly count: number } = m.branch;
    if (b.count > 1) void r.switchBranch(m.key, (b.index + 1) % b.count);
  }
  void r.edit("c-1", "hello").then((x) => x.clientMessageId);
  void r.regenerate("turn:t-1");
  const recovered: boolean[] = r.state.messages.map((m) => m.recovered);
  void recovered;
  // Presence (v1.3): who is here and who types, from the hook and from the state.
  const p: UsePresenceResult = usePresence(r);
  const here: string[] = p.members.map((m) => (m.self ? "you" : m.user ?? m.memberId));
  p.setPresence({ status: "away" });
  p.setTyping();
  r.client?.setTyping();
  const typing: boolean = p.typing.length > 0 || r.state.presence.some((m) => m.state.typing === true);
  void [here, typing, p.count, r.state.presenceCount];
  // Calls (v1.3): a reply's agent_call request and its child turn.
  for (const m of r.state.messages) {
    for (const q of m.requests) {
      if (q.kind !== "agent_call" || !q.call) continue;
      const state: string = q.call.state;
      void [state, `?session=${q.call.sessionId}`, q.call.text, q.call.turnId];
    }
  }
  return r.state.messages.filter((m) => m.role === "assistant" && (m.status === "streaming" || m.status === "waiting")).length;
}
