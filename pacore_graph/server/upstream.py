"""The one upstream server behind the endpoint, shared by every request.

One chat model (one pooled HTTP session per event loop) and one :class:`ConcurrencyLimiter`: however
many requests arrive at once, at most ``max_concurrency`` trajectories are in flight upstream. Several
vLLM replicas go behind vllm-router (``pacore serve-vllm --replicas N``), whose URL is the upstream here.

Each distinct request shape (upstream model, schedule, sampling, tools) gets its own compiled PaCoRe
graph, built once and kept in a small LRU: an agent sends the same tools and settings every step. The LRU
is bounded by count and by the bytes of the shapes it keeps (tools can be large), so that what requests
leave behind stays bounded however large they were.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage
from langchain_core.runnables import Runnable

from pacore_graph.concurrency.limiter import ConcurrencyLimiter
from pacore_graph.errors import PaCoReError
from pacore_graph.graph.runner import PaCoReRunner
from pacore_graph.inputs import one_line
from pacore_graph.models import OpenAICompatibleChatModel, served_models
from pacore_graph.server.errors import RequestError
from pacore_graph.server.request import PlannedCall

PANEL_MODEL = "panel"  # what clients of a panel endpoint ask for (pacore-high/panel: a schedule too)
CACHED_RUNNERS = 64
CACHED_SHAPE_BYTES = 8 * 2**20  # the request shapes (tools and fields as JSON) the LRU keeps, at most


class Upstream:
    """``panel``: a panel's chat models by name (``pacore serve --panel``), each its own server, model and key;
    clients then ask for model :data:`PANEL_MODEL`, and every trajectory goes to its slot's model."""

    def __init__(
        self,
        chat: OpenAICompatibleChatModel,
        max_concurrency: int,
        panel: Mapping[str, OpenAICompatibleChatModel] | None = None,
    ):
        self.chat = chat
        self.panel = dict(panel) if panel else None
        self.limiter = ConcurrencyLimiter(max_concurrency)
        self.models: list[str] = [PANEL_MODEL if self.panel else chat.model]  # what the upstream listed when last asked
        self._runners: OrderedDict[str, PaCoReRunner] = OrderedDict()
        self._cached_bytes = 0

    @property
    def default_model(self) -> str:
        return PANEL_MODEL if self.panel else self.chat.model

    def runner(self, call: PlannedCall) -> PaCoReRunner:
        """The compiled PaCoRe graph for this request's shape, sharing the upstream's limiter."""
        key = call.runner_key()
        runner = self._runners.get(key)
        if runner is not None:
            self._runners.move_to_end(key)
            return runner
        models = self.bound_panel(call) if self.panel else self.bound_model(call)
        runner = PaCoReRunner(models, call.config, limiter=self.limiter)
        if len(key) > CACHED_SHAPE_BYTES // 4:
            return runner  # a shape this large is not kept: one request's tools must not crowd out the others
        while self._runners and (
            len(self._runners) >= CACHED_RUNNERS or self._cached_bytes + len(key) > CACHED_SHAPE_BYTES
        ):
            evicted, _ = self._runners.popitem(last=False)
            self._cached_bytes -= len(evicted)
        self._runners[key] = runner
        self._cached_bytes += len(key)
        return runner

    def bound_model(
        self, call: PlannedCall, chat: OpenAICompatibleChatModel | None = None
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """The chat model (default: the upstream's) with what this request sends on every trajectory: model name,
        tools, extra fields."""
        chat = chat or self.chat
        fields: dict[str, Any] = {"model": chat.model if self.panel else call.upstream_model, **call.request_fields}
        if call.tools:
            return chat.bind_tools(call.tools, tool_choice=call.tool_choice, **fields)
        return chat.bind(**fields)

    def bound_panel(self, call: PlannedCall) -> dict[str, Runnable[LanguageModelInput, AIMessage]]:
        """Each panel model bound for this request (its own model name; the request's tools and fields)."""
        assert self.panel is not None
        return {name: self.bound_model(call, chat) for name, chat in self.panel.items()}

    async def check_model(self, name: str) -> None:
        """A 404 before anything is spent when the upstream does not serve ``name`` (it is asked again first)."""
        if name in self.models:
            return
        if self.panel:
            raise RequestError(
                404,
                f"this endpoint runs a panel: ask for model {PANEL_MODEL!r} (or pacore-high/{PANEL_MODEL}), not "
                f"{one_line(repr(name), 80)}",
                param="model",
                code="model_not_found",
            )
        listed = await self._ask()
        if listed is None:
            return  # cannot ask now; the request itself will tell
        self.models = listed
        if name not in listed:
            raise RequestError(
                404,
                f"the upstream does not serve model {one_line(repr(name), 80)}; it serves "
                f"{one_line(', '.join(listed), 200) or 'nothing'} "
                "(name one, optionally behind a schedule prefix such as pacore-high/NAME)",
                param="model",
                code="model_not_found",
            )

    async def listed_models(self) -> list[str]:
        """The upstream's models now (the last known list when it cannot be asked); a panel's one name."""
        if self.panel:
            return list(self.models)
        listed = await self._ask()
        if listed is not None:
            self.models = listed
        return list(self.models)

    async def _ask(self) -> list[str] | None:
        try:
            return await asyncio.to_thread(served_models, self.chat.base_url, self.chat.api_key)
        except PaCoReError:
            return None

    async def aclose(self) -> None:
        for chat in {id(chat): chat for chat in [self.chat, *(self.panel or {}).values()]}.values():
            await chat.aclose()
