"""The round logic of the PaCoRe graph: ``begin`` fans out round 1, ``collect`` ends a round and fans out
the next one (or sets the answer). Both return their Sends in a ``Command``: a router after them would
read the whole state back (LangGraph copies every channel for it), about 3% of the client's CPU at [32, 4].

A :class:`Rounds` is made once per built graph and holds what every node shares: the config (with the
model's reported context window), the explorer, the limiter, the schedule.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, Overwrite, Send

from pacore_graph.concurrency.limiter import ConcurrencyLimiter
from pacore_graph.config import PaCoReConfig
from pacore_graph.coordination.ending import ending
from pacore_graph.errors import RoundFailedError
from pacore_graph.explorers.panel import Models, PanelExplorer, panel_models, single_model
from pacore_graph.explorers.protocol import Explorer, as_explorer
from pacore_graph.graph.compat import passes_on
from pacore_graph.graph.context import current_run
from pacore_graph.graph.reuse import RequestKeys
from pacore_graph.graph.run_state import RunState
from pacore_graph.graph.state import PaCoReState, TrajectoryTask
from pacore_graph.models.preflight import with_model_context
from pacore_graph.records import RoundData, RoundRecord, RoundSummary, TrajectoryData, round_data_of, usable
from pacore_graph.synthesis.prompt import last_user_index, order_references


class Rounds:
    """What the nodes of one PaCoRe graph share, and its two round nodes (sync and async bodies each)."""

    def __init__(self, model_or_explorer: Models, config: PaCoReConfig | None, limiter: ConcurrencyLimiter | None):
        config = config or PaCoReConfig()
        panel = panel_models(model_or_explorer, config)  # a panel's models by name (explorers/panel.py), or None
        # a server-reported context window fits the synthesis prompts (a panel: each model's own, see slot_config)
        self.config = config = config if panel is not None else with_model_context(config, model_or_explorer)
        self.panel = PanelExplorer(panel, config) if panel is not None else None
        self.explorer: Explorer = self.panel or as_explorer(single_model(model_or_explorer), config)
        self.reference_mode = config.compat == "reference"
        self.passes = passes_on if self.reference_mode else usable  # which trajectories become references
        self.uncapped = self.explorer  # compat="reference": what a request refused as too long is retried with
        if self.reference_mode and config.max_tokens is not None:
            self.uncapped = as_explorer(single_model(model_or_explorer), config.model_copy(update={"max_tokens": None}))
        self.limiter = limiter or ConcurrencyLimiter(config.max_concurrency)
        self.requests = RequestKeys(self.explorer, config)  # each trajectory's request digest (graph/reuse.py)
        self.schedule = config.schedule
        self.final_round = len(self.schedule) - 1
        self._expect = getattr(self.explorer, "expect", None)  # optional (see Explorer)

    def slot_model(self, round_index: int, index: int) -> str | None:
        """The panel's model for this slot (None without a panel)."""
        return self.panel.slot_model(round_index, index) if self.panel is not None else None

    def slot_config(self, model: str | None) -> PaCoReConfig:
        """The config a slot's trajectory runs under: its panel model's own (window, reply cap, attempts)."""
        return self.panel.config_of(model) if self.panel is not None and model is not None else self.config

    # ---- begin ----------------------------------------------------------------------------------

    def begin(self, state: PaCoReState, runnable_config: RunnableConfig) -> Command[Any]:
        """A new input starts at round 1, also on a thread that already ran (checkpointer, next turn)."""
        run = current_run()
        run.begin()
        if not run.messages:
            raise ValueError("the message list is empty: PaCoRe needs at least one user message")
        if len(self.schedule) > 1:
            last_user_index(run.messages)  # fail now, not after round 1 was paid for
        self._announce(run, 0)
        update = {
            "round_index": 0,
            "round_start": 0,
            "trajectories": Overwrite([]),
            "rounds": Overwrite([]),
            "answer": None,
            "outcome": None,
        }
        return Command(update=update, goto=self._fan_out(0, []))

    async def abegin(self, state: PaCoReState, runnable_config: RunnableConfig) -> Command[Any]:
        command = self.begin(state, runnable_config)
        await self._admit(0)
        return command

    # ---- collect --------------------------------------------------------------------------------

    def collect(self, state: PaCoReState, runnable_config: RunnableConfig) -> Command[Any]:
        """Order and compact the round and fan out the next one; after the final round its one conclusion
        is the answer."""
        run = current_run()
        round_index = state["round_index"]
        stored = state.get("trajectories", [])
        start = state.get("round_start", 0)
        records = sorted(stored[start:], key=lambda record: record["index"])
        lengths = [record.get("content_length", 0) for record in records]
        order = order_references(lengths, self.config.seed, self.config.reference_order)
        chosen = [records[position] for position in order if self.passes(records[position])]
        summary = RoundSummary(
            round_index=round_index,
            k=self.schedule[round_index],
            reference_order=[r["index"] for r in chosen],
            start=start,
            end=len(stored),
        )
        round_data = round_data_of(summary, stored)
        run.emit(round_finished_event(round_data, records))
        finished = [round_data_of(done, stored) for done in state.get("rounds", [])]
        end = ending(finished, round_data, chosen, run.control(self.config), self.config, self.final_round)
        if not chosen and end is None and not self.reference_mode:  # the reference pipeline carries on with none
            if run.round(round_index, self.schedule[round_index]).ran:
                earlier = [RoundRecord.model_validate(data) for data in finished]
                raise RoundFailedError(RoundRecord.model_validate(round_data), earlier)
            # A resume reached the collector of a round that failed before (its trajectories ran elsewhere,
            # e.g. some saved with empty conclusions before a kill, the rest failed on the resume after it):
            # run the whole round again instead of raising the same error on every resume.
            run.emit({"event": "round_restarted", "round": round_index, "k": round_data["k"]})
            self._announce(run, round_index)
            restart = {"round_start": len(stored), "round_index": round_index}
            return Command(update=restart, goto=self._fan_out(round_index, finished))
        run.finished(round_data)  # the next round's trajectories read their references from here
        update: dict[str, Any] = {"rounds": [summary], "round_start": len(stored), "round_index": round_index + 1}
        if end is not None:
            update.update(round_index=len(self.schedule), answer=answer_message(end.record), outcome=end.outcome)
            run.emit({"event": "run_ended", "round": round_index, **end.outcome})
        elif round_index == self.final_round:  # compat="reference": a failed final call answers ""
            update["answer"] = answer_message(chosen[0]) if chosen else AIMessage(content="", name="pacore")
        else:
            self._announce(run, round_index + 1)
            return Command(update=update, goto=self._fan_out(round_index + 1, [*finished, round_data]))
        return Command(update=update)

    async def acollect(self, state: PaCoReState, runnable_config: RunnableConfig) -> Command[Any]:
        command = self.collect(state, runnable_config)
        if command.goto:  # a round fans out next
            await self._admit(command.update["round_index"])  # type: ignore[index]
        return command

    # ---- fanning out ----------------------------------------------------------------------------

    def _announce(self, run: RunState, round_index: int) -> None:
        """The round is fanned out from this node's task, in this process: all K run here (see RoundBarrier)."""
        k = self.schedule[round_index]
        run.fan_out(round_index, k)
        run.emit({"event": "round_started", "round": round_index, "k": k, "rounds": len(self.schedule)})

    async def _admit(self, round_index: int) -> None:
        """Async runs wait for the limiter to admit the round before it fans out (concurrency/limiter.py)."""
        ticket = await current_run().admit(self.limiter, round_index, self.schedule[round_index])
        if self._expect is not None:  # the requests of every round admitted on this loop, at most the limit
            await self._expect(min(ticket.pending, self.limiter.limit))

    def _fan_out(self, round_index: int, rounds: list[RoundData]) -> list[Send]:
        """The Send tasks of round ``round_index``, after the finished ``rounds``: indices only."""
        spent = spent_tokens(rounds) if self.config.budget.tokens is not None else None
        sends = []
        for index in range(self.schedule[round_index]):
            task = TrajectoryTask(round_index=round_index, index=index)
            if spent is not None:
                task["spent"] = spent
            sends.append(Send("trajectory", task))
        return sends


def spent_tokens(rounds: list[RoundData]) -> int:
    return sum(record.get("completion_tokens", 0) for data in rounds for record in data["trajectories"])


def round_finished_event(round_data: RoundData, records: list[TrajectoryData]) -> dict[str, Any]:
    return {
        "event": "round_finished",
        "round": round_data["round_index"],
        "k": round_data["k"],
        "completion_tokens": sum(r.get("completion_tokens", 0) for r in records),
        "failed": sum(1 for r in records if r.get("error") is not None),
        "cut": sum(1 for r in records if r.get("cut")),
    }


def answer_message(record: TrajectoryData) -> AIMessage:
    """The final trajectory's conclusion and tool calls, under its model message's id (so a messages
    stream that already showed its tokens does not show it twice)."""
    return AIMessage(
        content=record.get("conclusion", ""),
        tool_calls=record.get("tool_calls") or [],
        name="pacore",
        id=record.get("message_id"),
    )
