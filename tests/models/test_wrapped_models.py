"""Wrapped chat models are chat models, and a value the user set on a model is sent as set.

Recorded at a scripted OpenAI-compatible server; PaCoReConfig fills in only what the model leaves unset.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import trim_messages
from langchain_core.runnables import ConfigurableField, RunnableLambda, RunnableParallel
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from pacore_graph import PaCoReConfig, PaCoReNode, asolve, chat_model
from pacore_graph.errors import is_transient


def ok(body, attempt):
    return {"content": "fine"}


def sent(server, field):
    return {body.get(field) for body in server.requests}


@pytest.mark.parametrize(
    ("wrap", "temperature"),
    [
        (lambda m: m.bind(temperature=0.3), 0.3),  # bound: sent as set
        (lambda m: m.with_config(tags=["mine"]), 1.0),  # unset: PaCoReConfig fills it in
        (lambda m: m.with_retry(stop_after_attempt=2), 1.0),
        (lambda m: m.bind(temperature=0.2).with_retry().with_config(run_name="x"), 0.2),
        (lambda m: m.with_fallbacks([m]), 1.0),
        (lambda m: trim_messages(max_tokens=10_000, token_counter=len) | m, 1.0),  # a chain ending in the model
    ],
)
async def test_wrapped_lean_client_is_a_chat_model(mock_server, wrap, temperature):
    with mock_server(ok) as server:
        model = chat_model(server.base_url)
        result = await asolve(wrap(model), "q", PaCoReConfig(rounds=[2]))
        await model.aclose()
    assert result.answer == "fine" and len(server.requests) == 3
    assert sent(server, "temperature") == {temperature} and sent(server, "top_p") == {1.0}


async def test_constructor_values_of_either_client_are_sent_as_set(mock_server):
    with mock_server(ok) as server:
        lean = chat_model(server.base_url, temperature=0.0, max_tokens=32)
        await asolve(lean, "q", PaCoReConfig(rounds=[1], max_tokens=999))
        assert (sent(server, "temperature"), sent(server, "max_tokens"), sent(server, "top_p")) == ({0.0}, {32}, {1.0})
        await lean.aclose()
        server.requests.clear()
        user_model = ChatOpenAI(base_url=server.base_url, api_key="none", model="mock-model", temperature=0)
        await asolve(user_model, "q", PaCoReConfig(rounds=[1], top_p=0.9))
    assert sent(server, "temperature") == {0.0} and sent(server, "top_p") == {0.9}


async def test_configured_fields_are_the_users(mock_server):
    with mock_server(ok) as server:
        model = chat_model(server.base_url).configurable_fields(
            temperature=ConfigurableField(id="temp", name="temperature")
        )
        await asolve(model, "q", PaCoReConfig(rounds=[1]), runnable_config={"configurable": {"temp": 0.4}})
        assert sent(server, "temperature") == {0.4}
        server.requests.clear()
        await asolve(model, "q", PaCoReConfig(rounds=[1]))  # not configured this run: filled in
    assert sent(server, "temperature") == {1.0}


class Answer(BaseModel):
    value: int


def test_structured_output_fails_at_construction_saying_what_to_do_instead():
    model = chat_model("http://127.0.0.1:9/v1", model="m")
    with pytest.raises(TypeError, match=r"with_structured_output.*bind_tools\(\[Schema\]"):
        PaCoReNode(model.with_structured_output(Answer))
    with pytest.raises(TypeError, match="with_structured_output"):
        PaCoReNode(model.with_structured_output(Answer, include_raw=True))
    with pytest.raises(TypeError, match="with_structured_output"):
        PaCoReNode(RunnableParallel(raw=model))
    with pytest.raises(TypeError, match="bind the model before composing it"):
        PaCoReNode((RunnableLambda(lambda x: x) | model).bind(temperature=0.1))


def test_chatopenai_connection_errors_are_transient_by_class():
    model = ChatOpenAI(base_url="http://127.0.0.1:9/v1", api_key="none", model="m", max_retries=0)
    with pytest.raises(Exception) as caught:
        model.invoke("hi")
    assert is_transient(caught.value), type(caught.value).__mro__


async def test_answer_metadata_has_model_name_and_finish_reason(mock_server):
    with mock_server(lambda body, attempt: {"content": "done", "finish_reason": "stop"}) as server:
        model = chat_model(server.base_url)
        result = await asolve(model, "q", PaCoReConfig(rounds=[2], answer_records="full"))
        await model.aclose()
    meta = result.message.response_metadata
    assert (meta["model_name"], meta["finish_reason"]) == ("mock-model", "stop")
    rounds = meta["pacore"]["rounds"]  # every record, asked for
    conclusions = [t["conclusion"] for r in rounds for t in r["trajectories"]]
    assert len(conclusions) == 3 and "references" not in rounds[0]  # each conclusion stored once
    assert result.rounds[0].references == ["done", "done"]
