// The pure part of asking: the event an ask journals, ids in the order asked, and the replay of
// a handler run again on a continuation (recorded answers at once, a changed ask refused).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Asks, ContinuationMismatch, requestEvent, sameJson } from "../src/asks.js";

const deploy = { call_id: "c1", name: "deploy", input: { target: "prod" } };

test("an ask becomes an input_requested event of its kind", () => {
  assert.deepEqual(requestEvent("approval", "ask-1", { tool: deploy, prompt: "Deploy?" }), {
    type: "input_requested", request_id: "ask-1", kind: "approval", tool: deploy, prompt: "Deploy?",
  });
  assert.deepEqual(requestEvent("client_tool", "r", { tool: { call_id: "c", name: "loc" }, expiresAt: new Date(5) }), {
    type: "input_requested", request_id: "r", kind: "client_tool", tool: { call_id: "c", name: "loc", input: null }, expires_at: 5,
  });
  assert.deepEqual(requestEvent("question", "q", { prompt: "Which?", options: ["a", "b"] }), {
    type: "input_requested", request_id: "q", kind: "question", prompt: "Which?", options: ["a", "b"],
  });
  assert.throws(() => requestEvent("approval", "r", {}), TypeError);
  assert.throws(() => requestEvent("question", "r", { tool: deploy }), TypeError);
  assert.throws(() => requestEvent("vote", "r", { prompt: "?" }), TypeError);
});

test("ids default to ask-1, ask-2, ... in the order asked", () => {
  const asks = new Asks(null);
  assert.equal(asks.nextId(), "ask-1");
  assert.equal(asks.nextId("mine"), "mine");
  assert.equal(asks.nextId(), "ask-3");
  assert.equal(asks.replaying, false);
  assert.deepEqual(asks.take(requestEvent("question", "ask-1", { prompt: "?" })), { recorded: false });
});

test("a continuation replays recorded output and asks, up to where the journal ends", () => {
  const first = requestEvent("approval", "ask-1", { tool: deploy });
  const second = requestEvent("question", "ask-2", { prompt: "Why?" });
  const tool = { type: "tool", call_id: "c1", name: "deploy", status: "started" };
  const asks = new Asks({
    seq: 5,
    // The server joins consecutive deltas of a request: "Let me " + "check." came as one.
    events: [{ type: "response", delta: "Let me check." }, first, tool, { type: "response", delta: "Why?" }, second],
    answers: [
      { request_id: "ask-1", answer: { approved: true }, by: "u1" },
      { request_id: "ask-2", answer: { timed_out: true }, by: null },
    ],
  });
  assert.equal(asks.replaying, true);
  assert.equal(asks.replayed({ type: "response", delta: "Let me " }), true);
  assert.equal(asks.replayed({ type: "response", delta: "check." }), true);
  // Key order does not matter; the tool's input does.
  const reordered = { ...first, tool: { input: { target: "prod" }, name: "deploy", call_id: "c1" } };
  assert.deepEqual(asks.take(reordered).answer.answer, { approved: true });
  assert.equal(asks.replayed({ ...tool }), true);
  assert.equal(asks.replayed({ type: "response", delta: "Why?" }), true);
  assert.equal(asks.replaying, true);
  assert.deepEqual(asks.take(second).answer, { request_id: "ask-2", answer: { timed_out: true }, by: null });
  assert.equal(asks.replaying, false);
  assert.equal(asks.replayed({ type: "response", delta: "Done." }), false);
  assert.deepEqual(asks.take(requestEvent("question", "ask-3", { prompt: "Next?" })), { recorded: false });
});

test("output that differs from the journal ends the replay", () => {
  const continuation = {
    seq: 2,
    events: [{ type: "response", delta: "Deploying. " }, requestEvent("approval", "ask-1", { tool: deploy })],
    answers: [{ request_id: "ask-1", answer: { approved: false }, by: "u1" }],
  };
  // A handler that found its answer in turn.answers and did not ask again.
  const skipped = new Asks(continuation);
  assert.equal(skipped.replayed({ type: "response", delta: "Deploying. " }), true);
  assert.equal(skipped.replayed({ type: "response", delta: "Not deployed." }), false);
  assert.equal(skipped.replaying, false);
  // A handler whose text changed: everything it says is sent, asks still get their answers.
  const changed = new Asks(continuation);
  assert.equal(changed.replayed({ type: "thinking", delta: "Deploying. " }), false);
  assert.equal(changed.replayed({ type: "response", delta: "Deploying. " }), false);
  assert.deepEqual(changed.take(requestEvent("approval", "ask-1", { tool: deploy })).answer.answer, { approved: false });
});

test("a new ask ends the replay; a changed ask is refused", () => {
  const asks = new Asks({
    seq: 2,
    events: [requestEvent("approval", "ask-1", { tool: deploy })],
    answers: [{ request_id: "ask-1", answer: { approved: true }, by: "u1" }],
  });
  const staging = { ...deploy, input: { target: "staging" } };
  assert.throws(() => asks.take(requestEvent("approval", "ask-1", { tool: staging })), ContinuationMismatch);
  assert.equal(asks.replaying, true);
  assert.deepEqual(asks.take(requestEvent("question", "other", { prompt: "?" })), { recorded: false });
  assert.equal(asks.replaying, false);
});

test("sameJson compares values, not key order", () => {
  assert.ok(sameJson({ a: [1, { b: null }], c: "x" }, { c: "x", a: [1, { b: null }] }));
  assert.ok(!sameJson({ a: 1 }, { a: 1, b: undefined }));
  assert.ok(!sameJson([1], { 0: 1 }));
  assert.ok(!sameJson(null, {}));
});
