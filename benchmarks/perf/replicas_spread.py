"""The client-side spreading pacore-graph did before it left replicas to vllm-router: ``pacore bench replicas``'
baseline.

Each request goes to the replica with the fewest of this client's requests in flight. It knows nothing of
prompts (a round's K trajectories land on different replicas, each prefilling the prompt again) and nothing
of health (a dead replica, with nothing in flight, keeps being picked until the client's retries run out).
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field, PrivateAttr

from pacore_graph import chat_model
from pacore_graph.extend import run_sync
from pacore_graph.models import OpenAICompatibleChatModel


class SpreadChatModel(BaseChatModel):
    """One project client per replica; each request to the one with the fewest requests in flight."""

    replicas: list[OpenAICompatibleChatModel] = Field(min_length=1)
    _in_flight: list[int] = PrivateAttr()

    @classmethod
    def over(cls, base_urls: list[str], model: str) -> SpreadChatModel:
        return cls(replicas=[chat_model(url, model) for url in base_urls])

    def model_post_init(self, context: Any) -> None:
        self._in_flight = [0] * len(self.replicas)

    @property
    def _llm_type(self) -> str:
        return "spread-over-replicas"

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        index = min(range(len(self.replicas)), key=self._in_flight.__getitem__)
        self._in_flight[index] += 1
        try:
            message = await self.replicas[index].ainvoke(messages, stop=stop, **kwargs)
            return ChatResult(generations=[ChatGeneration(message=message)])
        finally:
            self._in_flight[index] -= 1

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return run_sync(self._agenerate(messages, stop=stop, **kwargs))

    async def aclose(self) -> None:
        for replica in self.replicas:
            await replica.aclose()
