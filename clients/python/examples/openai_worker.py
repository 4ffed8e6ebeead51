"""A turnstream worker backed by an OpenAI-compatible chat-completions endpoint, with a system
prompt and one local tool (the current time): it streams the model's thinking and reply, runs
the tool calls the model asks for, sends the results back, and streams the answer.

    TURNSTREAM_URL=http://127.0.0.1:8080 TURNSTREAM_SERVICE_KEY=... \\
    OPENAI_BASE_URL=https://api.openai.com/v1 OPENAI_API_KEY=... OPENAI_MODEL=gpt-4o-mini \\
    python3 examples/openai_worker.py
"""

import datetime
import json
import os
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from turnstream_worker import WorkerClient, run_worker  # noqa: E402

SYSTEM_PROMPT = "You are a concise assistant. Use get_time when asked about the time."
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time (ISO 8601, UTC).",
        "parameters": {"type": "object", "properties": {}},
    },
}]
LOCAL_TOOLS = {
    "get_time": lambda: datetime.datetime.now(datetime.timezone.utc).isoformat(),
}
MAX_ROUNDS = 4  # most model calls per turn (each tool round is one)


def stream_completion(upstream, messages, on_choice):
    """Streams one chat completion, calling on_choice(choice) per chunk; the finish reason."""
    headers = {"content-type": "application/json"}
    if upstream.get("api_key"):
        headers["authorization"] = f"Bearer {upstream['api_key']}"
    req = urllib.request.Request(
        upstream["base_url"].rstrip("/") + "/chat/completions",
        data=json.dumps({"model": upstream["model"], "messages": messages,
                         "tools": TOOLS, "stream": True}).encode(),
        headers=headers,
        method="POST",
    )
    finish = None
    with urllib.request.urlopen(req, timeout=300) as res:
        for raw in res:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if chunk.get("error"):
                raise RuntimeError(f"upstream error: {chunk['error'].get('message', chunk['error'])}")
            for choice in chunk.get("choices") or []:
                on_choice(choice)
                finish = choice.get("finish_reason") or finish
    return finish


def answer(turn, upstream):
    """Answers one turn."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    messages += [{"role": m["role"], "content": m["content"]} for m in turn.history]
    messages.append({"role": "user", "content": turn.user_message["content"]})
    for _ in range(MAX_ROUNDS):
        calls, text = {}, []

        def on_choice(choice):
            delta = choice.get("delta") or {}
            turn.thinking(delta.get("reasoning_content") or delta.get("reasoning") or "")
            if delta.get("content"):
                text.append(delta["content"])
                turn.response(delta["content"])
            for tc in delta.get("tool_calls") or []:
                call = calls.setdefault(tc.get("index", 0), {"id": "", "name": "", "arguments": ""})
                call["id"] = call["id"] or tc.get("id") or ""
                call["name"] += (tc.get("function") or {}).get("name") or ""
                call["arguments"] += (tc.get("function") or {}).get("arguments") or ""

        finish = stream_completion(upstream, messages, on_choice)
        if turn.cancelled.is_set():
            return
        if finish != "tool_calls" or not calls:
            if finish not in (None, "stop"):
                raise RuntimeError(f"the model stopped: {finish}")
            return
        ordered = [calls[i] for i in sorted(calls)]
        messages.append({
            "role": "assistant",
            "content": "".join(text) or None,
            "tool_calls": [{"id": c["id"], "type": "function",
                            "function": {"name": c["name"], "arguments": c["arguments"]}}
                           for c in ordered],
        })
        for c in ordered:
            turn.tool(c["id"], c["name"], "started", input_preview=c["arguments"] or "{}")
            run = LOCAL_TOOLS.get(c["name"])
            output = run() if run else f"unknown tool {c['name']}"
            turn.tool(c["id"], c["name"], "finished" if run else "failed", output_preview=output)
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": output})
    raise RuntimeError(f"no answer after {MAX_ROUNDS} model calls")


if __name__ == "__main__":
    client = WorkerClient(os.environ.get("TURNSTREAM_URL", "http://127.0.0.1:8080"),
                          os.environ["TURNSTREAM_SERVICE_KEY"])
    upstream = {
        "base_url": os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
        "api_key": os.environ.get("OPENAI_API_KEY"),
        "model": os.environ.get("OPENAI_MODEL", "gpt-4o-mini"),
    }
    try:
        run_worker(client, lambda turn: answer(turn, upstream))
    except KeyboardInterrupt:
        pass
