"""What LangChain's standard tests (langchain-tests) are told our chat-model client has: shared by the tests on the
scripted server (tests/models/test_standard_chat_models.py) and on real vLLM (tests/vllm_cpu/)."""

from __future__ import annotations


class ClientFeatures:
    """What OpenAICompatibleChatModel has: tool calling with tool_choice (auto-detected from bind_tools),
    structured output (function calling, json_schema, json_mode), usage, per-call model override. Image,
    audio and PDF parts are passed through to the server untouched; the scripted server and SmolLM2 are
    text-only (and the standard multimodal tests download their files from the internet)."""

    @property
    def supports_json_mode(self) -> bool:
        return True

    @property
    def supports_model_override(self) -> bool:
        return True

    @property
    def model_override_value(self) -> str:
        return "another-model"
