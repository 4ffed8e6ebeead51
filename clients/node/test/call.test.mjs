// Agent calls (contract v1.3) through the Node worker client, against the real server binary:
// the planner/researcher example as two worker processes, and its planner killed while it
// waits, continued by a new process; claims of some agents only; a
// planner continued by another process, whose call answers at once on replay; a child that
// ends before the caller's `wait`; refused calls; three calls at once, each child's end
// (completed, failed, cancelled) reaching the caller; chains of calls, a cycle and one too deep
// refused with their codes; and a call into a full session (429) sent again until it fits.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { WorkerClient, runWorker } from "../src/index.js";
import { planner, researcher } from "../examples/planner-researcher.mjs";
import { startServer, SERVICE_KEY } from "./server.mjs";

const here = dirname(fileURLToPath(import.meta.url));
let server;
before(async () => {
  server = await startServer();
});
after(() => server?.stop());

async function post(session, content, agent) {
  const { status, body } = await server.api("POST", `/sessions/${session}/messages`, { content, agent });
  assert.equal(status, 202, JSON.stringify(body));
  return body.turn_id;
}

/** Runs a worker loop serving `agents` until stopped: `{ stop() }` resolves once it ended. */
function serve(handler, agents, workerId, client) {
  const abort = new AbortController();
  client ??= new WorkerClient({ baseUrl: server.url, serviceKey: SERVICE_KEY, workerId });
  const loop = runWorker(client, handler, { waitMs: 500, agents, signal: abort.signal });
  return {
    loop,
    async stop() {
      abort.abort();
      await loop;
    },
  };
}

const EXAMPLE_TEXT = (session, topic) =>
  `Asking the researcher about ${topic}. Plan: start from "${topic}: three sources found, for session ${session}."`;

test("the example: a planner worker process calls a researcher worker process", async () => {
  const env = { ...process.env, TURNSTREAM_URL: server.url, TURNSTREAM_SERVICE_KEY: SERVICE_KEY };
  const example = join(here, "../examples/planner-researcher.mjs");
  const workers = ["planner", "researcher"].map((role) =>
    spawn(process.execPath, [example, role], { env, stdio: ["ignore", "inherit", "inherit"] }),
  );
  try {
    const turnId = await post("plan1", "the tides", "planner");
    const info = await server.waitTurnEnd(turnId);
    assert.equal(info.state, "completed", JSON.stringify(info));
    assert.equal(info.agent, "planner");
    assert.equal(info.text, EXAMPLE_TEXT("plan1", "the tides"));
    assert.equal(info.requests.length, 1, JSON.stringify(info.requests));
    const [request] = info.requests;
    assert.equal(request.kind, "agent_call");
    assert.equal(request.request_id, "ask-1");
    assert.equal(request.call.agent, "researcher");
    assert.equal(request.call.session_id, "plan1.research");
    const childId = request.call.turn_id;
    assert.equal(request.answered_by, `turn:${childId}`);
    assert.deepEqual(request.answer, {
      turn_id: childId, state: "completed", text: "the tides: three sources found, for session plan1.",
    });
    const child = (await server.api("GET", `/turns/${childId}`)).body;
    assert.equal(child.agent, "researcher");
    assert.equal(child.session_id, "plan1.research");
    assert.equal(child.state, "completed");
    assert.equal(child.text, request.answer.text);
  } finally {
    // Stopped as a deployment stops them: their claims end with them.
    await Promise.all(workers.map((w) => new Promise((resolve) => (w.once("exit", resolve), w.kill("SIGTERM")))));
  }
});

