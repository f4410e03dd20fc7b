"""The one progress display of PaCoRe runs: rich bars on stderr.

Two kinds of bars share it:
- the run's own units (problems, pool trajectories, conversations ...), grown with :meth:`RunProgress.add`
  and moved with :meth:`RunProgress.advance`, each with a free note (``3 failed``, ``passed 12``);
- one bar per PaCoRe round, fed by the operator's progress events (call the display with each event, or
  pass it as ``on_event``): trajectories finished of those started, with their tokens and failures, over
  every problem of the run.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn


class _RoundBar:
    def __init__(self, task: TaskID, final: bool):
        self.task = task
        self.final = final
        self.tokens = 0
        self.failed = 0


class RunProgress:
    """Bars on stderr for the duration of a ``with`` block (nested blocks share one display)."""

    def __init__(self, console: Console | None = None, *, enabled: bool = True):
        self.console = console or Console(stderr=True)
        self.enabled = enabled
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(),
            console=self.console,
            disable=not enabled,
        )
        self._bars: dict[str, TaskID] = {}
        self._rounds: dict[int, _RoundBar] = {}
        self._entered = 0

    def __enter__(self) -> RunProgress:
        if self._entered == 0:
            self.progress.start()
        self._entered += 1
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._entered -= 1
        if self._entered == 0:
            self.progress.stop()

    # -- the run's own units -------------------------------------------------------------------------
    def add(self, name: str, total: int) -> None:
        """Make the bar ``name`` (first call) or grow its total."""
        task = self._bars.get(name)
        if task is None:
            self._bars[name] = self.progress.add_task(name, total=total, note="")
        else:
            self.progress.update(task, total=self._total(task) + total)

    def advance(self, name: str, amount: int = 1, *, note: str | None = None) -> None:
        if name not in self._bars:
            self.add(name, 0)
        if note is None:
            self.progress.update(self._bars[name], advance=amount)
        else:
            self.progress.update(self._bars[name], advance=amount, note=note)

    def _total(self, task: TaskID) -> float:
        return next(t.total or 0 for t in self.progress.tasks if t.id == task)

    def print(self, message: str) -> None:
        """A line above the bars (a failure, a notice)."""
        self.console.print(message, highlight=False, soft_wrap=True)

    # -- PaCoRe's progress events --------------------------------------------------------------------
    def __call__(self, event: dict[str, Any]) -> None:
        if not self.enabled:
            return
        kind, round_index = event.get("event"), event.get("round", 0)
        if kind == "round_started":
            self._round_started(round_index, event["k"], round_index == event["rounds"] - 1)
            return
        bar = self._rounds.get(round_index)
        if bar is None:
            return
        if kind == "trajectory_finished":
            bar.tokens += event["completion_tokens"]
        elif kind == "trajectory_failed":
            bar.failed += 1
        elif kind != "trajectory_cut":  # cut: cancelled by early stop or a budget (pacore_graph.coordination)
            return
        self.progress.update(bar.task, advance=1, note=f"{bar.tokens} tokens, {bar.failed} failed")

    def _round_started(self, round_index: int, k: int, final: bool) -> None:
        bar = self._rounds.get(round_index)
        if bar is None:
            label = "final round" if final else f"round {round_index + 1}"
            task = self.progress.add_task(label, total=k, note="0 tokens, 0 failed")
            self._rounds[round_index] = _RoundBar(task, final)
            return
        update: dict[str, Any] = {"total": self._total(bar.task) + k}
        if bar.final != final:  # schedules of several lengths in one run: round numbers only
            bar.final = False
            update["description"] = f"round {round_index + 1}"
        self.progress.update(bar.task, **update)
