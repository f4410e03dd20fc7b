"""ChatOpenAI as PaCoRe calls it, for users who bring their own ChatOpenAI: vLLM's reasoning kept, one layer of
retries.

langchain-openai targets OpenAI's own API and drops ``reasoning`` / ``reasoning_content``. PaCoRe needs
the reasoning in the trajectory record (trace; token counts when usage is missing), so the explorer
upgrades a plain ChatOpenAI to this subclass, keeping every setting and client of the original.

The openai client retries by itself (``max_retries``, 2 unless set): under PaCoRe's own retries (one per
trajectory, ``PaCoReConfig.retry``) every PaCoRe attempt would be up to three requests, and an error's attempt
count would not be what was sent. So PaCoRe calls a copy whose clients do not retry.
Imported only when a ChatOpenAI is given: langchain-openai and the openai SDK weigh about 30 MB in memory.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_openai import ChatOpenAI
from langchain_openai.chat_models.base import BaseChatOpenAI

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


def as_pacore_calls_it(model: BaseChatModel) -> BaseChatModel:
    """A plain ChatOpenAI as a ReasoningChatOpenAI, and any ChatOpenAI (Azure's too) with clients that do not
    retry; the same settings and connections otherwise. Other classes are returned as they are."""
    if not isinstance(model, BaseChatOpenAI):
        return model
    kind = ReasoningChatOpenAI if type(model) is ChatOpenAI else type(model)
    fields = {name: getattr(model, name) for name in type(model).model_fields}
    retrying = [name for name in ("root_client", "root_async_client") if getattr(fields[name], "max_retries", 0)]
    if kind is type(model) and not retrying:
        return model
    for root in retrying:  # the same client, connection pool included, with its own retries off
        fields[root] = fields[root].with_options(max_retries=0)
        fields["client" if root == "root_client" else "async_client"] = fields[root].chat.completions
    fields["max_retries"] = 0 if retrying else fields["max_retries"]
    return kind.model_construct(_fields_set=model.model_fields_set, **fields)
