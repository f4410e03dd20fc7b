"""ChatOpenAI as PaCoRe calls it, for users who bring their own ChatOpenAI: vLLM's reasoning kept, one layer of
retries.

langchain-openai targets OpenAI's own API and drops ``reasoning`` / ``reasoning_content``. PaCoRe needs
the reasoning in the trajectory record (trace; token counts when usage is missing), so the explorer
upgrades a plain ChatOpenAI to this subclass, keeping every setting and client of the original.

The openai client retries by itself (``max_retries``, 2 unless set): under PaCoRe's own retries (one per
trajectory, ``PaCoReConfig.retry``) every PaCoRe attempt would be up to three requests, and an error's attempt
count would not be what was sent. So PaCoRe calls a copy whose clients do not retry, and time out no later than
PaCoRe's ``request_timeout``.
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


def is_chat_openai(model: BaseChatModel) -> bool:
    """Whether ``model`` is one of langchain-openai's chat models (ChatOpenAI, AzureChatOpenAI, subclasses)."""
    return isinstance(model, BaseChatOpenAI)


def as_pacore_calls_it(model: BaseChatModel, request_timeout: float | None = None) -> BaseChatModel:
    """A plain ChatOpenAI as a ReasoningChatOpenAI, and any ChatOpenAI (Azure's too) with clients that do not
    retry and, given PaCoRe's ``request_timeout``, that stop waiting on a silent server after it (a default
    ChatOpenAI waits forever, and a sync call that PaCoRe gave up on cannot be cancelled from outside: its
    own timeout is what closes its request). The same settings and connections otherwise. Other classes are
    returned as they are."""
    if not isinstance(model, BaseChatOpenAI):
        return model
    kind = ReasoningChatOpenAI if type(model) is ChatOpenAI else type(model)
    fields = {name: getattr(model, name) for name in type(model).model_fields}
    changes: dict[str, dict[str, Any]] = {}
    for root in ("root_client", "root_async_client"):
        options: dict[str, Any] = {}
        client = fields[root]
        if getattr(client, "max_retries", 0):
            options["max_retries"] = 0
        if request_timeout is not None and client is not None and _waits_longer(client.timeout, request_timeout):
            options["timeout"] = request_timeout
        if options:
            changes[root] = options
    if kind is type(model) and not changes:
        return model
    for root, options in changes.items():  # the same client, connection pool included, with these options
        fields[root] = fields[root].with_options(**options)
        fields["client" if root == "root_client" else "async_client"] = fields[root].chat.completions
    if any("max_retries" in options for options in changes.values()):
        fields["max_retries"] = 0
    return kind.model_construct(_fields_set=model.model_fields_set, **fields)


def _waits_longer(timeout: Any, seconds: float) -> bool:
    """Whether an openai client's ``timeout`` (None, seconds or an ``httpx.Timeout``) waits for a reply longer
    than ``seconds``."""
    if timeout is None:
        return True
    read = getattr(timeout, "read", timeout)
    return read is None or (isinstance(read, int | float) and read > seconds)
