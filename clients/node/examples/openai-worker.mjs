// A turnstream worker backed by an OpenAI-compatible chat-completions endpoint, with a system
// prompt and one local tool (the current time): it streams the model's thinking and reply,
// runs the tool calls the model asks for, sends the results back, and streams the answer.
//
//   TURNSTREAM_URL=http://127.0.0.1:8080 TURNSTREAM_SERVICE_KEY=... \
//   OPENAI_BASE_URL=https://api.openai.com/v1 OPENAI_API_KEY=... OPENAI_MODEL=gpt-4o-mini \
//   node examples/openai-worker.mjs
import { WorkerClient, runWorker } from "../src/index.js";

const SYSTEM_PROMPT = "You are a concise assistant. Use get_time when asked about the time.";
const TOOLS = [{
  type: "function",
  function: { name: "get_time", description: "The current time (ISO 8601, UTC).", parameters: { type: "object", properties: {} } },
}];
const LOCAL_TOOLS = { get_time: () => new Date().toISOString() };
/** Most model calls per turn (each tool round is one). */
const MAX_ROUNDS = 4;

/** Streams one chat completion: calls `onChunk(choice)` per chunk; resolves to the finish reason. */
async function streamCompletion({ baseUrl, apiKey, model, signal }, messages, onChunk) {
  const res = await fetch(`${baseUrl.replace(/\/+$/, "")}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) },
    body: JSON.stringify({ model, messages, tools: TOOLS, stream: true }),
    signal,
  });
  if (!res.ok) throw new Error(`upstream ${res.status}: ${(await res.text()).slice(0, 200)}`);
  const decoder = new TextDecoder();
  let buffer = "";
  let finish = null;
  for await (const bytes of res.body) {
    buffer += decoder.decode(bytes, { stream: true });
    let nl;
    while ((nl = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, nl).trim();
      buffer = buffer.slice(nl + 1);
      if (!line.startsWith("data:")) continue;
      const data = line.slice(5).trim();
      if (data === "[DONE]") return finish;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(`upstream error: ${chunk.error.message ?? JSON.stringify(chunk.error)}`);
      const choice = chunk.choices?.[0];
      if (!choice) continue;
      onChunk(choice);
      finish = choice.finish_reason ?? finish;
    }
  }
  return finish;
}

/** Answers one turn. */
export async function answer(turn, upstream) {
  const messages = [
    { role: "system", content: SYSTEM_PROMPT },
    ...turn.history.map((m) => ({ role: m.role, content: m.content })),
    { role: "user", content: turn.userMessage.content },
  ];
  for (let round = 0; round < MAX_ROUNDS; round++) {
    const calls = [];
    let text = "";
    const finish = await streamCompletion({ ...upstream, signal: turn.signal }, messages, (choice) => {
      const d = choice.delta ?? {};
      turn.thinking(d.reasoning_content ?? d.reasoning ?? "");
      if (d.content) {
        text += d.content;
        turn.response(d.content);
      }
      for (const tc of d.tool_calls ?? []) {
        const call = (calls[tc.index ?? 0] ??= { id: "", name: "", arguments: "" });
        call.id ||= tc.id ?? "";
        call.name += tc.function?.name ?? "";
        call.arguments += tc.function?.arguments ?? "";
      }
    });
    if (finish !== "tool_calls" || calls.length === 0) {
      if (finish && finish !== "stop") throw new Error(`the model stopped: ${finish}`);
      return;
    }
    messages.push({
      role: "assistant",
      content: text || null,
      tool_calls: calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })),
    });
    for (const c of calls) {
      turn.tool({ call_id: c.id, name: c.name, status: "started", input_preview: c.arguments || "{}" });
      const run = LOCAL_TOOLS[c.name];
      const output = run ? run() : `unknown tool ${c.name}`;
      turn.tool({ call_id: c.id, name: c.name, status: run ? "finished" : "failed", output_preview: output });
      messages.push({ role: "tool", tool_call_id: c.id, content: output });
    }
  }
  throw new Error(`no answer after ${MAX_ROUNDS} model calls`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const client = new WorkerClient({
    baseUrl: process.env.TURNSTREAM_URL ?? "http://127.0.0.1:8080",
    serviceKey: process.env.TURNSTREAM_SERVICE_KEY,
  });
  const upstream = {
    baseUrl: process.env.OPENAI_BASE_URL ?? "https://api.openai.com/v1",
    apiKey: process.env.OPENAI_API_KEY,
    model: process.env.OPENAI_MODEL ?? "gpt-4o-mini",
  };
  const stop = new AbortController();
  process.once("SIGINT", () => stop.abort());
  await runWorker(client, (turn) => answer(turn, upstream), { signal: stop.signal });
}
