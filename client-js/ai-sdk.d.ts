import type { ChatTransport, UIMessage, UIMessageChunk } from "ai";
import type { ChatClient, ChatState, ConnectOptions, InitInput } from "./turnstream.js";

export interface TurnstreamChatTransportOptions extends Omit<ConnectOptions, "sessionId"> {
  /** Passed to the package's `init` when its wasm is not next to its JS (a bundler that does
   *  not copy `new URL("turnstream_bg.wasm", import.meta.url)`): a URL, a Response or a module. */
  wasm?: InitInput | Promise<InitInput>;
}

/**
 * A `ChatTransport` for the AI SDK's `useChat` (AI SDK 5) over a turnstream session: the chat's
 * `id` is the session id. `sendMessages` posts the last user message and streams its turn;
 * `reconnectToStream` resumes a turn in flight from its start (`useChat({ resume: true })`), or
 * answers `null`. Reasoning, text and the server's tool calls (`providerExecuted: true`) become
 * UI message parts; a failed or interrupted turn ends with an `error` chunk, a cancelled one with
 * `abort`; aborting the request (`stop()`) cancels the turn on the server.
 */
export declare class TurnstreamChatTransport<UI_MESSAGE extends UIMessage = UIMessage> implements ChatTransport<UI_MESSAGE> {
  constructor(options?: TurnstreamChatTransportOptions);
  sendMessages(options: Parameters<ChatTransport<UI_MESSAGE>["sendMessages"]>[0]): Promise<ReadableStream<UIMessageChunk>>;
  reconnectToStream(options: Parameters<ChatTransport<UI_MESSAGE>["reconnectToStream"]>[0]): Promise<ReadableStream<UIMessageChunk> | null>;
  /** The ChatClient of a chat, connected on first use and shared by the transport's calls. */
  client(chatId: string): Promise<ChatClient>;
  /** Closes every ChatClient the transport opened (never cancels a turn). */
  close(): Promise<void>;
}

/**
 * A ChatClient state's messages as UI messages, for `useChat`'s `messages` (useChat keeps none
 * across a reload): each entry under its `key`, so a turn that `reconnectToStream` resumes
 * (its `start` names the same key) replaces its entry instead of showing a second reply.
 * Messages the server refused are left out; thinking, tool calls and text become parts.
 */
export declare function toUIMessages<UI_MESSAGE extends UIMessage = UIMessage>(state: ChatState): UI_MESSAGE[];
