import type { CancelResult, ChatClient, ChatState, ConnectOptions, InitInput, LoadOlderResult, PresenceMember, RequestAnswer, SendOptions, SendResult } from "./turnstream.js";

export interface UseTurnstreamOptions extends ConnectOptions {
  /** Passed to the package's `init` on the first connect when its wasm is not next to its JS. */
  wasm?: InitInput | Promise<InitInput>;
}

export interface UseTurnstreamResult {
  /** The client's state (through `useSyncExternalStore`); until it is connected, an empty state
   *  with `connection: "connecting"`. Its entries are `ChatClient`'s: a reply's `recovered`
   *  (its turn ended while no page listened) is the guard for side effects. */
  readonly state: ChatState;
  /** `ChatClient.send`; waits for the client when it is still connecting. */
  send(content: string, options?: SendOptions): Promise<SendResult>;
  /** `ChatClient.respond`: answers a request of the agent (`state.messages[].requests[]`). */
  respond(requestId: string, answer: RequestAnswer | string): Promise<void>;
  /** `ChatClient.cancel`; without a turn id, the session's oldest queued, running or waiting turn
   *  (resolves `null` when there is none). */
  cancel(turnId?: string): Promise<CancelResult | null>;
  /** `ChatClient.loadOlder`. */
  loadOlder(): Promise<LoadOlderResult>;
  /** `ChatClient.edit`: a new version of a user message (contract v1.2). */
  edit(key: string, content: string): Promise<SendResult>;
  /** `ChatClient.regenerate`: another reply to a user message, or to a reply's message. */
  regenerate(key: string): Promise<void>;
  /** `ChatClient.switchBranch`: shows version `index` of an entry, in every tab. */
  switchBranch(key: string, index: number): Promise<void>;
  /** The connected client, or null while connecting. */
  readonly client: ChatClient | null;
}

/**
 * A ChatClient for the life of the component: connects on mount, closes on unmount, connects
 * again when `sessionId`, `baseUrl`, `storage` or `historyLimit` change (a new `getToken`
 * function does not reconnect; the latest is always called). `send`, `respond`, `cancel`, `loadOlder`,
 * `edit`, `regenerate` and `switchBranch`
 * keep their identity across renders.
 */
export declare function useTurnstream(options: UseTurnstreamOptions): UseTurnstreamResult;

export interface UsePresenceResult {
  /** `state.presence`: who is in the session, this browser's member first (`self`). */
  readonly members: readonly PresenceMember[];
  /** `state.presenceCount`: members present, unlisted ones included. */
  readonly count: number;
  /** The other members whose state says `typing: true`. */
  readonly typing: readonly PresenceMember[];
  /** `ChatClient.setPresence`: sets these keys of the browser's presence state. */
  setPresence(state: Record<string, unknown>): void;
  /** `ChatClient.setTyping`: call it on every keystroke. */
  setTyping(): void;
}

/**
 * Presence (contract v1.3) of a session: pass what `useTurnstream` returned (or a
 * `ChatClient`). Until the client is connected, no members, and the setters do nothing.
 */
export declare function usePresence(session: UseTurnstreamResult | ChatClient | null): UsePresenceResult;
