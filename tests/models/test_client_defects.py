"""Defects of OpenAICompatibleChatModel that LangChain's standard tests found (issue 23), one test each."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from langchain_core.messages import ChatMessage, HumanMessage
from langchain_core.tools import tool
from pydantic import ValidationError
from scripted_chat import scripted_reply, text_of

from pacore_graph.models import OpenAICompatibleChatModel


@tool
def magic_function(input: int) -> int:
    """Applies a magic function to an input."""
    return input + 2


@tool
def get_weather(location: str) -> str:
    """The weather somewhere."""
    return "sunny"


def test_tool_choice_any_and_true_force_a_tool_call_and_a_name_is_checked(mock_server):
    with mock_server(scripted_reply) as server:
        model = OpenAICompatibleChatModel(base_url=server.base_url, model="m")
        for choice in ("any", True):
            reply = model.bind_tools([magic_function, get_weather], tool_choice=choice).invoke("Hello!")
            assert reply.tool_calls, choice  # the server refuses a tool named "any" (vLLM: 400)
        named = model.bind_tools([magic_function, get_weather], tool_choice="get_weather").invoke("Hello!")
        assert named.tool_calls[0]["name"] == "get_weather"
    assert [body["tool_choice"] for body in server.requests] == [
        "required",
        "required",
        {"type": "function", "function": {"name": "get_weather"}},
    ]
    with pytest.raises(ValueError, match="'no_such_tool', which is not among the bound tools"):
        model.bind_tools([magic_function], tool_choice="no_such_tool")


def test_standard_arguments_are_honoured_and_unknown_ones_refused(mock_server):
    def slow_then_fine(body, attempt):
        if body["messages"][-1]["content"] == "slow":
            return {"content": "late", "delay": 2}
        return 500 if attempt == 1 else {"content": "ok, you see"}

    with mock_server(slow_then_fine) as server:
        model = OpenAICompatibleChatModel(
            base_url=server.base_url, model="m", timeout=0.5, stop=["you"], max_retries=1, temperature=0
        )
        assert model.request_timeout == 0.5
        with pytest.raises(asyncio.TimeoutError):
            model.invoke("slow")
        assert model.invoke("retried").content == "ok, "  # a 500, one retry, then cut at the stop sequence
    retried = [body for body in server.requests if body["messages"][-1]["content"] == "retried"]
    assert len(retried) == 2 and retried[0]["stop"] == ["you"] and retried[0]["temperature"] == 0
    with pytest.raises(ValidationError, match="n_completions"):
        OpenAICompatibleChatModel(base_url=server.base_url, model="m", n_completions=2)


def test_a_message_edited_in_place_is_sent_as_it_is_now(mock_server):
    with mock_server(scripted_reply) as server:
        model = OpenAICompatibleChatModel(base_url=server.base_url, model="m")
        message = HumanMessage("first")
        model.invoke([message])
        message.content = "second"
        model.invoke([message])
        parts = HumanMessage([{"type": "text", "text": "third"}])
        model.invoke([parts])
        parts.content[0]["text"] = "fourth"
        model.invoke([parts])
        model.invoke([ChatMessage("same words", role="user")])
        model.invoke([ChatMessage("same words", role="developer")])  # same content, another role
    sent = [text_of(body["messages"][0]["content"]) for body in server.requests]
    assert sent == ["first", "second", "third", "fourth", "same words", "same words"]
    assert [body["messages"][0]["role"] for body in server.requests[-2:]] == ["user", "developer"]


async def test_llama_cpp_repeating_the_tool_name_in_every_delta_gives_the_name_once(mock_server):
    with mock_server(scripted_reply, llama_cpp=True) as server:
        model = OpenAICompatibleChatModel(base_url=server.base_url, model="m")
        bound = model.bind_tools([magic_function], tool_choice="any")
        whole = None
        async for chunk in bound.astream("What is the value of magic_function(3)? Use the tool."):
            whole = chunk if whole is None else whole + chunk
        assembled = await model.acomplete(
            [{"role": "user", "content": "magic_function(3)?"}],
            tools=[{"type": "function", "function": {"name": "magic_function", "parameters": {}}}],
            tool_choice="required",
            stream=True,
        )
        await model.aclose()
    assert [(call["name"], call["args"]) for call in whole.tool_calls] == [("magic_function", {"input": 3})]
    assert whole.tool_calls[0]["id"].startswith("call_") and whole.tool_calls[0]["id"].count("call_") == 1
    assert assembled["tool_calls"][0]["function"]["name"] == "magic_function"


def test_the_class_reads_openai_base_url_and_api_key(mock_server, monkeypatch):
    with mock_server(scripted_reply) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "key-from-env")
        model = OpenAICompatibleChatModel(model="m")
        model.invoke("hi")
    assert model.base_url == server.base_url and server.keys == ["key-from-env"]
    monkeypatch.delenv("OPENAI_BASE_URL")
    with pytest.raises(ValidationError, match="OPENAI_BASE_URL is not set"):
        OpenAICompatibleChatModel(model="m")


def test_no_unclosed_session_when_a_loop_is_closed_without_finalizing(mock_server):
    """astream_events(version="v3") under a test runner's loop: the loop is closed without finalizing the async
    generators that would close the pooled session; nothing may be logged about it."""
    with mock_server(scripted_reply) as server:
        script = textwrap.dedent(f"""
            import asyncio, gc
            from pacore_graph.models import OpenAICompatibleChatModel
            model = OpenAICompatibleChatModel(base_url={server.base_url!r}, model="m")
            async def main():
                stream = await model.astream_events("Hello", version="v3")
                print(len([event async for event in stream]))
            for _ in range(2):
                loop = asyncio.new_event_loop()
                loop.run_until_complete(main())
                loop.close()
            gc.collect()
        """)
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent
        )
    assert done.returncode == 0, done.stderr
    assert "Unclosed" not in done.stderr, done.stderr
