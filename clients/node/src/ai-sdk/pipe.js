// The AI SDK's stream parts as a turn's events: `streamText`'s full stream (ai 5, 6, 7) and the
// UI message stream both map to thinking, response deltas and tool updates; an error part fails
// the turn with the provider's message after what was streamed before it.

/** The last tool update sent per turn and call, so an update is never sent twice. */
const sent = new WeakMap();

/** JSON text of a value for a preview (`null` for a value JSON cannot hold). */
export function preview(value) {
  try {
    return JSON.stringify(value) ?? "null";
  } catch {
    return JSON.stringify(String(value));
  }
}

/** The message of whatever the AI SDK reports as an error. */
export function errorMessage(error) {
  if (error == null) return "unknown error";
  if (typeof error === "string") return error;
  if (error instanceof Error) return error.message;
  if (typeof error.message === "string") return error.message;
  return preview(error);
}

/** What identifies a tool update, whatever else an event carries. */
function updateKey({ call_id, name, status, input_preview, output_preview }) {
  return preview([call_id, name, status, input_preview ?? null, output_preview ?? null]);
}

function sentUpdates(turn) {
  let calls = sent.get(turn);
  if (!calls) sent.set(turn, (calls = new Map()));
  return calls;
}

/** Sends a tool update unless it is the one last sent for its call. */
export function toolUpdate(turn, call) {
  const calls = sentUpdates(turn);
  const key = updateKey(call);
  if (calls.get(call.call_id) === key) return;
  calls.set(call.call_id, key);
  turn.tool(call);
}

/** Counts the tool updates of journaled events as sent (a continuation does not send them again). */
export function journaledUpdates(turn, events) {
  const calls = sentUpdates(turn);
  for (const e of events ?? []) if (e.type === "tool") calls.set(e.call_id, updateKey(e));
}

/** The turn's usage in the protocol's names, from the AI SDK's `LanguageModelUsage`. */
function usageOf(usage) {
  const count = (n) => (typeof n === "number" ? n : typeof n?.total === "number" ? n.total : undefined);
  const prompt = count(usage?.inputTokens);
  const completion = count(usage?.outputTokens);
  if (prompt === undefined && completion === undefined) return undefined;
  return {
    prompt_tokens: prompt ?? 0,
    completion_tokens: completion ?? 0,
    total_tokens: count(usage?.totalTokens) ?? (prompt ?? 0) + (completion ?? 0),
  };
}

/** Thrown by a pipe when the stream reported an error: its message is the provider's. */
export class ModelStreamError extends Error {
  constructor(error) {
    super(errorMessage(error));
    this.name = "ModelStreamError";
    this.cause = error;
  }
}

/**
 * Streams `streamText`'s result into the turn (text as `response`, reasoning as `thinking`,
 * tool input and output as `tool` updates keyed by `toolCallId`) and resolves to `{ usage }`
 * once the stream ends; the usage of its `finish` part is also kept as `turn.usage`. An
 * `error` part rejects with a ModelStreamError holding the provider's message once the
 * stream has ended, after everything streamed before it was sent.
 */
export async function pipeStreamText(turn, result) {
  const names = new Map();
  let failure = null;
  for await (const part of result.fullStream) {
    switch (part.type) {
      case "text-delta":
        turn.response(part.text ?? part.delta ?? part.textDelta ?? "");
        break;
      case "reasoning-delta":
      case "reasoning":
        turn.thinking(part.text ?? part.delta ?? part.textDelta ?? "");
        break;
      case "tool-input-start":
        names.set(part.id, part.toolName);
        toolUpdate(turn, { call_id: part.id, name: part.toolName, status: "started" });
        break;
      case "tool-call":
        names.set(part.toolCallId, part.toolName);
        toolUpdate(turn, { call_id: part.toolCallId, name: part.toolName, status: "started", input_preview: preview(part.input) });
        break;
      case "tool-result":
        toolUpdate(turn, { call_id: part.toolCallId, name: part.toolName, status: "finished", output_preview: preview(part.output) });
        break;
      case "tool-error":
        toolUpdate(turn, { call_id: part.toolCallId, name: part.toolName, status: "failed", output_preview: preview(errorMessage(part.error)) });
        break;
      case "tool-output-denied":
        toolUpdate(turn, {
          call_id: part.toolCallId,
          name: part.toolName ?? names.get(part.toolCallId) ?? "",
          status: "failed",
          output_preview: preview("denied"),
        });
        break;
      case "finish":
        turn.usage = usageOf(part.totalUsage ?? part.usage) ?? turn.usage;
        break;
      case "error":
        failure ??= part.error;
        break;
      default:
        break;
    }
  }
  if (failure !== null) throw new ModelStreamError(failure);
  return { usage: turn.usage };
}

/**
 * Streams an AI SDK UI message stream (`result.toUIMessageStream()`, or any stream of its
 * chunks) into the turn, as `pipeStreamText` does: text, reasoning, tool input and output, and
 * an `error` chunk as a ModelStreamError once the stream has ended.
 */
export async function pipeUIMessageStream(turn, stream) {
  const names = new Map();
  let failure = null;
  for await (const chunk of stream) {
    const name = () => chunk.toolName ?? names.get(chunk.toolCallId) ?? "";
    switch (chunk.type) {
      case "text-delta":
        turn.response(chunk.delta ?? "");
        break;
      case "reasoning-delta":
        turn.thinking(chunk.delta ?? "");
        break;
      case "tool-input-start":
        names.set(chunk.toolCallId, chunk.toolName);
        toolUpdate(turn, { call_id: chunk.toolCallId, name: chunk.toolName, status: "started" });
        break;
      case "tool-input-available":
        names.set(chunk.toolCallId, chunk.toolName);
        toolUpdate(turn, { call_id: chunk.toolCallId, name: chunk.toolName, status: "started", input_preview: preview(chunk.input) });
        break;
      case "tool-output-available":
        toolUpdate(turn, { call_id: chunk.toolCallId, name: name(), status: "finished", output_preview: preview(chunk.output) });
        break;
      case "tool-output-error":
        toolUpdate(turn, { call_id: chunk.toolCallId, name: name(), status: "failed", output_preview: preview(chunk.errorText) });
        break;
      case "tool-output-denied":
        toolUpdate(turn, { call_id: chunk.toolCallId, name: name(), status: "failed", output_preview: preview("denied") });
        break;
      case "error":
        failure ??= chunk.errorText ?? "unknown error";
        break;
      default:
        break;
    }
  }
  if (failure !== null) throw new ModelStreamError(failure);
  return { usage: turn.usage };
}
