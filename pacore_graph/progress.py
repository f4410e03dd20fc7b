"""Progress of a PaCoRe run on stderr, fed by the graph's custom stream events."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class RunProgress:
    """One bar per round: trajectories done of K, with the round's completion tokens."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[tokens]} tokens, {task.fields[failed]} failed"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self._tasks: dict[int, Any] = {}

    def __enter__(self) -> RunProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.progress.stop()

    def __call__(self, event: dict[str, Any]) -> None:
        kind, round_index = event.get("event"), event.get("round", 0)
        if kind == "round_started":
            label = "final round" if round_index == event["rounds"] - 1 else f"round {round_index + 1}"
            self._tasks[round_index] = self.progress.add_task(label, total=event["k"], tokens=0, failed=0)
            return
        task = self._tasks.get(round_index)
        if task is None:
            return
        fields = self.progress.tasks[self.progress.task_ids.index(task)].fields
        if kind == "trajectory_finished":
            self.progress.update(task, advance=1, tokens=fields["tokens"] + event["completion_tokens"])
        elif kind == "trajectory_failed":
            self.progress.update(task, advance=1, failed=fields["failed"] + 1)
        elif kind == "trajectory_cut":  # cancelled by early stop or a budget (pacore_graph.coordination)
            self.progress.update(task, advance=1)
