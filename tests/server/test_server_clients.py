"""Real OpenAI clients through the endpoint: the openai SDK (plain, streamed, tools) and LangChain's ChatOpenAI.

Each test reads the upstream's request log: the PaCoRe rounds must be there (K first-round requests with
the client's messages, then the synthesis request), and the reply's usage must equal their completion
tokens.
"""

from __future__ import annotations

import json

from endpoint import FINAL_ANSWER, endpoint, is_synthesis, last_user_text, upstream_tokens
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openai import OpenAI

QUESTION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 17*23?"}]
BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}


def assert_rounds(requests: list[dict], k: int) -> None:
    """K requests with the client's own messages, then one synthesis over their K conclusions."""
    assert len(requests) == k + 1
    first, final = requests[:k], requests[k]
    assert not any(is_synthesis(body) for body in first)
    assert all(last_user_text(body) == "What is 17*23?" for body in first)
    assert is_synthesis(final) and last_user_text(final).count("Draft: 17*23 is 391") == k
    assert final["messages"][0] == {"role": "system", "content": "Be brief."}  # only the last user message changes


def test_openai_sdk_plain_reply_carries_answer_reasoning_and_ttc():
    with endpoint(rounds=[4]) as (upstream, server):
        reply = OpenAI(base_url=server.base_url, api_key="unused").chat.completions.create(
            model="pacore-rounds-3/mock-model", messages=QUESTION
        )
        requests = list(upstream.requests)
    assert_rounds(requests, 3)  # the model-name prefix picked [3] over the server's default [4]
    message = reply.choices[0].message
    assert message.content == FINAL_ANSWER
    assert message.model_extra["reasoning_content"] == "17*23 = 391, checked twice."
    assert reply.choices[0].finish_reason == "stop"
    assert reply.model == "pacore-rounds-3/mock-model"
    assert reply.usage.completion_tokens == upstream_tokens(requests)
    assert reply.usage.prompt_tokens == 50 * 4
    rounds = reply.usage.model_extra["pacore"]["rounds"]
    assert [(r["round"], r["k"], r["failed"]) for r in rounds] == [(0, 3, 0), (1, 1, 0)]
    assert [r["completion_tokens"] for r in rounds] == [upstream_tokens(requests[:3]), upstream_tokens(requests[3:])]


def test_openai_sdk_stream_sends_final_round_token_by_token():
    with endpoint(rounds=[3]) as (upstream, server):
        stream = OpenAI(base_url=server.base_url, api_key="unused").chat.completions.create(
            model="mock-model", messages=QUESTION, stream=True, stream_options={"include_usage": True}
        )
        chunks = list(stream)
        requests = list(upstream.requests)
    assert_rounds(requests, 3)
    assert [body.get("stream") for body in requests] == [None, None, None, True]  # only the final round streams
    content = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    reasoning = [c.choices[0].delta.model_extra.get("reasoning_content") for c in chunks if c.choices]
    assert "".join(content) == FINAL_ANSWER and len(content) > 3  # as the upstream streamed it, 3 characters a time
    assert "".join(r for r in reasoning if r) == "17*23 = 391, checked twice."
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == upstream_tokens(requests)
    assert len({c.id for c in chunks}) == 1


def tool_calling_upstream(body: dict, attempt: int) -> dict:
    """Every trajectory answers with a bash tool call; the synthesis picks `ls -la`."""
    command = "ls -la" if is_synthesis(body) else f"ls {len(json.dumps(body))}"
    arguments = json.dumps({"command": command})
    call = {"id": "call_x", "type": "function", "function": {"name": "bash", "arguments": arguments}}
    usage = {"prompt_tokens": 9, "completion_tokens": 7 if is_synthesis(body) else 3, "total_tokens": 0}
    return {"content": "", "tool_calls": [call], "finish_reason": "tool_calls", "usage": usage}


def test_a_clients_strict_reaches_every_trajectory_and_tools_that_say_nothing_go_strict():
    """ChatOpenAI's ``bind_tools(strict=...)`` through ``pacore serve``: True and False are passed on as the client
    sent them; a tool that says nothing goes strict (vLLM then returns its arguments as an object)."""

    @tool
    def bash(command: str) -> str:
        """Run a command."""
        return command

    sent = {}
    with endpoint(tool_calling_upstream, rounds=[2]) as (upstream, server):
        client = ChatOpenAI(base_url=server.base_url, api_key="unused", model="mock-model", max_retries=0)
        for strict in (None, True, False):
            kwargs = {} if strict is None else {"strict": strict}
            client.bind_tools([bash], tool_choice="bash", **kwargs).invoke("List the files.")
            sent[strict] = {tool["function"].get("strict") for body in upstream.requests for tool in body["tools"]}
            upstream.requests.clear()
    assert sent == {None: {True}, True: {True}, False: {False}}


def test_openai_sdk_tools_every_trajectory_offered_and_reply_carries_final_calls():
    with endpoint(tool_calling_upstream, rounds=[2]) as (upstream, server):
        client = OpenAI(base_url=server.base_url, api_key="unused")
        reply = client.chat.completions.create(model="mock-model", messages=QUESTION, tools=[BASH_TOOL])
        streamed = list(
            client.chat.completions.create(model="mock-model", messages=QUESTION, tools=[BASH_TOOL], stream=True)
        )
        requests = list(upstream.requests)
    strict = {**BASH_TOOL, "function": {**BASH_TOOL["function"], "strict": True}}  # sent strict: vLLM returns objects
    assert len(requests) == 6 and all(body["tools"] == [strict] for body in requests)
    assert "ls -la" not in json.dumps(requests[2]) and '"command": "ls ' in last_user_text(requests[2])  # references
    (call,) = reply.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("bash", {"command": "ls -la"})
    assert reply.choices[0].finish_reason == "tool_calls"
    assert reply.usage.completion_tokens == 3 + 3 + 7
    deltas = [c.choices[0].delta.tool_calls for c in streamed if c.choices and c.choices[0].delta.tool_calls]
    (streamed_call,) = [call for delta in deltas for call in delta]
    assert json.loads(streamed_call.function.arguments) == {"command": "ls -la"} and streamed_call.index == 0


def test_langchain_chat_openai_invoke_stream_and_tools():
    with endpoint(rounds=[2]) as (upstream, server):
        model = ChatOpenAI(model="pacore-low/mock-model", base_url=server.base_url, api_key="unused")
        answer = model.invoke([("system", "Be brief."), ("user", "What is 17*23?")])
        first_call = list(upstream.requests)
        chunks = list(model.stream([("user", "What is 17*23?")]))
    assert_rounds(first_call, 4)  # pacore-low: [4]
    assert answer.content == FINAL_ANSWER
    assert answer.usage_metadata["output_tokens"] == upstream_tokens(first_call)
    assert answer.response_metadata["token_usage"]["pacore"]["rounds"][0]["k"] == 4
    assert "".join(chunk.content for chunk in chunks) == FINAL_ANSWER

    with endpoint(tool_calling_upstream, rounds=[2]) as (upstream, server):
        tools_model = ChatOpenAI(model="mock-model", base_url=server.base_url, api_key="unused").bind_tools([BASH_TOOL])
        message = tools_model.invoke("List the files.")
    assert message.tool_calls[0]["name"] == "bash" and message.tool_calls[0]["args"] == {"command": "ls -la"}
