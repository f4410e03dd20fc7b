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

CACHED_RUNNERS = 64
CACHED_SHAPE_BYTES = 8 * 2**20  # the request shapes (tools and fields as JSON) the LRU keeps, at most


class Upstream:
    def __init__(self, chat: OpenAICompatibleChatModel, max_concurrency: int):
        self.chat = chat
        self.limiter = ConcurrencyLimiter(max_concurrency)
        self.models: list[str] = [chat.model]  # what the upstream listed when last asked
        self._runners: OrderedDict[str, PaCoReRunner] = OrderedDict()
        self._cached_bytes = 0

    @property
    def default_model(self) -> str:
        return self.chat.model

    def runner(self, call: PlannedCall) -> PaCoReRunner:
        """The compiled PaCoRe graph for this request's shape, sharing the upstream's limiter."""
        key = call.runner_key()
        runner = self._runners.get(key)
        if runner is not None:
            self._runners.move_to_end(key)
            return runner
        runner = PaCoReRunner(self.bound_model(call), call.config, limiter=self.limiter)
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

    def bound_model(self, call: PlannedCall) -> Runnable[LanguageModelInput, AIMessage]:
        """The chat model with what this request sends on every trajectory: model name, tools, extra fields."""
        fields: dict[str, Any] = {"model": call.upstream_model, **call.request_fields}
        if call.tools:
            return self.chat.bind_tools(call.tools, tool_choice=call.tool_choice, **fields)
        return self.chat.bind(**fields)

    async def check_model(self, name: str) -> None:
        """A 404 before anything is spent when the upstream does not serve ``name`` (it is asked again first)."""
        if name in self.models:
            return
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
        """The upstream's models now (the last known list when it cannot be asked)."""
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
        await self.chat.aclose()
