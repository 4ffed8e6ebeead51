// The OpenAI example worker against the real server and an in-test OpenAI-compatible upstream
// that speaks the streaming format, tool calls included: the model asks for get_time, the worker
// runs it and sends the result back, and the browser-visible turn has the thinking, the tool
// call and the reply.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { WorkerClient, runWorker } from "../src/index.js";
import { answer } from "../examples/openai-worker.mjs";
import { startServer, SERVICE_KEY } from "./server.mjs";

let server;
let upstream;
const requests = [];

const sse = (res, chunks) => {
  res.writeHead(200, { "content-type": "text/event-stream" });
  for (const c of chunks) res.write(`data: ${JSON.stringify(c)}\n\n`);
  res.end("data: [DONE]\n\n");
};
const chunk = (delta, finish_reason = null) => ({ choices: [{ index: 0, delta, finish_reason }] });

before(async () => {
  server = await startServer();
  upstream = createServer((req, res) => {
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", () => {
      const parsed = JSON.parse(body);
      requests.push(parsed);
      const toolMessage = parsed.messages.find((m) => m.role === "tool");
      if (!toolMessage) {
        sse(res, [
          chunk({ role: "assistant", reasoning_content: "The user wants the time." }),
          chunk({ tool_calls: [{ index: 0, id: "call_t1", type: "function", function: { name: "get_time", arguments: "" } }] }),
          chunk({ tool_calls: [{ index: 0, function: { arguments: "{}" } }] }),
          chunk({}, "tool_calls"),
        ]);
      } else {
        sse(res, [
          chunk({ content: "It is " }),
          chunk({ content: toolMessage.content }),
          chunk({ content: "." }, "stop"),
        ]);
      }
    });
  });
  await new Promise((ok) => upstream.listen(0, "127.0.0.1", ok));
});
after(() => {
  server?.stop();
  upstream?.close();
});

test("the OpenAI example runs the tool and streams the reply", async () => {
  const { body } = await server.api("POST", "/sessions/ex/messages", { content: "what time is it?" });
  const stop = new AbortController();
  const client = new WorkerClient({ baseUrl: server.url, serviceKey: SERVICE_KEY });
  const loop = runWorker(
    client,
    async (turn) => {
      stop.abort();
      await answer(turn, { baseUrl: `http://127.0.0.1:${upstream.address().port}/v1`, model: "fake" });
    },
    { waitMs: 1000, signal: stop.signal },
  );
  const info = await server.waitTurnEnd(body.turn_id);
  await loop;
  assert.equal(info.state, "completed", JSON.stringify(info));
  assert.equal(requests.length, 2);
  assert.equal(requests[0].messages[0].role, "system");
  assert.equal(requests[0].tools[0].function.name, "get_time");
  const toolResult = requests[1].messages.find((m) => m.role === "tool");
  assert.equal(toolResult.tool_call_id, "call_t1");
  assert.match(toolResult.content, /^\d{4}-\d{2}-\d{2}T/);
  assert.equal(info.text, `It is ${toolResult.content}.`);
  assert.equal(info.thinking, "The user wants the time.");
  assert.deepEqual(
    info.tools.map((t) => [t.call_id, t.name, t.status, t.output_preview]),
    [["call_t1", "get_time", "finished", toolResult.content]],
  );
});
