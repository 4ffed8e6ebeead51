// turnstream-worker/ai-sdk: an AI SDK agent (ai 5, 6 or 7, an optional peer dependency) as a
// `runWorker` handler, and the pipes that stream `streamText`'s parts or a UI message stream
// into a turn. `streamText` comes from the `ai` the application installed, loaded lazily.

import { conversation, journalSteps, stepMessages, toolResult } from "./ai-sdk/messages.js";
import { ModelStreamError, errorMessage, journaledUpdates, pipeStreamText, pipeUIMessageStream, preview, toolUpdate } from "./ai-sdk/pipe.js";
import { ToolDenied, turnTools } from "./ai-sdk/tools.js";

export { ModelStreamError, ToolDenied, pipeStreamText, pipeUIMessageStream };

/** Most model calls a turn makes when neither `maxSteps` nor `stopWhen` is given. */
export const DEFAULT_MAX_STEPS = 10;

/**
 * Runs the pending tool calls of a continuation (their asks meet their answers, so an approved
 * call runs here, once) and resolves to the model messages of the steps the journal holds.
 */
async function journaledMessages(turn, tools, abortSignal) {
  journaledUpdates(turn, turn.continuation.events);
  const { steps, pending } = journalSteps(turn.continuation.events);
  const messages = stepMessages(steps);
  for (const call of pending) {
    const tool = tools[call.name];
    let result;
    try {
      if (!tool?.execute) throw new Error(`no tool ${call.name}`);
      const output = await tool.execute(call.input, { toolCallId: call.call_id, messages, abortSignal });
      toolUpdate(turn, { call_id: call.call_id, name: call.name, status: "finished", output_preview: preview(output) });
      result = toolResult(call, true, output);
    } catch (err) {
      if (abortSignal.aborted) throw err;
      toolUpdate(turn, { call_id: call.call_id, name: call.name, status: "failed", output_preview: preview(errorMessage(err)) });
      result = toolResult(call, false, errorMessage(err));
    }
    call.step.results.set(call.call_id, result);
  }
  return stepMessages(steps);
}

/**
 * A `runWorker` handler that answers each turn with the AI SDK: the model messages from
 * `turn.history` and `turn.userMessage`, `streamText` with the agent's model, system prompt and
 * tools, its parts piped into the turn. A tool with `needsApproval` asks `turn.requestApproval`
 * and runs after a yes (a no is the call's error, which the model reads); a tool without
 * `execute` asks `turn.requestClientTool` and the browser's output goes back to the model.
 * `turn.signal` aborts the model call. A turn continued in another process goes on from its
 * journal: the model is not asked again for what it already said.
 *
 * @param {object} agent
 * @param {object} agent.model  an AI SDK language model, e.g. `openai("gpt-4o-mini")`
 * @param {string} [agent.system]  the system prompt
 * @param {object} [agent.tools]  AI SDK tools (`tool({ description, inputSchema, execute?, needsApproval? })`)
 * @param {number} [agent.maxSteps]  most model calls a turn makes (10)
 * @param {Function|Function[]} [agent.stopWhen]  the AI SDK's stop condition, instead of `maxSteps`
 * @param {Function} [agent.streamText]  `streamText` of the `ai` to use (default: `import("ai")`)
 * Other options (`temperature`, `providerOptions`, ...) go to `streamText` as they are.
 */
export function aiSdkAgent({ model, system, tools, maxSteps = DEFAULT_MAX_STEPS, stopWhen, streamText, ...options }) {
  if (!model) throw new TypeError("aiSdkAgent needs a `model`");
  return async function aiSdkTurn(turn) {
    const run = streamText ?? (await import("ai")).streamText;
    // Stops the model call on cancel, and when an ask is let go (the turn goes on elsewhere).
    const stop = new AbortController();
    let letGo = null;
    const cancel = () => stop.abort(turn.signal.reason);
    if (turn.signal.aborted) cancel();
    turn.signal.addEventListener("abort", cancel, { once: true });
    const turnsTools = turnTools(turn, tools, (err) => {
      letGo ??= err;
      stop.abort(err);
    });
    try {
      const messages = conversation(turn);
      if (turn.continuation) messages.push(...(await journaledMessages(turn, turnsTools, stop.signal)));
      const result = run({
        ...options,
        model,
        ...(system !== undefined ? { system } : {}),
        ...(tools ? { tools: turnsTools } : {}),
        messages,
        stopWhen: stopWhen ?? (({ steps }) => steps.length >= maxSteps),
        abortSignal: stop.signal,
        // The error reaches the turn through the stream's error part.
        onError: () => {},
      });
      await pipeStreamText(turn, result);
    } catch (err) {
      if (letGo) throw letGo;
      if (turn.signal.aborted) return;
      throw err;
    } finally {
      turn.signal.removeEventListener("abort", cancel);
    }
    if (letGo) throw letGo;
  };
}
