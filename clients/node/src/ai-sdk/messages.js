// The AI SDK model messages of a turn: its history and user message (attachments as file
// parts), and, on a continuation, the steps the journal already holds (text, tool calls and
// their results), so the model goes on from there instead of being asked again.

/** A turnstream message as an AI SDK model message (null for one with nothing to say). */
function modelMessage(message) {
  const text = message.content ?? "";
  if (message.role === "user") {
    const files = (message.attachments ?? []).map((a) => ({
      type: "file",
      data: new URL(a.url),
      mediaType: a.media_type,
      ...(a.name !== undefined ? { filename: a.name } : {}),
    }));
    if (files.length === 0) return { role: "user", content: text };
    return { role: "user", content: [...(text ? [{ type: "text", text }] : []), ...files] };
  }
  if (message.role === "assistant") return text ? { role: "assistant", content: text } : null;
  if (message.role === "system") return { role: "system", content: text };
  return null;
}

/** The model messages of the conversation up to and including the turn's user message. */
export function conversation(turn) {
  return [...(turn.history ?? []), turn.userMessage].map(modelMessage).filter(Boolean);
}

/** A preview back as a value: JSON when it parses, else the text itself. */
function parsed(text, fallback) {
  if (text === undefined) return fallback;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * The model steps a continuation's journaled events hold: `{ steps, pending }`, each step
 * `{ content, results }` (the assistant's text and tool-call parts; tool results by call id)
 * and `pending` the tool calls without a result yet, in the order they were made.
 */
export function journalSteps(events) {
  const steps = [];
  const calls = new Map(); // call id -> {step, call_id, name, input}
  let step = null;
  const open = () => {
    if (!step || step.results.size > 0) steps.push((step = { content: [], results: new Map() }));
    return step;
  };
  const call = (callId, name, input) => {
    if (calls.has(callId)) return;
    const s = open();
    s.content.push({ type: "tool-call", toolCallId: callId, toolName: name, input });
    calls.set(callId, { step: s, call_id: callId, name, input });
  };
  for (const e of events ?? []) {
    if (e.type === "response") {
      const s = open();
      const last = s.content[s.content.length - 1];
      if (last?.type === "text") last.text += e.delta;
      else s.content.push({ type: "text", text: e.delta });
    } else if (e.type === "tool" && e.status === "started" && e.input_preview !== undefined) {
      call(e.call_id, e.name, parsed(e.input_preview, {}));
    } else if (e.type === "input_requested" && e.tool) {
      call(e.tool.call_id, e.tool.name, e.tool.input ?? {});
    } else if (e.type === "tool" && (e.status === "finished" || e.status === "failed")) {
      const known = calls.get(e.call_id);
      if (known) known.step.results.set(e.call_id, toolResult(known, e.status === "finished", parsed(e.output_preview, null)));
    }
  }
  const pending = [...calls.values()].filter((c) => !c.step.results.has(c.call_id));
  return { steps, pending };
}

/** A tool-result part: the output as JSON, or an error's text. */
export function toolResult({ call_id, name }, ok, value) {
  const output = ok
    ? { type: "json", value: value ?? null }
    : { type: "error-text", value: typeof value === "string" ? value : JSON.stringify(value) };
  return { type: "tool-result", toolCallId: call_id, toolName: name, output };
}

/** The steps as model messages: each step's assistant message, then its tool results. */
export function stepMessages(steps) {
  const out = [];
  for (const s of steps) {
    if (s.content.length > 0) out.push({ role: "assistant", content: s.content });
    const results = s.content.filter((p) => p.type === "tool-call" && s.results.has(p.toolCallId));
    if (results.length > 0) out.push({ role: "tool", content: results.map((p) => s.results.get(p.toolCallId)) });
  }
  return out;
}
