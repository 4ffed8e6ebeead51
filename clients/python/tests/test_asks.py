"""The pure part of asking: the event an ask journals, ids in the order asked, and the replay of
a handler run again on a continuation (recorded answers at once, a changed ask refused)."""

import datetime
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from turnstream_worker.asks import Asks, ContinuationMismatch, request_event  # noqa: E402

DEPLOY = {"call_id": "c1", "name": "deploy", "input": {"target": "prod"}}


class AsksTest(unittest.TestCase):
    def test_an_ask_becomes_an_input_requested_event(self):
        self.assertEqual(
            request_event("approval", "ask-1", tool=DEPLOY, prompt="Deploy?"),
            {"type": "input_requested", "request_id": "ask-1", "kind": "approval",
             "tool": DEPLOY, "prompt": "Deploy?"},
        )
        at = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
        self.assertEqual(
            request_event("client_tool", "r", tool={"call_id": "c", "name": "loc"}, expires_at=at),
            {"type": "input_requested", "request_id": "r", "kind": "client_tool",
             "tool": {"call_id": "c", "name": "loc", "input": None},
             "expires_at": 1767225600000},
        )
        self.assertEqual(
            request_event("question", "q", prompt="Which?", options=("a", "b")),
            {"type": "input_requested", "request_id": "q", "kind": "question",
             "prompt": "Which?", "options": ["a", "b"]},
        )
        for kind, fields in (("approval", {}), ("question", {"tool": DEPLOY, "prompt": "?"}),
                             ("vote", {"prompt": "?"})):
            with self.assertRaises(ValueError):
                request_event(kind, "r", **fields)

    def test_ids_default_in_the_order_asked(self):
        asks = Asks()
        self.assertEqual([asks.next_id(), asks.next_id("mine"), asks.next_id()],
                         ["ask-1", "mine", "ask-3"])
        self.assertFalse(asks.replaying)
        self.assertEqual(asks.take(request_event("question", "ask-1", prompt="?")), (False, None))

    def test_a_continuation_replays_recorded_output_and_asks(self):
        first = request_event("approval", "ask-1", tool=DEPLOY)
        second = request_event("question", "ask-2", prompt="Why?")
        tool = {"type": "tool", "call_id": "c1", "name": "deploy", "status": "started"}
        asks = Asks({
            "seq": 5,
            # The server joins consecutive deltas of a request: "Let me " + "check." came as one.
            "events": [{"type": "response", "delta": "Let me check."}, dict(first, expires_at=9),
                       tool, {"type": "response", "delta": "Why?"}, second],
            "answers": [{"request_id": "ask-1", "answer": {"approved": True}, "by": "u1"},
                        {"request_id": "ask-2", "answer": {"timed_out": True}, "by": None}],
        })
        self.assertTrue(asks.replaying)
        self.assertTrue(asks.replayed({"type": "response", "delta": "Let me "}))
        self.assertTrue(asks.replayed({"type": "response", "delta": "check."}))
        recorded, given = asks.take(first)
        self.assertEqual((recorded, given["answer"]), (True, {"approved": True}))
        self.assertTrue(asks.replayed(dict(tool)))
        self.assertTrue(asks.replayed({"type": "response", "delta": "Why?"}))
        self.assertTrue(asks.replaying)
        self.assertEqual(asks.take(second)[1]["by"], None)
        self.assertFalse(asks.replaying)
        self.assertFalse(asks.replayed({"type": "response", "delta": "Done."}))

    def test_output_that_differs_from_the_journal_ends_the_replay(self):
        continuation = {
            "seq": 2,
            "events": [{"type": "response", "delta": "Deploying. "},
                       request_event("approval", "ask-1", tool=DEPLOY)],
            "answers": [{"request_id": "ask-1", "answer": {"approved": False}, "by": "u1"}],
        }
        # A handler that found its answer in turn.answers and did not ask again.
        skipped = Asks(continuation)
        self.assertTrue(skipped.replayed({"type": "response", "delta": "Deploying. "}))
        self.assertFalse(skipped.replayed({"type": "response", "delta": "Not deployed."}))
        self.assertFalse(skipped.replaying)
        # A handler whose text changed: everything it says is sent; asks still get answers.
        changed = Asks(continuation)
        self.assertFalse(changed.replayed({"type": "thinking", "delta": "Deploying. "}))
        self.assertFalse(changed.replayed({"type": "response", "delta": "Deploying. "}))
        self.assertEqual(changed.take(request_event("approval", "ask-1", tool=DEPLOY))[1]["answer"],
                         {"approved": False})

    def test_a_new_ask_ends_the_replay_and_a_changed_one_is_refused(self):
        asks = Asks({
            "seq": 2,
            "events": [request_event("approval", "ask-1", tool=DEPLOY)],
            "answers": [{"request_id": "ask-1", "answer": {"approved": True}, "by": "u1"}],
        })
        staging = dict(DEPLOY, input={"target": "staging"})
        with self.assertRaises(ContinuationMismatch):
            asks.take(request_event("approval", "ask-1", tool=staging))
        self.assertTrue(asks.replaying)
        self.assertEqual(asks.take(request_event("question", "other", prompt="?")), (False, None))
        self.assertFalse(asks.replaying)


if __name__ == "__main__":
    unittest.main()
