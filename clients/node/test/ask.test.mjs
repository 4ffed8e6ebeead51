// Agents that ask, through the Node worker client, against the real server binary: the ask
// example's approval and client tool answered over HTTP and continued by the handler that
// asked; two asks at once; an ask that expires; and a worker process that asked, waited and
// was killed, its turn continued by another process with the answer and the next seq.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { WorkerClient, runWorker } from "../src/index.js";
import { answer } from "../examples/ask-worker.mjs";
import { startServer, SERVICE_KEY } from "./server.mjs";

const here = dirname(fileURLToPath(import.meta.url));
let server;
before(async () => {
  server = await startServer();
});
after(() => server?.stop());

async function post(session, content) {
  const { status, body } = await server.api("POST", `/sessions/${session}/messages`, { content });
  assert.equal(status, 202);
  return body.turn_id;
}

async function give(turnId, body) {
  const res = await server.api("POST", `/turns/${turnId}/input`, body);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

/** Runs `handler` in a loop until `until` settles; resolves to `until`'s value. */
async function withWorker(handler, until, workerId = "node-ask", options = {}) {
  const stop = new AbortController();
  const client = new WorkerClient({ baseUrl: server.url, serviceKey: SERVICE_KEY, workerId });
  const loop = runWorker(client, handler, { waitMs: 500, signal: stop.signal, ...options });
  try {
    return await until;
  } finally {
    stop.abort();
    await loop;
  }
}

test("the example's approval: asked, approved over HTTP, and the same handler goes on", async () => {
  let runs = 0;
  const turnId = await post("ask1", "deploy prod");
  const info = await withWorker(
    (turn) => ((runs += 1), answer(turn)),
    (async () => {
      const waiting = await server.waitOpenRequests(turnId);
      const [{ expires_at, ...request }] = waiting.requests;
      assert.deepEqual(request, {
        request_id: "ask-1", kind: "approval", prompt: "Deploy prod?",
        tool: { call_id: "call_deploy", name: "deploy", input: { target: "prod" } },
      });
      assert.ok(expires_at > Date.now(), "the server sets a default expiry");
      assert.equal(waiting.text, "Deploying prod needs your approval. ");
      assert.equal((await give(turnId, { request_id: "ask-1", approved: true })).request_id, "ask-1");
      return server.waitTurnEnd(turnId);
    })(),
  );
  assert.equal(info.state, "completed", JSON.stringify(info));
  assert.equal(info.text, "Deploying prod needs your approval. Done: prod is live.");
  assert.deepEqual(
    info.tools.map((t) => [t.call_id, t.name, t.status, t.output_preview]),
    [["call_deploy", "deploy", "finished", "prod is live"]],
  );
  assert.deepEqual(info.requests[0].answer, { approved: true });
  assert.equal(runs, 1, "the handler that asked went on; it was not run again");
});

test("the example's client tool: its output given over HTTP is the reply", async () => {
  const turnId = await post("ask2", "Where am I?");
  const info = await withWorker(
    answer,
    (async () => {
      const waiting = await server.waitOpenRequests(turnId);
      assert.equal(waiting.requests[0].kind, "client_tool");
      assert.deepEqual(waiting.requests[0].tool, { call_id: "call_location", name: "get_location", input: {} });
      await give(turnId, { request_id: "ask-1", output: { city: "Lisbon", lat: 38.72 } });
      return server.waitTurnEnd(turnId);
    })(),
  );
  assert.equal(info.state, "completed", JSON.stringify(info));
  assert.equal(info.text, "You are in Lisbon.");
});

test("two asks at once wait for both answers", async () => {
  const turnId = await post("ask3", "two things");
  const runs = [];
  const info = await withWorker(
    async (turn) => {
      runs.push(turn.continuation);
      turn.response("Asking. ");
      const [verdict, reply] = await Promise.all([
        turn.requestApproval({ tool: { call_id: "c1", name: "rm", input: { path: "/tmp/x" } } }),
        turn.ask({ prompt: "Which colour?", options: ["red", "blue"], requestId: "colour" }),
      ]);
      turn.response(`${verdict.approved ? "Removed" : "Kept"}, ${reply.text}.`);
    },
    (async () => {
      const waiting = await server.waitOpenRequests(turnId, 2);
      assert.deepEqual(waiting.requests.map((r) => r.request_id), ["ask-1", "colour"]);
      assert.deepEqual(waiting.requests[1].options, ["red", "blue"]);
      assert.equal((await give(turnId, { request_id: "colour", text: "blue" })).state, "waiting");
      await give(turnId, { request_id: "ask-1", approved: false });
      return server.waitTurnEnd(turnId);
    })(),
  );
  assert.equal(info.state, "completed", JSON.stringify(info));
  assert.equal(info.text, "Asking. Kept, blue.");
  assert.deepEqual(runs, [null], "the handler that asked went on; it was not run again");
});

test("an ask whose time runs out resolves to timed_out", async () => {
  const turnId = await post("ask4", "quick question");
  const info = await withWorker(
    async (turn) => {
      const reply = await turn.ask({ prompt: "Now?", expiresAt: Date.now() + 1000 });
      turn.response(reply.timed_out ? "No answer." : `You said ${reply.text}.`);
    },
    server.waitTurnEnd(turnId),
  );
  assert.equal(info.state, "completed", JSON.stringify(info));
  assert.equal(info.text, "No answer.");
  assert.deepEqual(info.requests[0].answer, { timed_out: true });
});

test("a handler let go after suspendMs is not a failure: the continuation runs it again", async () => {
  const turnId = await post("ask6", "deploy staging");
  const runs = [];
  let letGo;
  const wasLetGo = new Promise((resolve) => (letGo = resolve));
  const info = await withWorker(
    async (turn) => {
      runs.push(turn.continuation === null ? "first" : "continuation");
      try {
        await answer(turn);
      } catch (err) {
        letGo(err);
        throw err;
      }
    },
    (async () => {
      const err = await wasLetGo;
      assert.equal(err.name, "TurnSuspended");
      assert.equal((await server.api("GET", `/turns/${turnId}`)).body.state, "waiting");
      await give(turnId, { request_id: "ask-1", approved: true });
      return server.waitTurnEnd(turnId);
    })(),
    "node-lets-go",
    { suspendMs: 300 },
  );
  assert.equal(info.state, "completed", JSON.stringify(info));
  assert.equal(info.text, "Deploying staging needs your approval. Done: staging is live.");
  assert.deepEqual(runs, ["first", "continuation"]);
});

test("a worker that asked, waited and died: another process continues with the answer and the next seq", async () => {
  const turnId = await post("ask5", "deploy prod");
  const dead = spawn(process.execPath, [join(here, "../examples/ask-worker.mjs")], {
    env: { ...process.env, TURNSTREAM_URL: server.url, TURNSTREAM_SERVICE_KEY: SERVICE_KEY, TURNSTREAM_WORKER_ID: "node-dies" },
    stdio: ["ignore", "inherit", "inherit"],
  });
  const exited = new Promise((resolve) => dead.once("exit", resolve));
  try {
    await server.waitOpenRequests(turnId);
  } finally {
    dead.kill("SIGKILL");
  }
  await exited;
  await give(turnId, { request_id: "ask-1", approved: false, reason: "not on a Friday" });
  const continued = [];
  const info = await withWorker(
    (turn) => {
      continued.push({ continuation: turn.continuation, seq: turn.seq, replaying: turn.replaying });
      return answer(turn);
    },
    server.waitTurnEnd(turnId),
    "node-continues",
  );
  assert.equal(info.state, "completed", JSON.stringify(info));
  assert.equal(info.text, "Deploying prod needs your approval. Not deployed: not on a Friday");
  assert.equal(continued.length, 1);
  const [{ continuation, seq, replaying }] = continued;
  // The dead worker sent one events request (seq 0) and its wait (seq 1).
  assert.equal(continuation.seq, 2);
  assert.equal(seq, 2);
  assert.equal(replaying, true);
  assert.deepEqual(
    continuation.answers.map((a) => [a.request_id, a.answer]),
    [["ask-1", { approved: false, reason: "not on a Friday" }]],
  );
  const [said, { expires_at, ...asked }] = continuation.events;
  assert.deepEqual(said, { type: "response", delta: "Deploying prod needs your approval. " });
  assert.deepEqual(asked, {
    type: "input_requested", request_id: "ask-1", kind: "approval", prompt: "Deploy prod?",
    tool: { call_id: "call_deploy", name: "deploy", input: { target: "prod" } },
  });
  assert.equal(continuation.events.length, 2);
});
