"""A panel run's explorer: each slot's trajectory is explored by the model the panel gave that slot.

``PaCoReConfig.panel`` names the models; the caller gives the model objects as a mapping from those names, where
a single model goes otherwise. Each model gets its own explorer built with its own config (its context window,
reply cap, attempts: :meth:`PanelExplorer.config_of`), so tool calling, sampling fill-ins and retries are each
model's own, and a synthesis prompt is fitted into the window of the model that will read it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from typing import Any, TypeAlias

from langchain_core.messages import BaseMessage

from pacore_graph.concurrency.per_loop import PerLoop
from pacore_graph.config import PaCoReConfig
from pacore_graph.explorers.episode import EpisodeContext
from pacore_graph.explorers.protocol import Explorer, ModelOrExplorer, as_explorer
from pacore_graph.models.preflight import with_model_context
from pacore_graph.panel import Panel
from pacore_graph.records import Trajectory

Models: TypeAlias = ModelOrExplorer | Mapping[str, ModelOrExplorer]
"""What a run explores with: one model (or explorer, or agent), or for a panel a mapping from the panel's names."""


def panel_models(models: Models, config: PaCoReConfig) -> Mapping[str, ModelOrExplorer] | None:
    """The mapping of a panel run (checked against ``config.panel``), or None for a one-model run.

    A mapping without a panel, a panel without a mapping, or names that do not match are refused here, before a
    run starts."""
    panel = config.panel
    if not isinstance(models, Mapping):
        if panel is not None:
            raise ValueError(
                f"the config has a panel ({', '.join(panel.models)}): give the models as a mapping from these names "
                "to chat models, not one model"
            )
        return None
    if panel is None:
        raise ValueError(
            f"models given by name ({', '.join(map(str, models))}) need a panel in the config: "
            "PaCoReConfig(panel={'models': {...}, 'synthesizer': ...})"
        )
    missing = [name for name in panel.models if name not in models]
    extra = [str(name) for name in models if name not in panel.models]
    if missing or extra:
        said = [f"missing {', '.join(missing)}"] if missing else []
        said += [f"not in the panel: {', '.join(extra)}"] if extra else []
        raise ValueError(f"the models given do not match the panel ({'; '.join(said)})")
    return models


def single_model(models: Models) -> ModelOrExplorer:
    """The one model of a run without a panel (:func:`panel_models` refused a mapping there)."""
    if isinstance(models, Mapping):
        raise ValueError("models given by name need a panel in the config")
    return models


def member_config(config: PaCoReConfig, panel: Panel, name: str, model: ModelOrExplorer) -> PaCoReConfig:
    """The run's config as model ``name`` sees it: its own window (given, else the run's, else its server's),
    reply cap and attempts."""
    member = panel.models[name]
    update: dict[str, Any] = {}
    if member.context_window is not None:
        update["context_window"] = member.context_window
    if member.max_tokens is not None:
        update["max_tokens"] = member.max_tokens
    if member.max_attempts is not None:
        update["retry"] = config.retry.model_copy(update={"max_attempts": member.max_attempts})
    own = config.model_copy(update=update) if update else config
    return with_model_context(own, model)


class PanelExplorer:
    """Explores each trajectory with its slot's model (``episode.model``), inside that model's own bound."""

    def __init__(self, models: Mapping[str, ModelOrExplorer], config: PaCoReConfig):
        assert config.panel is not None, "a panel explorer needs PaCoReConfig.panel"
        self.panel = panel = config.panel
        self.seed = config.seed
        self.final_round = len(config.rounds)
        self.schedule = config.schedule
        self.configs = {name: member_config(config, panel, name, models[name]) for name in panel.models}
        self.explorers: dict[str, Explorer] = {
            name: as_explorer(models[name], self.configs[name]) for name in panel.models
        }
        self._bounds = {
            name: PerLoop(functools.partial(asyncio.Semaphore, member.max_concurrency))
            for name, member in panel.models.items()
            if member.max_concurrency is not None
        }
        self._slots: dict[int, list[str]] = {}

    def slot_model(self, round_index: int, index: int) -> str:
        """The model of slot ``index`` of round ``round_index`` (the same on every resume: the panel's seed)."""
        slots = self._slots.get(round_index)
        if slots is None:
            k = self.schedule[round_index]
            slots = self._slots[round_index] = self.panel.slot_map(
                round_index, k, round_index == self.final_round, self.seed
            )
        return slots[index]

    def config_of(self, name: str) -> PaCoReConfig:
        return self.configs[name]

    def slot_explorer(self, round_index: int, index: int) -> tuple[str, Explorer, PaCoReConfig]:
        """Who explores a slot, and how: its model's name, that model's explorer and config (what a request made for
        the slot carries: its model, its sampling, its window)."""
        name = self.slot_model(round_index, index)
        return name, self.explorers[name], self.configs[name]

    async def expect(self, requests: int) -> None:
        """Every model that can get ready for requests does (each at most for ``requests``)."""
        for explorer in self.explorers.values():
            expect = getattr(explorer, "expect", None)
            if expect is not None:
                await expect(requests)

    async def explore(self, messages: list[BaseMessage], episode: EpisodeContext) -> Trajectory:
        name = episode.model
        if name is None:
            raise RuntimeError("a panel trajectory came without its slot's model (EpisodeContext.model)")
        explorer, bound = self.explorers[name], self._bounds.get(name)
        if bound is None:
            return await explorer.explore(messages, episode)
        async with bound.get():
            return await explorer.explore(messages, episode)
