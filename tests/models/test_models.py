"""The chat model layer: our lean client, ChatOpenAI with reasoning recovered, errors, streaming."""

from __future__ import annotations

import os
from functools import partial
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI

from pacore_graph import PaCoReConfig, PaCoReError, asolve, chat_model
from pacore_graph.errors import is_transient
from pacore_graph.extend import ModelRequestError
from pacore_graph.models.chat_openai import ReasoningChatOpenAI, as_pacore_calls_it


def reasoning_reply(body, attempt):
    return {"content": "the conclusion", "reasoning": "long private reasoning", "finish_reason": "stop"}


async def test_our_client_keeps_reasoning_and_usage(mock_server):
    with mock_server(reasoning_reply) as server:
        model = chat_model(server.base_url)
        message = await model.ainvoke([HumanMessage("hi")])
        await model.aclose()
    assert message.content == "the conclusion"
    assert message.additional_kwargs["reasoning_content"] == "long private reasoning"
    assert message.usage_metadata["output_tokens"] == 5
    assert message.response_metadata["finish_reason"] == "stop"


async def test_streaming_assembles_the_same_message(mock_server):
    with mock_server(reasoning_reply) as server:
        model = chat_model(server.base_url)
        chunks = [chunk async for chunk in model.astream([HumanMessage("hi")])]
        whole = chunks[0]
        for chunk in chunks[1:]:
            whole += chunk
        streamed = await model.acomplete([{"role": "user", "content": "hi"}], stream=True)
        await model.aclose()
        assert server.requests[0]["stream"] is True
        assert server.requests[0]["stream_options"] == {"include_usage": True}
    assert len(chunks) > 5  # really streamed, not one blob
    assert whole.content == "the conclusion"
    assert whole.additional_kwargs["reasoning_content"] == "long private reasoning"
    assert whole.usage_metadata["output_tokens"] == 5
    assert streamed["content"] == "the conclusion" and streamed["reasoning_content"] == "long private reasoning"


async def test_pacore_with_streaming_on(mock_server):
    with mock_server(reasoning_reply) as server:
        model = chat_model(server.base_url)
        result = await asolve(model, "q", PaCoReConfig(rounds=[2], stream=True))
        await model.aclose()
    assert result.answer == "the conclusion" and result.ttc == 15
    assert all(body["stream"] for body in server.requests)


async def test_chatopenai_passed_in_works_and_its_reasoning_is_recovered(mock_server):
    with mock_server(reasoning_reply) as server:
        user_model = ChatOpenAI(base_url=server.base_url, api_key="none", model="mock-model")
        called = as_pacore_calls_it(user_model)
        assert isinstance(called, ReasoningChatOpenAI) and called.root_async_client.max_retries == 0
        assert user_model.root_async_client.max_retries == 2  # the user's own model is left as it was
        result = await asolve(user_model, "q", PaCoReConfig(rounds=[2]), trace=True)
    assert result.answer == "the conclusion"
    assert all(t.reasoning == "long private reasoning" for t in result.trajectories)
    assert server.requests[0]["temperature"] == 1.0 and server.requests[0]["top_p"] == 1.0


@pytest.mark.parametrize("entry", ["asolve", "chat_model", "middleware"])
async def test_a_chatopenai_under_pacore_is_one_layer_of_retries(mock_server, entry):
    """ChatOpenAI's client retries twice by itself: under PaCoRe (asolve, or PaCoReChatModel over it) it does
    not, so a server failing every proposal gets PaCoRe's attempts x K requests, and the error's count is what
    was sent (before: 3 requests per PaCoRe attempt)."""
    from pacore_graph import PaCoReChatModel, RoundFailedError
    from pacore_graph.extend import RetryPolicy

    config = PaCoReConfig(rounds=[4], retry=RetryPolicy(max_attempts=3, initial_delay=0, max_delay=0))
    with mock_server(lambda body, attempt: 500) as server:
        user_model = ChatOpenAI(base_url=server.base_url, api_key="none", model="mock-model")
        with pytest.raises(RoundFailedError) as caught:
            if entry == "asolve":
                await asolve(user_model, "q", config)
            elif entry == "middleware":
                from langchain.agents import create_agent

                from pacore_graph import PaCoReMiddleware

                await create_agent(user_model, [], middleware=[PaCoReMiddleware(config)]).ainvoke({"messages": "q"})
            else:
                await PaCoReChatModel(model=user_model, config=config).ainvoke("q")
    assert len(server.requests) == 3 * 4
    assert "failed after 3 attempt(s)" in str(caught.value)


def test_unreachable_server_is_named():
    with pytest.raises(PaCoReError, match=r"cannot reach the model server at http://127.0.0.1:9/v1"):
        chat_model("http://127.0.0.1:9/v1")


async def test_wrong_model_name_gets_a_hint(mock_server):
    with mock_server(lambda body, attempt: 404) as server:
        model = chat_model(server.base_url, model="no-such-model")
        with pytest.raises(ModelRequestError, match="wrong model name") as caught:
            await model.acomplete([{"role": "user", "content": "x"}])
        await model.aclose()
    assert caught.value.status == 404 and not is_transient(caught.value)


async def test_malformed_json_is_retried_then_recorded(mock_server):
    with mock_server(lambda body, attempt: b"{not json" if attempt <= 2 else {"content": "recovered"}) as server:
        model = chat_model(server.base_url)
        with pytest.raises(ModelRequestError, match="malformed response") as caught:
            await model.acomplete([{"role": "user", "content": "x"}])
        assert is_transient(caught.value)
        result = await asolve(model, "y", PaCoReConfig(rounds=[1], retry={"initial_delay": 0.01}))
        await model.aclose()
    assert result.rounds[0].trajectories[0].attempts == 3 and result.answer == "recovered"


