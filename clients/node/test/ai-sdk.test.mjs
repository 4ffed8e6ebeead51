// turnstream-worker/ai-sdk on ai 5, 6 and 7 (and ai 7 with a V4 model) against the real server
// binary, with each major's mock language model: streamed text and reasoning, a tool call with
// its output, a tool that needs approval answered yes (also in another worker) and no, a client
// tool, a provider error midway and a cancel mid-stream; and pipeUIMessageStream on a UI message
// stream. Each checks the turn's journal as the browser reads it and its final message exactly.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { WorkerClient, runWorker } from "../src/index.js";
import { aiSdkAgent, pipeUIMessageStream } from "../src/ai-sdk.js";
import { startServer, SERVICE_KEY } from "./server.mjs";
import { cursorOf, journalOf } from "./ai-sdk/journal.mjs";

const { MAJORS, z } = await import("./ai-sdk/majors.mjs").catch((err) => {
  throw new Error(`the AI SDK majors are not installed: run \`./run setup\` (npm ci in test/ai-sdk): ${err.message}`);
});

let server;
before(async () => {
  // A short lease, so a cancel reaches the worker's heartbeat within a second.
  server = await startServer(["--worker-lease-secs", "3"]);
});
after(() => server?.stop());

/** The model's stream for one call: `[chunks]`, or a function of the call's options. */
function mockModel({ Mock }, calls) {
  return new Mock({
    doStream: async (options) => {
      const step = calls.shift();
      if (!step) throw new Error("the model was called more often than the test expects");
      const stream = typeof step === "function" ? step(options) : streamOf(step);
      return { stream };
    },
  });
}

function streamOf(chunks) {
  return new ReadableStream({
    start(c) {
      for (const chunk of chunks) c.enqueue(chunk);
      c.close();
    },
  });
}

const text = (id, ...deltas) => [
  { type: "text-start", id },
  ...deltas.map((delta) => ({ type: "text-delta", id, delta })),
  { type: "text-end", id },
];
const reasoning = (id, ...deltas) => [
  { type: "reasoning-start", id },
  ...deltas.map((delta) => ({ type: "reasoning-delta", id, delta })),
  { type: "reasoning-end", id },
];
const toolCall = (toolCallId, toolName, input) => ({ type: "tool-call", toolCallId, toolName, input: JSON.stringify(input) });
const finish = (m, input, output, reason = "stop") => {
  const f = m.finish(input, output);
  const finishReason = typeof f.finishReason === "string" ? reason : { unified: reason, raw: reason };
  return { type: "finish", ...f, finishReason };
};
const start = { type: "stream-start", warnings: [] };

