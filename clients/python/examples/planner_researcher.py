"""Two turnstream workers, two agents (contract v1.3): the planner, asked for a plan, calls the
researcher in a session of its own and waits for its turn to end; the researcher answers the
planner's message as it would a person's. Each serves only its agent, so they run as two
processes (or more of each); the call waits in the server, not in either process, and the
planner's turn continues wherever it is claimed once the researcher's turn ended.

    export TURNSTREAM_URL=http://127.0.0.1:8080 TURNSTREAM_SERVICE_KEY=...
    python3 examples/planner_researcher.py researcher &
    python3 examples/planner_researcher.py planner

Then post {"content": "the tides", "agent": "planner"} to /api/sessions/SESSION/messages.
"""

import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from turnstream_worker import WorkerClient, run_worker  # noqa: E402


# README: begin
def planner(turn):
    topic = turn.user_message["content"].strip()
    turn.response(f"Asking the researcher about {topic}. ")
    found = turn.call(
        agent="researcher",
        session=f"{turn.session_id}.research",  # the researcher's turn is seen in this session
        content=topic,
    )
    if found["state"] != "completed":
        turn.response(f"The research ended {found['state']}, so no plan.")
    else:
        turn.response(f'Plan: start from "{found["text"]}"')


def researcher(turn):
    topic = turn.user_message["content"].strip()
    asker = f"session {turn.called_by['session_id']}" if turn.called_by else "a person"
    turn.response(f"{topic}: three sources found, for {asker}.")
# README: end


AGENTS = {"planner": planner, "researcher": researcher}

if __name__ == "__main__":
    import signal

    role = sys.argv[1] if len(sys.argv) > 1 else ""
    if role not in AGENTS:
        sys.exit("usage: python3 examples/planner_researcher.py planner|researcher")
    client = WorkerClient(
        os.environ.get("TURNSTREAM_URL", "http://127.0.0.1:8080"),
        os.environ["TURNSTREAM_SERVICE_KEY"],
        worker_id=os.environ.get("TURNSTREAM_WORKER_ID") or f"{role}-{os.getpid()}",
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        run_worker(client, AGENTS[role], stop=stop, agents=[role])
    except KeyboardInterrupt:
        pass
