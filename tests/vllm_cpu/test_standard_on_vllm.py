"""LangChain's standard integration tests (langchain-tests) for both chat models on real vLLM: the client, and
PaCoRe over it. The model is SmolLM2-135M: a reply cap keeps each test to seconds and greedy sampling keeps its
answers the same from run to run. The tests it is too small to pass, and those vLLM itself answers differently,
are strict expected failures, each with its reason (docs/langchain.md lists them)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_tests.integration_tests import ChatModelIntegrationTests
from real_vllm import MODEL, SECOND_NAME
from standard_features import ClientFeatures

from pacore_graph import PaCoReChatModel, PaCoReConfig
from pacore_graph.errors import ModelRequestError
from pacore_graph.models import OpenAICompatibleChatModel, chat_model

TEST_CAP = 128  # tokens per reply: room for a joke as JSON (the structured-output tests), not for rambling
SERVER: dict[str, Any] = {}

FIRST_NAME = (
    "vLLM 0.32 answers every request with its first served name: a call for smollm2-second is served "
    "(not a 404), and its reply says smollm2"
)
ONE_RUN_PER_CALL = (
    "by design: a PaCoRe call is its own chat-model run plus one per proposal and synthesis, and "
    "these tests expect one on_chat_model_start"
)
RAMBLES = (
    "a 135M model, greedy: the joke's strings repeat until the reply cap, so the JSON never closes and nothing parses"
)
NO_KEYS = "a 135M model does not keep the JSON keys the prompt asks for (setup, punchline)"
NO_AUTO_TOOL = "tool_choice 'auto': SmolLM2-135M answers in text instead of calling the tool"
COMMON = {
    "test_invoke_with_model_override": FIRST_NAME,
    "test_ainvoke_with_model_override": FIRST_NAME,
    "test_stream_with_model_override": FIRST_NAME,
    "test_astream_with_model_override": FIRST_NAME,
    "test_structured_output_pydantic_2_v1": RAMBLES,
    "test_structured_output_optional_param": RAMBLES,
    "test_json_mode": NO_KEYS,
    "test_agent_loop": NO_AUTO_TOOL,
}
CLIENT = {
    f"{test}[{schema}]": RAMBLES
    for test in ("test_structured_output", "test_structured_output_async")
    for schema in ("pydantic", "typeddict")
}  # the JSON schema's joke, in the same words, closes in time
PACORE = {"test_structured_output": ONE_RUN_PER_CALL, "test_structured_output_async": ONE_RUN_PER_CALL}
COMMON["test_unicode_tool_call_integration"] = (
    "a 135M model, greedy: the forced call's arguments repeat until the reply cap, so its JSON never closes"
)
EXPECTED_FAILURES = {
    **{("TestClientOnVllm", name): reason for name, reason in {**COMMON, **CLIENT}.items()},
    **{("TestPaCoReChatModelOnVllm", name): reason for name, reason in {**COMMON, **PACORE}.items()},
}


@pytest.fixture(scope="module", autouse=True)
def served(vllm) -> None:
    """The server, and chat_model()'s settings for it (its window from /v1/models), read once: some tests replay
    recorded HTTP and would refuse a request they did not record."""
    SERVER.update(url=vllm.base_url, profile=chat_model(vllm.base_url, MODEL).profile)


def client_params() -> dict[str, Any]:
    return {
        "base_url": SERVER["url"],
        "model": MODEL,
        "profile": SERVER["profile"],
        "max_tokens": TEST_CAP,
        "temperature": 0.0,
    }


class OnVllm(ClientFeatures):
    """The client's features (as in the scripted-server module), the override being the second served name."""

    @property
    def model_override_value(self) -> str:
        return SECOND_NAME


class TestClientOnVllm(OnVllm, ChatModelIntegrationTests):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return OpenAICompatibleChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return client_params()


class TestPaCoReChatModelOnVllm(OnVllm, ChatModelIntegrationTests):
    """PaCoRe [1]: one proposal, then the synthesis over it (the least a PaCoRe call sends: two requests)."""

    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return PaCoReChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"model": OpenAICompatibleChatModel(**client_params()), "config": PaCoReConfig(rounds=[1])}


def test_the_override_reaches_vllm(vllm) -> None:
    """What the model-override tests cannot see: the name given per call is the one sent (an unknown one is vLLM's
    404), and the second name is served."""
    model = OpenAICompatibleChatModel(**client_params())
    with pytest.raises(ModelRequestError, match="HTTP 404"):
        model.invoke("Hi", model="no-such-model", max_tokens=4)
    reply = model.invoke("Hi", model=SECOND_NAME, max_tokens=4)
    assert reply.response_metadata["model_name"] == MODEL and reply.usage_metadata["output_tokens"] > 0
