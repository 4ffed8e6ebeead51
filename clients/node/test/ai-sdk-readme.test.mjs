// The README's AI SDK agent and examples/ai-sdk-worker.mjs, each run as written in a process of
// its own against the real server binary, with the provider package resolved to ai 7's mock
// model (test/ai-sdk/register.mjs): the agent asks to deploy, waits for the approval, and the
// tool runs after a yes (the README's) or not after a no (the example's).
import { test, beforeEach, afterEach } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { startServer, SERVICE_KEY } from "./server.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const register = join(root, "test/ai-sdk/register.mjs");
const readme = readFileSync(join(root, "README.md"), "utf8");
const blocks = [...readme.matchAll(/```js\n([\s\S]*?)```\n/g)].map((m) => m[1]);

// A server per test: a worker killed during its claim's long poll could otherwise still be
// handed the next test's turn.
let server;
beforeEach(async () => {
  server = await startServer();
});
afterEach(() => server?.stop());

/** Runs `args` under the resolution hooks until the turn of `content` ends: its info. */
async function runUntilEnd(session, args, env, answer) {
  const { body } = await server.api("POST", `/sessions/${session}/messages`, { content: "deploy prod" });
  const worker = spawn(process.execPath, ["--import", register, ...args], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ["ignore", "inherit", "inherit"],
  });
  try {
    const waiting = await server.waitOpenRequests(body.turn_id);
    assert.deepEqual(waiting.requests[0].tool, { call_id: "call_deploy", name: "deploy", input: { target: "prod" } });
    assert.equal(waiting.text, "Deploying prod. ");
    const res = await server.api("POST", `/turns/${body.turn_id}/input`, { request_id: "call_deploy", ...answer });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return await server.waitTurnEnd(body.turn_id);
  } finally {
    worker.kill("SIGKILL");
  }
}

test("the README's AI SDK agent runs as written: approved, its tool runs and the model answers", async () => {
  const agent = blocks.find((b) => b.includes('from "turnstream-worker/ai-sdk"'));
  assert.ok(agent, "the README shows an AI SDK agent");
  assert.ok(agent.trimEnd().split("\n").length <= 25, "a complete agent in at most 25 lines");
  const code = agent.replace('"http://127.0.0.1:8080"', JSON.stringify(server.url)).replace('"KEY"', JSON.stringify(SERVICE_KEY));
  assert.notEqual(code, agent);
  const info = await runUntilEnd("readme-ai", ["--input-type=module", "-e", code], {}, { approved: true });
  assert.equal(info.state, "completed", JSON.stringify(info));
  assert.equal(info.text, "Deploying prod. Done: prod is live.");
  assert.deepEqual(info.tools.map((t) => [t.call_id, t.name, t.status, t.output_preview]), [["call_deploy", "deploy", "finished", '"prod is live"']]);
});

test("the AI SDK example, denied: the tool does not run", async () => {
  const env = { TURNSTREAM_URL: server.url, TURNSTREAM_SERVICE_KEY: SERVICE_KEY, OPENAI_MODEL: "mock" };
  const info = await runUntilEnd("example-ai", [join(root, "examples/ai-sdk-worker.mjs")], env, { approved: false });
  assert.equal(info.state, "completed", JSON.stringify(info));
  assert.equal(info.text, "Deploying prod. Not deployed.");
  assert.deepEqual(info.tools.map((t) => [t.name, t.status]), [["deploy", "failed"]]);
});
