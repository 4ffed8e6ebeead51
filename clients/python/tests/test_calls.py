"""The pure part of calling another agent: the `call` event, the batches a turn's output is cut
into (each call alone, so a refused call takes nothing with it), and the replay of a call on a
continuation, whichever shape the journal gives it back in."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from turnstream_worker import CallRefused, WorkerApiError  # noqa: E402
from turnstream_worker.asks import Asks, ContinuationMismatch  # noqa: E402
from turnstream_worker.calls import batches, call_event, call_fields, refuses_call  # noqa: E402

ANSWER = {"turn_id": "turn_x", "state": "completed", "text": "found it"}


class CallsTest(unittest.TestCase):
    def test_a_call_becomes_a_call_event(self):
        self.assertEqual(call_event("ask-1", "researcher", "s2", "tides"), {
            "type": "call", "request_id": "ask-1", "agent": "researcher", "session_id": "s2",
            "content": "tides"})
        files = [{"url": "https://example.com/a.png", "media_type": "image/png"}]
        self.assertEqual(call_event("c", "a", "s", "", files)["attachments"], files)
        for bad in ((None, "s", "x"), ("a", None, "x"), ("a", "s", None)):
            with self.assertRaises(ValueError):
                call_event("c", *bad)
        with self.assertRaises(ValueError):
            call_event("c", "a", "s", "x", "not a list")

    def test_fields_as_keywords_or_one_dict(self):
        as_dict = call_fields({"agent": "a", "session": "s", "content": "x"})
        self.assertEqual(as_dict, call_fields(agent="a", session="s", content="x"))
        with self.assertRaises(ValueError):
            call_fields({"agent": "a", "sesion": "s", "content": "x"})

    def test_output_is_batched_together_and_each_call_sent_alone(self):
        def r(delta):
            return {"type": "response", "delta": delta}

        def c(rid):
            return call_event(rid, "a", "s", rid)
        cut = batches([r("a"), r("b"), c("1"), c("2"), r("c"), c("3")])
        self.assertEqual([(rid, [e.get("delta") or e["request_id"] for e in b]) for rid, b in cut],
                         [(None, ["a", "b"]), ("1", ["1"]), ("2", ["2"]), (None, ["c"]),
                          ("3", ["3"])])
        self.assertEqual(batches([]), [])

    def test_the_refusals_of_a_call(self):
        self.assertTrue(refuses_call(WorkerApiError(409, "call_cycle", "m")))
        self.assertTrue(refuses_call(WorkerApiError(409, "call_depth_exceeded", "m")))
        self.assertTrue(refuses_call(WorkerApiError(422, "invalid_body", "m")))
        self.assertFalse(refuses_call(WorkerApiError(409, "lease_lost", "m")))
        self.assertFalse(refuses_call(WorkerApiError(409, "turn_cancelled", "m")))
        self.assertFalse(refuses_call(OSError("network")))
        refused = CallRefused(WorkerApiError(409, "call_cycle", "would wait on itself"), "ask-2")
        self.assertIsInstance(refused, WorkerApiError)
        self.assertEqual((refused.status, refused.code, refused.request_id),
                         (409, "call_cycle", "ask-2"))
        self.assertEqual(str(refused), "409 call_cycle: would wait on itself")

    def test_a_journaled_call_gets_its_answer_in_either_shape(self):
        for journaled in (
            call_event("ask-1", "researcher", "s2", "tides"),
            {"type": "input_requested", "request_id": "ask-1", "kind": "agent_call",
             "call": {"agent": "researcher", "session_id": "s2", "turn_id": "turn_x",
                      "message_id": "msg_x"}},
        ):
            given = {"request_id": "ask-1", "answer": ANSWER, "by": "turn:turn_x"}
            asks = Asks({"seq": 3, "events": [{"type": "response", "delta": "Asking. "}, journaled],
                         "answers": [given]})
            self.assertTrue(asks.replayed({"type": "response", "delta": "Asking. "}))
            self.assertEqual(asks.take(call_event(asks.next_id(), "researcher", "s2", "tides")),
                             (True, given))
            self.assertFalse(asks.replaying)
            for other in (("planner", "s2"), ("researcher", "s3")):
                fresh = Asks({"seq": 3, "events": [journaled], "answers": []})
                with self.assertRaises(ContinuationMismatch):
                    fresh.take(call_event("ask-1", other[0], other[1], "tides"))
        # The content is checked where the journal holds it.
        asks = Asks({"seq": 1, "events": [call_event("ask-1", "a", "s", "x")], "answers": []})
        with self.assertRaises(ContinuationMismatch):
            asks.take(call_event("ask-1", "a", "s", "other"))

    def test_an_ask_and_a_call_do_not_answer_for_one_another(self):
        asks = Asks({"seq": 1, "answers": [], "events": [
            {"type": "input_requested", "request_id": "ask-1", "kind": "question", "prompt": "x"}]})
        with self.assertRaises(ContinuationMismatch):
            asks.take(call_event("ask-1", "a", "s", "x"))

    def test_a_refused_call_is_forgotten(self):
        asks = Asks(None)
        self.assertEqual(asks.take(call_event("ask-1", "a", "s", "x")), (False, None))
        asks.forget("ask-1")
        self.assertEqual(asks.take(call_event("ask-1", "b", "s", "x")), (False, None))


if __name__ == "__main__":
    unittest.main()
