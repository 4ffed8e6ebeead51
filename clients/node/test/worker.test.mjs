// The Node worker client against the real server binary: a turn streamed and completed through
// the loop helper, a cancel that fires the turn's AbortSignal, and a thrown handler that fails
// its turn.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { WorkerClient, runWorker } from "../src/index.js";
import { startServer, SERVICE_KEY } from "./server.mjs";

let server;
before(async () => {
  server = await startServer();
});
after(() => server?.stop());

const client = () => new WorkerClient({ baseUrl: server.url, serviceKey: SERVICE_KEY, workerId: "node-test" });

async function post(session, content) {
  const { status, body } = await server.api("POST", `/sessions/${session}/messages`, { content });
  assert.equal(status, 202);
  return body.turn_id;
}

test("the loop helper streams a turn and completes it", async () => {
  const turnId = await post("n1", "hello node");
  const stop = new AbortController();
  const seen = [];
  const loop = runWorker(
    client(),
    async (turn) => {
      seen.push(turn.userMessage.content);
      turn.thinking("pondering ");
      turn.tool({ call_id: "c1", name: "clock", status: "started", input_preview: "{}" });
      turn.tool({ call_id: "c1", name: "clock", status: "finished", output_preview: "noon" });
      for (const word of ["It ", "is ", "noon."]) turn.response(word);
      await turn.flush();
      turn.response(" Bye.");
      stop.abort();
    },
    { waitMs: 1000, signal: stop.signal },
  );
  const info = await server.waitTurnEnd(turnId);
  await loop;
  assert.deepEqual(seen, ["hello node"]);
  assert.equal(info.state, "completed");
  assert.equal(info.text, "It is noon. Bye.");
  assert.equal(info.thinking, "pondering ");
  assert.equal(info.tools[0].status, "finished");
  assert.equal(info.message.content, "It is noon. Bye.");
});

test("a cancel fires the turn's signal", async () => {
  const turnId = await post("n2", "slow");
  const [turn] = await client().claim({ waitMs: 10000 });
  assert.equal(turn.turnId, turnId);
  turn.response("partial");
  await turn.flush();
  const aborted = new Promise((resolve) => turn.signal.addEventListener("abort", resolve));
  const { body } = await server.api("POST", `/turns/${turnId}/cancel`);
  assert.equal(body.state, "cancelled");
  turn.response(" more");
  await turn.flush().catch(() => {});
  await turn.heartbeat().catch(() => {});
  await aborted;
  assert.equal(turn.state, "cancelled");
  const info = await server.waitTurnEnd(turnId);
  assert.equal(info.text, "partial");
  turn.close();
});

test("a handler that throws fails its turn with the message", async () => {
  const turnId = await post("n3", "boom");
  const stop = new AbortController();
  const loop = runWorker(
    client(),
    async (turn) => {
      turn.response("half");
      stop.abort();
      throw new Error("model unreachable");
    },
    { waitMs: 1000, signal: stop.signal },
  );
  const info = await server.waitTurnEnd(turnId);
  await loop;
  assert.equal(info.state, "failed");
  assert.equal(info.error, "model unreachable");
  assert.equal(info.text, "half");
});
