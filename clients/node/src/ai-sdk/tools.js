// An agent's AI SDK tools as tools of a turn: a tool with `needsApproval` asks
// `turn.requestApproval` before it runs, a tool without `execute` asks the browser
// (`turn.requestClientTool`); both ask under the model's toolCallId, so a continuation meets
// its answer again.

import { preview, toolUpdate } from "./pipe.js";

/** A tool call a person denied: the model reads this error as the call's result. */
export class ToolDenied extends Error {
  constructor(name, reason) {
    super(`the user denied ${name}${reason ? `: ${reason}` : ""}`);
    this.name = "ToolDenied";
  }
}

/**
 * The tools as the model gets them, each asking the turn first where it must. `onLetGo(err)`
 * is called when an ask is let go (the turn waits and this run will not see its answer), so the
 * caller stops the model call instead of giving it the error as a result.
 */
export function turnTools(turn, tools, onLetGo) {
  const asked = async (ask) => {
    try {
      return await ask();
    } catch (err) {
      onLetGo(err);
      throw err;
    }
  };
  const wrapped = {};
  for (const [name, tool] of Object.entries(tools ?? {})) {
    const { needsApproval, execute } = tool;
    if (!needsApproval && execute) {
      wrapped[name] = tool;
      continue;
    }
    wrapped[name] = {
      ...tool,
      needsApproval: undefined,
      async execute(input, options) {
        const call = { call_id: options.toolCallId, name, input: input ?? null };
        const needs = typeof needsApproval === "function" ? await needsApproval(input, options) : Boolean(needsApproval);
        if (needs || !execute) {
          // Journaled with its input before the ask, so a continuation finds the call.
          toolUpdate(turn, { call_id: call.call_id, name, status: "started", input_preview: preview(input) });
        }
        if (needs) {
          const verdict = await asked(() => turn.requestApproval({ tool: call, requestId: call.call_id }));
          if (verdict.timed_out) throw new ToolDenied(name, "nobody answered in time");
          if (!verdict.approved) throw new ToolDenied(name, verdict.reason);
        }
        if (execute) return execute(input, options);
        const answer = await asked(() => turn.requestClientTool({ tool: call, requestId: call.call_id }));
        if (answer.timed_out) throw new Error(`the browser did not run ${name} in time`);
        if (answer.error !== undefined) throw new Error(typeof answer.error === "string" ? answer.error : preview(answer.error));
        return answer.output;
      },
    };
  }
  return wrapped;
}
