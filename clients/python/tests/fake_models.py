"""Chat models for the LangGraph tests: LangChain's GenericFakeChatModel answering a script of
messages, made able to bind tools and to stream the tool calls it makes."""

import json

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.outputs import ChatGenerationChunk


class ScriptedChatModel(GenericFakeChatModel):
    """Answers each call with the script's next message (text streamed word by word, a tool
    call as one chunk); bind_tools keeps the script, as a real model keeps its weights."""

    def bind_tools(self, tools, **kwargs):
        return self

    def _stream(self, messages, stop=None, run_manager=None, **kwargs):
        message = next(self.messages)
        if isinstance(message, AIMessage) and message.tool_calls:
            chunk = AIMessageChunk(content=message.content, id=message.id, tool_call_chunks=[
                {"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
                for i, c in enumerate(message.tool_calls)
            ])
            if run_manager:
                run_manager.on_llm_new_token("", chunk=ChatGenerationChunk(message=chunk))
            yield ChatGenerationChunk(message=chunk)
            return
        # The parent streams text (and additional_kwargs) from the message it draws next.
        self.messages = iter([message, *self.messages])
        yield from super()._stream(messages, stop, run_manager, **kwargs)


def scripted(*messages):
    """A ScriptedChatModel answering `messages` in order (strings are text replies)."""
    return ScriptedChatModel(messages=iter(messages))


def tool_call(name, args, call_id):
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])