test("the example's planner process killed while it waits: a new one continues the turn", async () => {
  const env = { ...process.env, TURNSTREAM_URL: server.url, TURNSTREAM_SERVICE_KEY: SERVICE_KEY };
  const example = join(here, "../examples/planner-researcher.mjs");
  const start = (role) => spawn(process.execPath, [example, role], { env, stdio: ["ignore", "inherit", "inherit"] });
  const stop = (w) => new Promise((resolve) => (w.once("exit", resolve), w.kill("SIGTERM")));
  const turnId = await post("plan9", "the wind", "planner");
  const first = start("planner");
  const waiting = await server.waitOpenRequests(turnId);
  assert.equal(waiting.requests[0].kind, "agent_call");
  const killed = new Promise((resolve) => first.once("exit", resolve));
  first.kill("SIGKILL"); // it held no lease: the turn waits in the server, not in the process
  await killed;
  const workers = [start("researcher"), start("planner")];
  try {
    const info = await server.waitTurnEnd(turnId);
    assert.equal(info.state, "completed", JSON.stringify(info));
    assert.equal(info.text, EXAMPLE_TEXT("plan9", "the wind"));
    assert.equal(info.requests.length, 1);
    assert.equal(info.requests[0].answer.state, "completed");
  } finally {
    await Promise.all(workers.map(stop));
  }
});

test("claim({agents}) hands out only those agents' turns; no agents, every agent's", async () => {
  const plain = await post("agents1", "for anyone");
  const research = await post("agents2", "for the researcher", "researcher");
  const plan = await post("agents3", "for the planner", "planner");
  const client = new WorkerClient({ baseUrl: server.url, serviceKey: SERVICE_KEY, workerId: "node-agents" });
  const got = await client.claim({ agents: ["researcher"], waitMs: 0, maxTurns: 8 });
  assert.deepEqual(got.map((t) => [t.turnId, t.agent, t.calledBy]), [[research, "researcher", null]]);
  const rest = await client.claim({ waitMs: 0, maxTurns: 8 }); // (and any other test's left queued)
  const agents = new Map(rest.map((t) => [t.turnId, t.agent]));
  assert.deepEqual([agents.get(plain), agents.get(plan)], ["default", "planner"]);
  for (const t of [...got, ...rest]) await t.complete();
  await assert.rejects(client.claim({ agents: [], waitMs: 0 }), TypeError);
  await assert.rejects(client.claim({ agents: ["Not A Name"], waitMs: 0 }), (err) => err.status === 422);
});

test("another process continues the planner: the call answers at once on replay, nothing is sent twice", async () => {
  const runs = [];
  const tracked = async (turn) => {
    runs.push({ continuation: turn.continuation !== null, replaying: turn.replaying });
    await planner(turn);
  };
  const turnId = await post("plan2", "the moon", "planner");
  const first = serve(tracked, ["planner"], "node-planner-a");
  const waiting = await server.waitOpenRequests(turnId);
  assert.equal(waiting.text, "Asking the researcher about the moon. ");
  await first.stop(); // the handler waiting there is let go
  const research = serve(researcher, ["researcher"], "node-researcher");
  const second = serve(tracked, ["planner"], "node-planner-b");
  try {
    const info = await server.waitTurnEnd(turnId);
    assert.equal(info.state, "completed", JSON.stringify(info));
    assert.equal(info.text, EXAMPLE_TEXT("plan2", "the moon"));
    assert.deepEqual(runs, [{ continuation: false, replaying: false }, { continuation: true, replaying: true }]);
    assert.equal(info.requests.length, 1, "the replayed call opened no second call");
  } finally {
    await Promise.all([research.stop(), second.stop()]);
  }
});

test("a child that ends before the caller sends wait: the wait answers running and the handler goes on", async () => {
  const turnId = await post("plan3", "the sun", "planner");
  const research = serve(researcher, ["researcher"], "node-researcher-3");
  const waits = [];
  // Holds the planner's `wait` until the researcher's turn has answered the call.
  const slowWait = async (url, init) => {
    if (String(url).endsWith("/wait")) {
      await server.waitTurn(turnId, (t) => t.requests?.[0]?.answer !== undefined, "the call's answer");
      const res = await fetch(url, init);
      waits.push(await res.clone().json());
      return res;
    }
    return fetch(url, init);
  };
  const client = new WorkerClient({ baseUrl: server.url, serviceKey: SERVICE_KEY, workerId: "node-planner-3", fetch: slowWait });
  let runs = 0;
  const plan = serve((turn) => ((runs += 1), planner(turn)), ["planner"], null, client);
  try {
    const info = await server.waitTurnEnd(turnId);
    assert.equal(info.state, "completed", JSON.stringify(info));
    assert.equal(info.text, EXAMPLE_TEXT("plan3", "the sun"));
    assert.deepEqual(waits.map((w) => w.state), ["running"]);
    assert.equal(runs, 1, "the handler that called went on; it was not run again");
  } finally {
    await Promise.all([research.stop(), plan.stop()]);
  }
});

