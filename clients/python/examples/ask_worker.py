"""A turnstream worker that asks before it acts (contract v1.2): "deploy TARGET" asks a person
to approve the `deploy` tool call and runs it only when approved; "where am I?" asks the browser
to run its `get_location` tool and answers with the result. The handler reads top to bottom:
every ask is one call, whichever process ends up continuing the turn.

    TURNSTREAM_URL=http://127.0.0.1:8080 TURNSTREAM_SERVICE_KEY=... python3 examples/ask_worker.py
"""

import json
import os
import re
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from turnstream_worker import WorkerClient, run_worker  # noqa: E402

# The tools this worker runs itself, once approved.
LOCAL_TOOLS = {"deploy": lambda args: f"{args['target']} is live"}


# README: begin
def answer(turn):
    text = turn.user_message["content"].strip()
    deploy = re.fullmatch(r"deploy (\S+)", text, re.IGNORECASE)
    if deploy:
        target = deploy.group(1)
        call = {"call_id": "call_deploy", "name": "deploy", "input": {"target": target}}
        turn.response(f"Deploying {target} needs your approval. ")
        verdict = turn.request_approval(call, prompt=f"Deploy {target}?")
        if verdict.get("timed_out"):
            turn.response("Nobody answered, so I did not deploy.")
        elif not verdict["approved"]:
            reason = verdict.get("reason")
            turn.response(f"Not deployed: {reason}" if reason else "Not deployed.")
        else:
            turn.tool("call_deploy", "deploy", "started", input_preview=json.dumps(call["input"]))
            output = LOCAL_TOOLS["deploy"](call["input"])
            turn.tool("call_deploy", "deploy", "finished", output_preview=output)
            turn.response(f"Done: {output}.")
    elif re.search(r"where am i", text, re.IGNORECASE):
        call = {"call_id": "call_location", "name": "get_location", "input": {}}
        result = turn.request_client_tool(call)
        if result.get("timed_out"):
            turn.response("Your browser did not say where you are.")
        elif "error" in result:
            turn.response(f"Your browser could not tell: {result['error']}")
        else:
            turn.response(f"You are in {result['output']['city']}.")
    else:
        turn.response('Say "deploy TARGET" or "where am I?".')
# README: end


if __name__ == "__main__":
    import signal

    client = WorkerClient(
        os.environ.get("TURNSTREAM_URL", "http://127.0.0.1:8080"),
        os.environ["TURNSTREAM_SERVICE_KEY"],
        worker_id=os.environ.get("TURNSTREAM_WORKER_ID"),
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        run_worker(client, answer, stop=stop)
    except KeyboardInterrupt:
        pass
