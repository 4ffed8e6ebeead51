"""A LangGraph agent as a turnstream worker: a chat model with two tools, `add` and `deploy`;
`deploy` interrupts the graph for a person's approval, which the turn asks for and the graph
resumes with. Needs the `langgraph` extra and langchain-openai (any chat model will do).

    OPENAI_API_KEY=... TURNSTREAM_URL=http://127.0.0.1:8080 TURNSTREAM_SERVICE_KEY=... \
        python3 examples/langgraph_worker.py
"""

import asyncio
import os
import sys
from typing import Annotated

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from langchain_core.tools import InjectedToolCallId, tool  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402
from langgraph.types import interrupt  # noqa: E402

from turnstream_worker import AsyncWorkerClient, run_worker_async  # noqa: E402
from turnstream_worker.langgraph import run_graph  # noqa: E402


@tool
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


# README: begin
@tool
def deploy(target: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Deploys a target, once a person approves."""
    call = {"call_id": call_id, "name": "deploy", "input": {"target": target}}
    verdict = interrupt({"tool": call, "prompt": f"Deploy {target}?"})
    if not verdict.get("approved"):
        return f"not deployed: {verdict.get('reason') or 'not approved'}"
    return f"{target} is live"
# README: end


def build_graph(model, checkpointer):
    """The agent: the model, and the tools it calls, until it answers."""
    tools = [add, deploy]
    llm = model.bind_tools(tools)

    async def agent(state):
        return {"messages": [await llm.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


if __name__ == "__main__":
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver

    # In-memory state lasts as long as this process; workers that continue each other's
    # turns share a durable checkpointer (SqliteSaver, PostgresSaver).
    graph = build_graph(ChatOpenAI(model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini")),
                        InMemorySaver())
    client = AsyncWorkerClient(
        os.environ.get("TURNSTREAM_URL", "http://127.0.0.1:8080"),
        os.environ["TURNSTREAM_SERVICE_KEY"],
        worker_id=os.environ.get("TURNSTREAM_WORKER_ID"),
    )
    try:
        asyncio.run(run_worker_async(client, lambda turn: run_graph(turn, graph)))
    except KeyboardInterrupt:
        pass
