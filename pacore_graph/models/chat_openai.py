"""ChatOpenAI that keeps vLLM's reasoning, for users who bring their own ChatOpenAI.

langchain-openai targets OpenAI's own API and drops ``reasoning`` / ``reasoning_content``. PaCoRe needs
the reasoning in the trajectory record (trace; token counts when usage is missing), so the explorer
upgrades a plain ChatOpenAI to this subclass, keeping every setting and client of the original.
Imported only when a ChatOpenAI is given: langchain-openai and the openai SDK weigh about 30 MB in memory.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_openai import ChatOpenAI

from pacore_graph.models.sse import reasoning_of


class ReasoningChatOpenAI(ChatOpenAI):
    """ChatOpenAI plus ``additional_kwargs["reasoning_content"]`` from vLLM's reasoning fields."""

    def _create_chat_result(self, response: Any, generation_info: dict[str, Any] | None = None) -> ChatResult:
        result = super()._create_chat_result(response, generation_info)
        data = response if isinstance(response, dict) else response.model_dump()
        for generation, choice in zip(result.generations, data.get("choices") or (), strict=False):
            if reasoning := reasoning_of(choice.get("message") or {}):
                generation.message.additional_kwargs["reasoning_content"] = reasoning
        return result

    def _convert_chunk_to_generation_chunk(
        self, chunk: dict[str, Any], default_chunk_class: type, base_generation_info: dict[str, Any] | None
    ) -> ChatGenerationChunk | None:
        generation = super()._convert_chunk_to_generation_chunk(chunk, default_chunk_class, base_generation_info)
        choices = chunk.get("choices") or ()
        if generation is not None and choices:
            if reasoning := reasoning_of(choices[0].get("delta") or {}):
                generation.message.additional_kwargs["reasoning_content"] = reasoning
        return generation


def keep_reasoning(model: BaseChatModel) -> BaseChatModel:
    """The same model (settings, clients) as a ReasoningChatOpenAI; other classes are returned as they are."""
    if type(model) is not ChatOpenAI:
        return model
    fields = {name: getattr(model, name) for name in type(model).model_fields}
    return ReasoningChatOpenAI.model_construct(_fields_set=model.model_fields_set, **fields)
