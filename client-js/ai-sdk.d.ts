import type { ChatTransport, UIMessage, UIMessageChunk } from "ai";
import type { BranchPosition, ChatClient, ChatState, ConnectOptions, InitInput } from "./turnstream.js";

export interface TurnstreamChatTransportOptions extends Omit<ConnectOptions, "sessionId"> {
  /** Passed to the package's `init` when its wasm is not next to its JS (a bundler that does
   *  not copy `new URL("turnstream_bg.wasm", import.meta.url)`): a URL, a Response or a module. */
  wasm?: InitInput | Promise<InitInput>;
}

export interface MessagesOptions {
  /** How long to wait for the server's history before answering with the cache (ms, default 5000).
   *  It answers at once when the browser is offline or the server refuses the token. */
  timeoutMs?: number;
}

/**
 * What the transport puts in a UI message's `metadata` (`UIMessage<TurnstreamMetadata>`; an
 * app's own metadata type may extend it).
 */
export interface TurnstreamMetadata {
  /** Its place among its versions (contract v1.2); on a streamed reply, only when it has others. */
  branch?: BranchPosition;
  /** On a reply whose turn ended while no page listened (the entry's `recovered`): it was not
   *  seen live, so its side effects (a sound, a notification, `onFinish` work) must not run
   *  again. Absent on live replies and on user messages. */
  recovered?: true;
}

/** UI messages for `useChat`'s `messages`, and where they come from. */
export type ChatMessages<UI_MESSAGE extends UIMessage = UIMessage> = UI_MESSAGE[] & {
  /** true: the server's history could not be read in time, these are what this browser cached
   *  (nothing on a new device). false: the server's conversation. */
  fromCache: boolean;
};

/** What `watch` calls: `useChat`'s `setMessages` fits (any binding's, given a function). */
export type SetMessages<UI_MESSAGE extends UIMessage = UIMessage> = (update: (messages: UI_MESSAGE[]) => UI_MESSAGE[]) => void;

/**
 * A `ChatTransport` for the AI SDK's `useChat` (AI SDK 5, 6 and 7) over a turnstream session:
 * the chat's `id` is the session id. `sendMessages` posts the last user message (its files as
 * attachments) and streams its turn; `reconnectToStream` resumes a turn in flight from its start
 * (`useChat({ resume: true })`), or answers `null`. Reasoning, text and the server's tool calls
 * (`providerExecuted: true`) become UI message parts; a failed or interrupted turn ends with an
 * `error` chunk, a cancelled one with `abort`; aborting the request (`stop()`) cancels the turn
 * on the server.
 *
 * Agents that ask (contract v1.2): an approval the agent asks for is a tool part in
 * `approval-requested` state (AI SDK 6 and 7), a client tool a tool call for `onToolCall`; the
 * request ends there. Answered with `addToolApprovalResponse` or `addToolOutput`
 * (`addToolResult` in AI SDK 5) and sent again (`sendAutomaticallyWhen`, e.g. the AI SDK's
 * `lastAssistantMessageIsCompleteWithApprovalResponses` / `...WithToolCalls`), the answers go
 * to the turn (`ChatClient.respond`) and the same turn streams on into the same reply. A
 * question (`kind: "question"`) has no AI SDK part: answer it with `ChatClient.respond`.
 *
 * Branches (contract v1.2): `regenerate()` asks for another reply to the last user message and
 * streams it; `sendMessage({ text, messageId })` edits that message (a new version, whose reply
 * starts a new branch). The messages are the session's active branch, each with
 * `metadata.branch` (`{ index, count }`: its place among its versions); switch with
 * `ChatClient.switchBranch` (`transport.client(chatId)`), which every tab and device follows.
 *
 * Recovered replies: a reply whose turn ended while no page listened (the page was closed
 * mid-turn) has `metadata.recovered: true`, in `messages`, `watch` and `toUIMessages`, and on
 * the `start` and `finish` chunks of a stream that ends that way (so `onFinish`'s `message`
 * has it): the guard for side effects.
 */
export declare class TurnstreamChatTransport<UI_MESSAGE extends UIMessage = UIMessage> implements ChatTransport<UI_MESSAGE> {
  constructor(options?: TurnstreamChatTransportOptions);
  /** A resumed stream replays the turn from its start (read by AI SDK 6 and 7). */
  readonly resumeStreamIsReplay: true;
  sendMessages(options: Parameters<ChatTransport<UI_MESSAGE>["sendMessages"]>[0]): Promise<ReadableStream<UIMessageChunk>>;
  reconnectToStream(options: Parameters<ChatTransport<UI_MESSAGE>["reconnectToStream"]>[0]): Promise<ReadableStream<UIMessageChunk> | null>;
  /**
   * The chat's messages for `useChat`'s `messages`, once the client has read the server's
   * history; the cache (`fromCache: true`) when that cannot happen within `timeoutMs`.
   */
  messages(chatId: string, options?: MessagesOptions): Promise<ChatMessages<UI_MESSAGE>>;
  /**
   * Keeps a mounted `useChat` in step with the chat's client: messages sent, answered or
   * replied to in other tabs and devices appear; the reply `useChat` streams itself is left to
   * it. Pass `useChat`'s `setMessages`. Returns the function that stops watching.
   */
  watch(chatId: string, setMessages: SetMessages<UI_MESSAGE>): () => void;
  /** The ChatClient of a chat, connected on first use and shared by the transport's calls. */
  client(chatId: string): Promise<ChatClient>;
  /** Closes every ChatClient the transport opened (never cancels a turn); the transport's
   *  optional `close`, which AI SDK 7's `Chat.dispose()` calls. */
  close(): Promise<void>;
}

/**
 * A ChatClient state's messages as UI messages, each entry under its `key`, so a turn that
 * `reconnectToStream` resumes (its `start` names the same key) replaces its entry instead of
 * showing a second reply. Messages the server refused, and replies with nothing to show yet, are
 * left out; attachments become `file` parts, thinking, tool calls and text their parts. Each
 * has `metadata.branch`, and a recovered reply `metadata.recovered: true`.
 */
export declare function toUIMessages<UI_MESSAGE extends UIMessage = UIMessage>(state: ChatState): UI_MESSAGE[];
