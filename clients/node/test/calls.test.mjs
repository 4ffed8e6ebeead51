// The pure part of calling another agent: the `call` event, the batches a turn's output is cut
// into (each call alone, so a refused call takes nothing with it), and the replay of a call on
// a continuation, whichever shape the journal gives it back in.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Asks, ContinuationMismatch } from "../src/asks.js";
import { CallRefused, batches, callEvent, refusesCall } from "../src/calls.js";
import { WorkerApiError } from "../src/errors.js";

test("a call becomes a call event; a missing field is a TypeError", () => {
  assert.deepEqual(callEvent("ask-1", { agent: "researcher", session: "s2", content: "tides" }), {
    type: "call", request_id: "ask-1", agent: "researcher", session_id: "s2", content: "tides",
  });
  const files = [{ url: "https://example.com/a.png", media_type: "image/png" }];
  assert.deepEqual(callEvent("c", { agent: "a", session: "s", content: "", attachments: files }).attachments, files);
  assert.throws(() => callEvent("c", { session: "s", content: "x" }), TypeError);
  assert.throws(() => callEvent("c", { agent: "a", content: "x" }), TypeError);
  assert.throws(() => callEvent("c", { agent: "a", session: "s" }), TypeError);
  assert.throws(() => callEvent("c", { agent: "a", session: "s", content: "x", attachments: "no" }), TypeError);
});

test("output is batched together and each call is sent alone, in order", () => {
  const r = (delta) => ({ type: "response", delta });
  const c = (id) => callEvent(id, { agent: "a", session: "s", content: id });
  const cut = batches([r("a"), r("b"), c("1"), c("2"), r("c"), c("3")]);
  assert.deepEqual(cut.map((b) => b.events.map((e) => e.delta ?? e.request_id)), [["a", "b"], ["1"], ["2"], ["c"], ["3"]]);
  assert.deepEqual(cut.map((b) => b.call?.request_id ?? null), [null, "1", "2", null, "3"]);
  assert.deepEqual(batches([]), []);
});

test("the refusals of a call: 409 call_* and 422, not a lost lease or a cancel", () => {
  assert.equal(refusesCall(new WorkerApiError(409, "call_cycle", "m")), true);
  assert.equal(refusesCall(new WorkerApiError(409, "call_depth_exceeded", "m")), true);
  assert.equal(refusesCall(new WorkerApiError(422, "invalid_body", "m")), true);
  assert.equal(refusesCall(new WorkerApiError(409, "lease_lost", "m")), false);
  assert.equal(refusesCall(new WorkerApiError(409, "turn_cancelled", "m")), false);
  assert.equal(refusesCall(new Error("network")), false);
  const refused = new CallRefused(new WorkerApiError(409, "call_cycle", "would wait on itself", { error: {} }), "ask-2");
  assert.ok(refused instanceof WorkerApiError);
  assert.deepEqual([refused.name, refused.status, refused.code, refused.requestId], ["CallRefused", 409, "call_cycle", "ask-2"]);
  assert.equal(refused.message, "409 call_cycle: would wait on itself");
});

const answer = { turn_id: "turn_x", state: "completed", text: "found it" };

test("a continuation gives a journaled call its answer, as sent or as the server's agent_call request", () => {
  const call = { agent: "researcher", session: "s2", content: "tides" };
  for (const journaled of [
    callEvent("ask-1", call),
    {
      type: "input_requested", request_id: "ask-1", kind: "agent_call",
      call: { agent: "researcher", session_id: "s2", turn_id: "turn_x", message_id: "msg_x" },
    },
  ]) {
    const asks = new Asks({
      seq: 3,
      events: [{ type: "response", delta: "Asking. " }, journaled],
      answers: [{ request_id: "ask-1", answer, by: "turn:turn_x" }],
    });
    assert.equal(asks.replayed({ type: "response", delta: "Asking. " }), true);
    const taken = asks.take(callEvent(asks.nextId(), call));
    assert.deepEqual(taken, { recorded: true, answer: { request_id: "ask-1", answer, by: "turn:turn_x" } });
    assert.equal(asks.replaying, false);
    // Another agent or session under the same id would meet another call's answer: refused.
    const other = new Asks({ seq: 3, events: [journaled], answers: [] });
    assert.throws(() => other.take(callEvent("ask-1", { ...call, agent: "planner" })), ContinuationMismatch);
    const elsewhere = new Asks({ seq: 3, events: [journaled], answers: [] });
    assert.throws(() => elsewhere.take(callEvent("ask-1", { ...call, session: "s3" })), ContinuationMismatch);
  }
  // The content is checked where the journal holds it.
  const asks = new Asks({ seq: 1, events: [callEvent("ask-1", call)], answers: [] });
  assert.throws(() => asks.take(callEvent("ask-1", { ...call, content: "other" })), ContinuationMismatch);
});

test("an ask and a call do not answer for one another", () => {
  const asks = new Asks({
    seq: 1,
    events: [{ type: "input_requested", request_id: "ask-1", kind: "question", prompt: "tides" }],
    answers: [],
  });
  assert.throws(() => asks.take(callEvent("ask-1", { agent: "a", session: "s", content: "tides" })), ContinuationMismatch);
});

test("a refused call is forgotten: the same id may be asked again", () => {
  const asks = new Asks(null);
  const event = callEvent("ask-1", { agent: "a", session: "s", content: "x" });
  assert.deepEqual(asks.take(event), { recorded: false });
  asks.forget("ask-1");
  assert.deepEqual(asks.take(callEvent("ask-1", { agent: "b", session: "s", content: "x" })), { recorded: false });
});
