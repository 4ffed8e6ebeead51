// Two turnstream workers, two agents (contract v1.3): the planner, asked for a plan, calls the
// researcher in a session of its own and waits for its turn to end; the researcher answers
// the planner's message as it would a person's. Each serves only its agent, so they run as two
// processes (or more of each); the call waits in the server, not in either process, and the
// planner's turn continues wherever it is claimed once the researcher's turn ended.
//
//   export TURNSTREAM_URL=http://127.0.0.1:8080 TURNSTREAM_SERVICE_KEY=...
//   node examples/planner-researcher.mjs researcher &
//   node examples/planner-researcher.mjs planner
//
// Then post `{"content": "the tides", "agent": "planner"}` to /api/sessions/SESSION/messages.
import { WorkerClient, runWorker } from "../src/index.js";

// README: begin
export async function planner(turn) {
  const topic = turn.userMessage.content.trim();
  turn.response(`Asking the researcher about ${topic}. `);
  const found = await turn.call({
    agent: "researcher",
    session: `${turn.sessionId}.research`, // the researcher's turn is seen in this session
    content: topic,
  });
  if (found.state !== "completed") return turn.response(`The research ended ${found.state}, so no plan.`);
  turn.response(`Plan: start from "${found.text}"`);
}

export async function researcher(turn) {
  const topic = turn.userMessage.content.trim();
  const asker = turn.calledBy ? `session ${turn.calledBy.session_id}` : "a person";
  turn.response(`${topic}: three sources found, for ${asker}.`);
}
// README: end

export const AGENTS = { planner, researcher };

if (import.meta.url === `file://${process.argv[1]}`) {
  const role = process.argv[2];
  if (!Object.hasOwn(AGENTS, role)) {
    console.error("usage: node examples/planner-researcher.mjs planner|researcher");
    process.exit(2);
  }
  const client = new WorkerClient({
    baseUrl: process.env.TURNSTREAM_URL ?? "http://127.0.0.1:8080",
    serviceKey: process.env.TURNSTREAM_SERVICE_KEY,
    workerId: process.env.TURNSTREAM_WORKER_ID ?? `${role}-${process.pid}`,
  });
  const stop = new AbortController();
  process.once("SIGINT", () => stop.abort());
  process.once("SIGTERM", () => stop.abort());
  await runWorker(client, AGENTS[role], { agents: [role], signal: stop.signal });
}