def test_base_url_must_be_http():
    with pytest.raises(ValueError, match="must start with http"):
        chat_model("localhost:8000/v1", model="m")


def test_sync_invoke_works(mock_server):
    with mock_server(reasoning_reply) as server:
        model = chat_model(server.base_url)
        assert model.invoke("hi").content == "the conclusion"


async def test_a_with_retry_wrapper_under_pacore_is_left_to_pacores_retries(mock_server):
    """``model.with_retry(stop_after_attempt=4)`` under PaCoRe: the wrapper's retries are left out (PaCoRe retries
    each trajectory itself), so a server failing every proposal gets PaCoRe's 2 attempts x 4, not 8 x 4."""
    from pacore_graph import RoundFailedError
    from pacore_graph.extend import RetryPolicy

    config = PaCoReConfig(rounds=[4], retry=RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0))
    with mock_server(lambda body, attempt: 500) as server:
        model = chat_model(server.base_url)
        with pytest.raises(RoundFailedError) as caught:
            await asolve(
                model.bind(temperature=0.5).with_retry(stop_after_attempt=4, wait_exponential_jitter=False), "q", config
            )
        await model.aclose()
    assert len(server.requests) == 2 * 4 and "failed after 2 attempt(s)" in str(caught.value)
    assert all(body["temperature"] == 0.5 for body in server.requests)  # the wrappers inside it are kept


class RunRecorder(BaseCallbackHandler):
    """What a chat-model run tells a handler: its start's arguments, its end's message, its error."""

    def __init__(self):
        self.starts: list[dict] = []
        self.ends: list = []
        self.errors: list[BaseException] = []

    def on_chat_model_start(self, serialized, messages, **kwargs):
        self.starts.append({"serialized": serialized, "messages": messages, **kwargs})

    def on_llm_end(self, response, *, run_id, **kwargs):
        self.ends.append((run_id, response.generations[0][0].message))

    def on_llm_error(self, error, **kwargs):
        self.errors.append(error)


async def test_a_whole_message_tells_handlers_what_langchains_own_road_tells_them(mock_server):
    """``ainvoke(..., stream=False)`` takes the client's short road; a handler sees the same run as on
    ``BaseChatModel.ainvoke``'s road: model, messages, caller's tags and metadata, LangSmith's ls_* fields,
    invocation params, name; the message with usage, its id made from the run id; a failure as on_llm_error."""
    from langchain_core.language_models import BaseChatModel

    with mock_server(reasoning_reply) as server:
        model = chat_model(server.base_url, temperature=0.5)
        short, base = RunRecorder(), RunRecorder()
        for recorder, call in ((short, model.ainvoke), (base, partial(BaseChatModel.ainvoke, model))):
            config = {"callbacks": [recorder], "tags": ["t"], "metadata": {"user": "u1"}, "run_name": "mine"}
            message = await call([HumanMessage("hi")], config, stream=False, stop=["END"])
            assert message.usage_metadata["output_tokens"] == 5 and message.additional_kwargs["reasoning_content"]
            ((run_id, ended),) = recorder.ends
            assert ended is message and message.id == f"lc_run--{run_id}-0"
            assert recorder.starts[0]["run_id"] == run_id and recorder.starts[0]["name"] == "mine"
        await model.aclose()
    (seen_short,), (seen_base,) = short.starts, base.starts
    for field in ("serialized", "messages", "tags", "metadata", "invocation_params", "options", "name"):
        assert seen_short[field] == seen_base[field], field
    assert seen_short["metadata"]["user"] == "u1" and seen_short["metadata"]["ls_provider"] == "openai"
    assert seen_short["metadata"]["ls_temperature"] == 0.5 and seen_short["options"] == {"stop": ["END"]}

    with mock_server(reasoning_reply) as server:
        model = chat_model(server.base_url)
        unseen = [await model.ainvoke([HumanMessage("hi")], stream=False) for _ in range(3)]
        given = await model.ainvoke([HumanMessage("hi")], {"run_id": UUID(int=7)}, stream=False)
        await model.aclose()
    # no handler: LangChain's id form, a UUID-shaped run id unique to the call; the caller's run id when given
    assert len({message.id for message in unseen}) == 3
    assert all(UUID(message.id.removeprefix("lc_run--").removesuffix("-0")) for message in unseen)
    assert given.id == f"lc_run--{UUID(int=7)}-0"

    with mock_server(lambda body, attempt: 404) as server:
        model = chat_model(server.base_url, model="no-such-model")
        recorder = RunRecorder()
        with pytest.raises(ModelRequestError):
            await model.ainvoke([HumanMessage("hi")], {"callbacks": [recorder]}, stream=False)
        await model.aclose()
    assert len(recorder.starts) == 1 and isinstance(recorder.errors[0], ModelRequestError) and not recorder.ends


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_forked_process_names_unseen_messages_apart_from_its_parent():
    """Workers forked from one server process answer the same chat threads: their message ids must differ."""
    from pacore_graph.models.openai_compatible import _unseen_run_id

    parent = [_unseen_run_id() for _ in range(2)]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id, then out without running pytest's teardown
        os.write(write, _unseen_run_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 100).decode()
    os.close(read)
    assert os.waitpid(pid, 0)[1] == 0
    assert child not in parent and child[:24] != parent[0][:24] and parent[0][:24] == parent[1][:24]
