// The README's snippets, against the real server binary: the quick start runs as written (with
// this server's URL and key), the ask handler it shows is the example's, which ask.test.mjs
// runs, and so are the planner and researcher it shows, which call.test.mjs runs.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { startServer, SERVICE_KEY } from "./server.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const readme = readFileSync(join(root, "README.md"), "utf8");
const blocks = [...readme.matchAll(/```js\n([\s\S]*?)```\n/g)].map((m) => m[1]);

let server;
before(async () => {
  server = await startServer();
});
after(() => server?.stop());

test("the quick start runs as written", async () => {
  const quickStart = blocks[0];
  assert.match(quickStart, /from "turnstream-worker"/);
  const code = quickStart.replace('"http://127.0.0.1:8080"', JSON.stringify(server.url)).replace('"KEY"', JSON.stringify(SERVICE_KEY));
  assert.notEqual(code, quickStart);
  const { body } = await server.api("POST", "/sessions/readme/messages", { content: "hi" });
  // Run from the package's folder, so `turnstream-worker` resolves to this package.
  const worker = spawn(process.execPath, ["--input-type=module", "-e", code], { cwd: root, stdio: ["ignore", "inherit", "inherit"] });
  try {
    const info = await server.waitTurnEnd(body.turn_id);
    assert.equal(info.state, "completed", JSON.stringify(info));
    assert.equal(info.text, "You said: hi");
    assert.equal(info.thinking, "reading the question");
    assert.deepEqual(info.tools.map((t) => [t.name, t.output_preview]), [["clock", "12:00"]]);
  } finally {
    worker.kill("SIGKILL");
  }
});

test("the ask handler shown is the example's, which the tests run", () => {
  const example = readFileSync(join(root, "examples/ask-worker.mjs"), "utf8");
  const region = /\/\/ README: begin\n([\s\S]*?)\/\/ README: end\n/.exec(example)?.[1];
  assert.ok(region, "the example marks the README's region");
  assert.ok(blocks.includes(region), "README.md shows the example's handler as it is");
});

test("the planner and researcher shown are the example's, which the tests run", () => {
  const example = readFileSync(join(root, "examples/planner-researcher.mjs"), "utf8");
  const region = /\/\/ README: begin\n([\s\S]*?)\/\/ README: end\n/.exec(example)?.[1];
  assert.ok(region, "the example marks the README's region");
  assert.ok(blocks.includes(region), "README.md shows the example's handlers as they are");
});