/** `promise`, or a failure naming `what` after 30 s. */
function within(promise, what) {
  let timer;
  const late = new Promise((_, fail) => (timer = setTimeout(() => fail(new Error(`no ${what} within 30 s`)), 30000)));
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

async function post(session, content, extra = {}) {
  const { status, body } = await server.api("POST", `/sessions/${session}/messages`, { content, ...extra });
  assert.equal(status, 202, JSON.stringify(body));
  return body.turn_id;
}

async function give(turnId, body) {
  const res = await server.api("POST", `/turns/${turnId}/input`, body);
  assert.equal(res.status, 200, JSON.stringify(res.body));
}

/** Runs `handler` in a worker loop until `until` settles; resolves to its value. */
async function withWorker(handler, until, workerId) {
  const stop = new AbortController();
  const client = new WorkerClient({ baseUrl: server.url, serviceKey: SERVICE_KEY, workerId });
  const loop = runWorker(client, handler, { waitMs: 500, signal: stop.signal });
  try {
    return await until;
  } finally {
    stop.abort();
    await loop;
  }
}

/** Posts `content`, runs `handler` until the turn ends: the turn's journal and its info. */
async function turnOf(session, content, handler, during = async () => {}) {
  const cursor = await cursorOf(server, session);
  const turnId = await post(session, content);
  const info = await withWorker(handler, (async () => {
    await during(turnId);
    return server.waitTurnEnd(turnId);
  })(), `node-ai-${session}`);
  return { turnId, info, events: await journalOf(server, session, cursor, turnId) };
}

const started = { event: "turn_started" };
const ended = (state, content, extra = {}) => ({ event: "turn_ended", state, ...extra, message: content });
/** The turn's own events from its start, the final message reduced to what the test checks. */
const shape = (events) =>
  events.filter((e) => e.event !== "message_received" && e.event !== "turn_queued").map((e) => {
    if (e.event === "turn_ended") return { ...e, message: { role: e.message.role, content: e.message.content, status: e.message.status } };
    if (e.event === "input_requested") {
      const { expires_at, ...rest } = e;
      assert.ok(expires_at > Date.now());
      return rest;
    }
    return e;
  });
const reply = (content, status = "complete") => ({ role: "assistant", content, status });

for (const m of MAJORS) {
  const noApprovals = !m.approvals && `${m.name} has no tool approvals (needsApproval is ai 6 and 7)`;
  describe(m.name, () => {
    test("streamed reasoning and text, the history and an attachment as the model's messages, the usage", async () => {
      const session = `${m.id}-text`;
      const model = mockModel(m, [
        [start, ...text("t", "First ", "answer."), finish(m, 3, 2)],
        [start, ...reasoning("r", "Thinking ", "it over."), ...text("t", "Hello, ", "world."), finish(m, 12, 5)],
      ]);
      const usages = [];
      const agent = aiSdkAgent({ model, system: "Be brief.", streamText: m.ai.streamText });
      const handler = async (turn) => {
        await agent(turn);
        usages.push(turn.usage);
      };
      await turnOf(session, "first", handler);
      const attachment = { url: "data:text/plain;base64,aGk=", media_type: "text/plain", name: "hi.txt" };
      const cursor = await cursorOf(server, session);
      const turnId = await post(session, "second", { attachments: [attachment] });
      await withWorker(handler, server.waitTurnEnd(turnId), `node-ai-${session}`);
      assert.deepEqual(shape(await journalOf(server, session, cursor, turnId)), [
        started,
        { event: "thinking", delta: "Thinking it over." },
        { event: "response_delta", delta: "Hello, world." },
        ended("completed", reply("Hello, world.")),
      ]);
      assert.deepEqual(usages, [
        { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
        { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 },
      ]);
      // The usage reaches the server with the turn's end: its status says it.
      const { body: status } = await server.api("GET", `/turns/${turnId}`);
      assert.deepEqual(status.usage, { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 });
      const prompt = model.doStreamCalls[1].prompt;
      assert.deepEqual(prompt.slice(0, 3).map((p) => [p.role, p.content.map?.((c) => c.text) ?? p.content]), [
        ["system", "Be brief."],
        ["user", ["first"]],
        ["assistant", ["First answer."]],
      ]);
      const [said, file] = prompt[3].content;
      assert.deepEqual([prompt[3].role, said.type, said.text], ["user", "text", "second"]);
      // A V4 model gets the file's bytes as `{type: "data", data}`, older ones as the data itself.
      const data = file.data?.type === "data" ? file.data.data : file.data;
      assert.deepEqual([file.type, file.mediaType, file.filename, data], ["file", "text/plain", "hi.txt", "aGk="]);
    });

    test("a tool call with its output, then the answer", async () => {
      let runs = 0;
      const model = mockModel(m, [
        [start, toolCall("call_w", "weather", { city: "Lisbon" }), finish(m, 5, 3, "tool-calls")],
        [start, ...text("t", "Sunny in ", "Lisbon."), finish(m, 9, 3)],
      ]);
      const tools = {
        weather: m.ai.tool({
          description: "The weather in a city.",
          inputSchema: z.object({ city: z.string() }),
          execute: async ({ city }) => ((runs += 1), { city, sky: "sunny" }),
        }),
      };
      const { events } = await turnOf(`${m.id}-tool`, "weather?", aiSdkAgent({ model, tools, streamText: m.ai.streamText }));
      assert.deepEqual(shape(events), [
        started,
        { event: "tool", call_id: "call_w", name: "weather", status: "started", input_preview: '{"city":"Lisbon"}' },
        { event: "tool", call_id: "call_w", name: "weather", status: "finished", output_preview: '{"city":"Lisbon","sky":"sunny"}' },
        { event: "response_delta", delta: "Sunny in Lisbon." },
        ended("completed", reply("Sunny in Lisbon.")),
      ]);
      assert.equal(runs, 1);
      const result = model.doStreamCalls[1].prompt.at(-1);
      assert.equal(result.role, "tool");
      assert.equal(result.content[0].toolCallId, "call_w");
      assert.deepEqual(result.content[0].output, { type: "json", value: { city: "Lisbon", sky: "sunny" } });
    });


    const deployAgent = (model, deployed) =>
      aiSdkAgent({
        model,
        streamText: m.ai.streamText,
        tools: {
          deploy: m.ai.tool({
            description: "Deploys a target.",
            inputSchema: z.object({ target: z.string() }),
            needsApproval: true,
            execute: async ({ target }) => (deployed.push(target), `${target} is live`),
          }),
        },
      });
    const deployStep = () => [start, ...text("t", "Deploying. "), toolCall("call_d", "deploy", { target: "prod" }), finish(m, 4, 4, "tool-calls")];
    const deployStarted = { event: "tool", call_id: "call_d", name: "deploy", status: "started", input_preview: '{"target":"prod"}' };
    const approval = {
      event: "input_requested", kind: "approval", request_id: "call_d",
      tool: { call_id: "call_d", name: "deploy", input: { target: "prod" } },
    };
    const given = (answer) => ({ event: "input_given", request_id: "call_d", by: null, answer });

    test("a tool that needs approval, answered yes: it runs once, in the same turn", { skip: noApprovals }, async () => {
      const deployed = [];
      const model = mockModel(m, [deployStep(), [start, ...text("t", "Done."), finish(m, 8, 1)]]);
      const { events } = await turnOf(`${m.id}-yes`, "deploy prod", deployAgent(model, deployed), async (turnId) => {
        await server.waitOpenRequests(turnId);
        assert.deepEqual(deployed, [], "nothing runs before the answer");
        await give(turnId, { request_id: "call_d", approved: true });
      });
      assert.deepEqual(shape(events), [
        started,
        { event: "response_delta", delta: "Deploying. " },
        deployStarted,
        approval,
        given({ approved: true }),
        { event: "tool", call_id: "call_d", name: "deploy", status: "finished", output_preview: '"prod is live"' },
        { event: "response_delta", delta: "Done." },
        ended("completed", reply("Deploying. Done.")),
      ]);
      assert.deepEqual(deployed, ["prod"]);
      assert.equal(model.doStreamCalls.length, 2);
    });

    test("a tool that needs approval, answered no: it never runs and the model reads why", { skip: noApprovals }, async () => {
      const deployed = [];
      const model = mockModel(m, [deployStep(), [start, ...text("t", "Not deployed."), finish(m, 8, 2)]]);
      const { events } = await turnOf(`${m.id}-no`, "deploy prod", deployAgent(model, deployed), async (turnId) => {
        await server.waitOpenRequests(turnId);
        await give(turnId, { request_id: "call_d", approved: false, reason: "not on a Friday" });
      });
      assert.deepEqual(shape(events), [
        started,
        { event: "response_delta", delta: "Deploying. " },
        deployStarted,
        approval,
        given({ approved: false, reason: "not on a Friday" }),
        { event: "tool", call_id: "call_d", name: "deploy", status: "failed", output_preview: '"the user denied deploy: not on a Friday"' },
        { event: "response_delta", delta: "Not deployed." },
        ended("completed", reply("Deploying. Not deployed.")),
      ]);
      assert.deepEqual(deployed, []);
      const result = model.doStreamCalls[1].prompt.at(-1);
      assert.equal(result.role, "tool");
      // How the error reads to the model is the AI SDK's (ai 7 puts the error's name first).
      assert.equal(result.content[0].output.type, "error-text");
      assert.match(result.content[0].output.value, /the user denied deploy: not on a Friday$/);
    });

    test("approved while no worker held the turn: another worker runs the tool once and the model goes on from the journal", { skip: noApprovals }, async () => {
      const session = `${m.id}-elsewhere`;
      const cursor = await cursorOf(server, session);
      const turnId = await post(session, "deploy prod");
      const first = [];
      const firstModel = mockModel(m, [deployStep()]);
      let letGo;
      const wasLetGo = new Promise((resolve) => (letGo = resolve));
      const firstAgent = deployAgent(firstModel, first);
      // The first worker asks and stops (its handler is let go); the turn waits with no worker.
      await withWorker(
        (turn) => firstAgent(turn).catch((err) => (letGo(err), Promise.reject(err))),
        server.waitOpenRequests(turnId),
        `node-ai-${session}-1`,
      );
      assert.equal((await within(wasLetGo, "let-go handler")).name, "TurnSuspended");
      await give(turnId, { request_id: "call_d", approved: true });
      const second = [];
      const secondModel = mockModel(m, [[start, ...text("t", "Done."), finish(m, 8, 1)]]);
      await withWorker(deployAgent(secondModel, second), server.waitTurnEnd(turnId), `node-ai-${session}-2`);
      assert.deepEqual(shape(await journalOf(server, session, cursor, turnId)), [
        started,
        { event: "response_delta", delta: "Deploying. " },
        deployStarted,
        approval,
        given({ approved: true }),
        { event: "tool", call_id: "call_d", name: "deploy", status: "finished", output_preview: '"prod is live"' },
        { event: "response_delta", delta: "Done." },
        ended("completed", reply("Deploying. Done.")),
      ]);
      assert.deepEqual([first, second], [[], ["prod"]], "the tool ran once, in the worker that continued");
      assert.equal(secondModel.doStreamCalls.length, 1, "the model was not asked again for the step the journal holds");
      const prompt = secondModel.doStreamCalls[0].prompt;
      const [assistant, tool] = prompt.slice(-2);
      assert.deepEqual(assistant.content.map((p) => [p.type, p.text ?? p.toolName]), [["text", "Deploying. "], ["tool-call", "deploy"]]);
      assert.deepEqual([tool.role, tool.content[0].toolCallId, tool.content[0].output], ["tool", "call_d", { type: "json", value: "prod is live" }]);
    });

    test("a client tool: the browser's output goes back to the model", async () => {
      const model = mockModel(m, [
        [start, toolCall("call_loc", "get_location", {}), finish(m, 4, 2, "tool-calls")],
        [start, ...text("t", "You are in ", "Lisbon."), finish(m, 9, 3)],
      ]);
      const tools = { get_location: m.ai.tool({ description: "Where the user is (the browser knows).", inputSchema: z.object({}) }) };
      const { events } = await turnOf(`${m.id}-client`, "where am I?", aiSdkAgent({ model, tools, streamText: m.ai.streamText }), async (turnId) => {
        const waiting = await server.waitOpenRequests(turnId);
        assert.equal(waiting.requests[0].kind, "client_tool");
        await give(turnId, { request_id: "call_loc", output: { city: "Lisbon" } });
      });
      assert.deepEqual(shape(events), [
        started,
        { event: "tool", call_id: "call_loc", name: "get_location", status: "started", input_preview: "{}" },
        { event: "input_requested", kind: "client_tool", request_id: "call_loc", tool: { call_id: "call_loc", name: "get_location", input: {} } },
        { event: "input_given", request_id: "call_loc", by: null, answer: { output: { city: "Lisbon" } } },
        { event: "tool", call_id: "call_loc", name: "get_location", status: "finished", output_preview: '{"city":"Lisbon"}' },
        { event: "response_delta", delta: "You are in Lisbon." },
        ended("completed", reply("You are in Lisbon.")),
      ]);
      const result = model.doStreamCalls[1].prompt.at(-1);
      assert.deepEqual([result.role, result.content[0].toolCallId, result.content[0].output], ["tool", "call_loc", { type: "json", value: { city: "Lisbon" } }]);
    });

    test("a provider error midway: the turn fails with its message and keeps the text before it, once", async () => {
      const model = mockModel(m, [[start, ...text("t", "Half ", "a reply").slice(0, 3), { type: "error", error: new Error("upstream overloaded") }]]);
      const { events } = await turnOf(`${m.id}-error`, "hi", aiSdkAgent({ model, streamText: m.ai.streamText }));
      assert.deepEqual(shape(events), [
        started,
        { event: "response_delta", delta: "Half a reply" },
        ended("failed", reply("Half a reply", "failed"), { error: "upstream overloaded" }),
      ]);
      assert.equal(model.doStreamCalls.length, 1, "the model was not called again");
    });

    test("a cancel mid-stream aborts the model call through turn.signal", async () => {
      let aborted;
      const wasAborted = new Promise((resolve) => (aborted = resolve));
      const model = mockModel(m, [
        ({ abortSignal }) =>
          new ReadableStream({
            start(c) {
              for (const chunk of [start, ...text("t", "Partial ").slice(0, 2)]) c.enqueue(chunk);
              // The model goes quiet until the call is aborted.
              abortSignal.addEventListener("abort", () => {
                aborted(abortSignal.reason);
                c.error(abortSignal.reason);
              }, { once: true });
            },
          }),
      ]);
      const { events } = await turnOf(`${m.id}-cancel`, "hi", aiSdkAgent({ model, streamText: m.ai.streamText }), async (turnId) => {
        await server.waitTurn(turnId, (t) => t.text === "Partial ", "the partial text");
        const res = await server.api("POST", `/turns/${turnId}/cancel`);
        assert.equal(res.status, 200, JSON.stringify(res.body));
        await within(wasAborted, "abort of the model call");
      });
      assert.deepEqual(shape(events), [
        started,
        { event: "response_delta", delta: "Partial " },
        ended("cancelled", reply("Partial ", "cancelled")),
      ]);
    });

    test("pipeUIMessageStream: a UI message stream's reasoning, tool call and text, then its error, into the turn", async () => {
      const model = mockModel(m, [
        [start, ...reasoning("r", "Looking ", "it up."), toolCall("call_w", "weather", { city: "Porto" }), finish(m, 5, 3, "tool-calls")],
        [start, ...text("t", "Rainy in ", "Porto"), { type: "error", error: new Error("upstream went away") }],
      ]);
      const tools = {
        weather: m.ai.tool({
          description: "The weather in a city.",
          inputSchema: z.object({ city: z.string() }),
          execute: async ({ city }) => ({ city, sky: "rain" }),
        }),
      };
      const handler = (turn) => {
        const result = m.ai.streamText({ model, tools, prompt: turn.userMessage.content, stopWhen: ({ steps }) => steps.length >= 2, abortSignal: turn.signal, onError: () => {} });
        return pipeUIMessageStream(turn, result.toUIMessageStream({ onError: (e) => e.message }));
      };
      const { events } = await turnOf(`${m.id}-ui`, "weather?", handler);
      assert.deepEqual(shape(events), [
        started,
        { event: "thinking", delta: "Looking it up." },
        { event: "tool", call_id: "call_w", name: "weather", status: "started", input_preview: '{"city":"Porto"}' },
        { event: "tool", call_id: "call_w", name: "weather", status: "finished", output_preview: '{"city":"Porto","sky":"rain"}' },
        { event: "response_delta", delta: "Rainy in Porto" },
        ended("failed", reply("Rainy in Porto", "failed"), { error: "upstream went away" }),
      ]);
    });
  });
}