test("a refused call rejects with its code; nothing is journaled and the turn goes on", async () => {
  const turnId = await post("plan4", "refuse", "planner");
  const outcomes = [];
  const refusing = async (turn) => {
    turn.response("Before. ");
    for (const call of [
      { agent: "researcher", session: turn.sessionId, content: "myself" }, // own session: a cycle
      { agent: "researcher", session: "", content: "nowhere" }, // an empty target
    ]) {
      try {
        await turn.call(call);
        outcomes.push("answered");
      } catch (err) {
        outcomes.push([err.name, err.status, err.code, err.requestId]);
        turn.response(`${err.code}. `);
      }
    }
    turn.response("After.");
  };
  const sent = [];
  const recording = (url, init) => (sent.push(String(url).split("/").pop()), fetch(url, init));
  const client = new WorkerClient({ baseUrl: server.url, serviceKey: SERVICE_KEY, workerId: "node-planner-4", fetch: recording });
  const plan = serve(refusing, ["planner"], null, client);
  try {
    const info = await server.waitTurnEnd(turnId);
    assert.equal(info.state, "completed", JSON.stringify(info));
    assert.ok(!sent.includes("wait"), `no call was opened, so the turn never waited: ${sent}`);
    assert.equal(outcomes[0].join(), ["CallRefused", 409, "call_cycle", "ask-1"].join());
    assert.deepEqual(outcomes[1].slice(0, 2), ["CallRefused", 422]);
    assert.equal(info.text, `Before. call_cycle. ${outcomes[1][2]}. After.`);
    assert.equal(info.requests, undefined, "a refused call journals no request");
  } finally {
    await plan.stop();
  }
});

const FILE = { url: "https://files.example.com/notes.txt", media_type: "text/plain", name: "notes.txt" };

test("three calls at once: completed (with an attachment), failed and cancelled children each answer the caller", async () => {
  const turnId = await post("plan5", "fan out", "planner");
  const fanOut = async (turn) => {
    const results = await Promise.all([
      turn.call({ agent: "researcher", session: "fan.ok", content: "ok", attachments: [FILE] }),
      turn.call({ agent: "researcher", session: "fan.boom", content: "boom" }),
      turn.call({ agent: "researcher", session: "fan.held", content: "held" }),
    ]);
    turn.response(results.map((r) => `${r.state}${r.error ? ` (${JSON.stringify(r.error)})` : ""}: ${r.text}`).join(" | "));
  };
  let cancelled;
  const wasCancelled = new Promise((resolve) => (cancelled = resolve));
  const research = serve(
    async (turn) => {
      if (turn.userMessage.content === "held") {
        turn.response("holding");
        return wasCancelled; // its end then meets the cancel (409 turn_cancelled)
      }
      if (turn.userMessage.content === "boom") {
        turn.response("partial");
        throw new Error("the researcher broke");
      }
      const files = (turn.userMessage.attachments ?? []).map((a) => a.name);
      turn.response(`${turn.userMessage.content} done${files.length ? ` with ${files}` : ""}`);
    },
    ["researcher"],
    "node-researcher-5",
  );
  const plan = serve(fanOut, ["planner"], "node-planner-5");
  try {
    const waiting = await server.waitTurn(
      turnId,
      (t) => (t.requests ?? []).filter((r) => r.answer !== undefined).length === 2,
      "two answered calls",
    );
    assert.equal(waiting.state, "waiting");
    const held = waiting.requests.find((r) => r.call.session_id === "fan.held");
    assert.equal(held.answer, undefined);
    await server.waitTurn(held.call.turn_id, (t) => t.text === "holding", "the held child's output");
    const cancel = await server.api("POST", `/turns/${held.call.turn_id}/cancel`);
    assert.equal(cancel.status, 200, JSON.stringify(cancel.body));
    assert.equal(cancel.body.state, "cancelled");
    cancelled();
    const info = await server.waitTurnEnd(turnId);
    assert.equal(info.state, "completed", JSON.stringify(info));
    const [ok, boom, heldText] = info.text.split(" | ");
    assert.equal(ok, "completed: ok done with notes.txt", "the call's attachments reach the called turn");
    assert.match(boom, /^failed \(.*the researcher broke.*\): partial$/);
    assert.equal(heldText, "cancelled: holding");
    assert.deepEqual(info.requests.map((r) => r.answer.state), ["completed", "failed", "cancelled"]);
  } finally {
    await Promise.all([research.stop(), plan.stop()]);
  }
});

