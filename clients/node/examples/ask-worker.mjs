// A turnstream worker that asks before it acts (contract v1.2): "deploy TARGET" asks a person
// to approve the `deploy` tool call and runs it only when approved; "where am I?" asks the
// browser to run its `get_location` tool and answers with the result. The handler reads
// top to bottom: every ask is one `await`, whichever process ends up continuing the turn.
//
//   TURNSTREAM_URL=http://127.0.0.1:8080 TURNSTREAM_SERVICE_KEY=... node examples/ask-worker.mjs
import { WorkerClient, runWorker } from "../src/index.js";

/** The tools this worker runs itself, once approved. */
const LOCAL_TOOLS = { deploy: ({ target }) => `${target} is live` };

// README: begin
export async function answer(turn) {
  const text = turn.userMessage.content.trim();
  const deploy = /^deploy (\S+)$/i.exec(text);
  if (deploy) {
    const call = { call_id: "call_deploy", name: "deploy", input: { target: deploy[1] } };
    turn.response(`Deploying ${deploy[1]} needs your approval. `);
    const verdict = await turn.requestApproval({ tool: call, prompt: `Deploy ${deploy[1]}?` });
    if (verdict.timed_out) return turn.response("Nobody answered, so I did not deploy.");
    if (!verdict.approved) return turn.response(`Not deployed${verdict.reason ? `: ${verdict.reason}` : "."}`);
    turn.tool({ call_id: call.call_id, name: call.name, status: "started", input_preview: JSON.stringify(call.input) });
    const output = LOCAL_TOOLS.deploy(call.input);
    turn.tool({ call_id: call.call_id, name: call.name, status: "finished", output_preview: output });
    return turn.response(`Done: ${output}.`);
  }
  if (/where am i/i.test(text)) {
    const call = { call_id: "call_location", name: "get_location", input: {} };
    const result = await turn.requestClientTool({ tool: call });
    if (result.timed_out) return turn.response("Your browser did not say where you are.");
    if (result.error !== undefined) return turn.response(`Your browser could not tell: ${result.error}`);
    return turn.response(`You are in ${result.output.city}.`);
  }
  turn.response('Say "deploy TARGET" or "where am I?".');
}
// README: end

if (import.meta.url === `file://${process.argv[1]}`) {
  const client = new WorkerClient({
    baseUrl: process.env.TURNSTREAM_URL ?? "http://127.0.0.1:8080",
    serviceKey: process.env.TURNSTREAM_SERVICE_KEY,
    workerId: process.env.TURNSTREAM_WORKER_ID,
  });
  const stop = new AbortController();
  process.once("SIGINT", () => stop.abort());
  process.once("SIGTERM", () => stop.abort());
  await runWorker(client, answer, { signal: stop.signal });
}