test("a chain of calls: A -> B -> A is a cycle, and the ninth call down is refused for depth", async () => {
  // Each turn calls one level further down and appends "+" to what came back; the call that
  // would go deeper than 8 is refused, and its refusal's code travels back up the chain.
  const next = {
    down: (turn) => [`${turn.sessionId}.d`, "down"], // one level further down
    out: (turn) => [`${turn.sessionId}.b`, "home"], // A -> B ...
    home: (turn) => [turn.calledBy.session_id, "x"], // ... -> A: the caller's session
  };
  const deep = async (turn) => {
    const [session, content] = next[turn.userMessage.content](turn);
    try {
      const found = await turn.call({ agent: "deep", session, content });
      turn.response(`${found.text}+`);
    } catch (err) {
      turn.response(err.code);
    }
  };
  const worker = serve(deep, ["deep"], "node-deep");
  try {
    const down = await post("chain.deep", "down", "deep");
    const info = await server.waitTurnEnd(down);
    assert.equal(info.state, "completed", JSON.stringify(info));
    assert.equal(info.text, `call_depth_exceeded${"+".repeat(8)}`);
    // chain.top calls chain.top.b, which calls back into chain.top: a cycle.
    const top = await post("chain.top", "out", "deep");
    const cycle = await server.waitTurnEnd(top);
    assert.equal(cycle.state, "completed", JSON.stringify(cycle));
    assert.equal(cycle.text, "call_cycle+");
  } finally {
    await worker.stop();
  }
});

test("a call into a session full of turns (429) is sent again until it fits", async () => {
  const small = await startServer(); // a session of its own, filled with turns nobody serves
  try {
    const api = small.api;
    const queued = async (session, content, agent) => {
      const { status, body } = await api("POST", `/sessions/${session}/messages`, { content, agent });
      assert.equal(status, 202, JSON.stringify(body));
      return body.turn_id;
    };
    // A session takes a call's child behind at most 64 turns in flight.
    const full = [];
    for (let i = 0; i < 64; i += 1) full.push(await queued("full", `turn ${i}`, "nobody"));
    const turnId = await queued("caller", "call into full", "planner");
    const tries = [];
    const recording = async (url, init) => {
      const res = await fetch(url, init);
      if (String(url).endsWith("/events") && init.body.includes('"type":"call"')) tries.push(res.status);
      return res;
    };
    const client = new WorkerClient({ baseUrl: small.url, serviceKey: SERVICE_KEY, workerId: "node-full", retryMs: 50, fetch: recording });
    const plan = serve(async (turn) => {
      const found = await turn.call({ agent: "nobody", session: "full", content: "three" });
      turn.response(found.state);
    }, ["planner"], null, client);
    try {
      await small.waitTurn(turnId, () => tries.length >= 2, "two refused sends of the call");
      assert.deepEqual(tries.slice(0, 2), [429, 429]);
      assert.equal((await api("GET", `/turns/${turnId}`)).body.requests, undefined, "nothing journaled yet");
      assert.equal((await api("POST", `/turns/${full[0]}/cancel`)).status, 200);
      const waiting = await small.waitOpenRequests(turnId);
      assert.equal(tries[tries.length - 1], 200, "the call went in once there was room");
      assert.equal((await api("POST", `/turns/${waiting.requests[0].call.turn_id}/cancel`)).status, 200);
      const info = await small.waitTurnEnd(turnId);
      assert.equal(info.state, "completed", JSON.stringify(info));
      assert.equal(info.text, "cancelled");
    } finally {
      await plan.stop();
    }
  } finally {
    small.stop();
  }
});
