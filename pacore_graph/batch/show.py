"""A run folder as a person reads it (``pacore show FOLDER``): per problem its answer, and per round its K, its
tokens and how far its trajectories' answers agreed; optionally a plot of the same.

Reading only: the results file is not repaired (a run beside it may be writing its last line), nothing is
locked. Agreement compares each usable trajectory's answer: the one an ``answer_extractor`` recorded, else
what MathArena's non-strict reading finds (the last ``\\boxed{}``, a stated answer, the last number), else its
conclusion's first line.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pacore_graph.batch.fingerprint import SETTINGS_FILE
from pacore_graph.batch.results_file import RESULTS_FILE, ResultsFile
from pacore_graph.coordination.answers import compared_answer
from pacore_graph.errors import UsageError
from pacore_graph.records import RoundRecord, TrajectoryRecord, model_line, round_line, shorten

WIDTH = 100  # what every line of the rendering fits


@dataclass(frozen=True)
class Agreement:
    """The most common answer of a round's usable trajectories, how many gave it, and out of how many."""

    answer: str | None
    votes: int
    usable: int

    def __str__(self) -> str:
        if not self.usable:
            return "no usable answer"
        if self.usable == 1:
            return f"-> {shorten(self.answer or '', 40)!r}"
        if self.votes == 1:
            return f"all {self.usable} answers differ"
        return f"{self.votes}/{self.usable} agree on {shorten(self.answer or '', 32)!r}"


@dataclass(frozen=True)
class ShownProblem:
    """One finished problem of the folder."""

    id: str
    answer: str
    rounds: list[RoundRecord]
    ttc: int
    models: dict[str, Any] = field(default_factory=dict)  # a panel run: its account per model

    @property
    def agreements(self) -> list[Agreement]:
        return [agreement(r) for r in self.rounds]


def answer_of(record: TrajectoryRecord) -> str:
    """What a trajectory answered, as agreement compares it (see the module's docstring)."""
    return compared_answer(record.answer, record.conclusion)


def agreement(round: RoundRecord) -> Agreement:
    answers = [answer_of(t) for t in round.trajectories if t.usable]
    if not answers:
        return Agreement(None, 0, 0)
    answer, votes = Counter(answers).most_common(1)[0]
    return Agreement(answer, votes, len(answers))


def read_folder(folder: str | Path) -> tuple[dict[str, Any], list[ShownProblem]]:
    """The folder's fingerprint and its finished problems, in the order they finished."""
    path = Path(folder)
    if not (path / SETTINGS_FILE).is_file():
        raise UsageError(f"{path} is not a run folder (it has no {SETTINGS_FILE}): give the folder a run wrote")
    try:
        fingerprint = json.loads((path / SETTINGS_FILE).read_text(encoding="utf-8")).get("fingerprint") or {}
    except (ValueError, AttributeError) as exc:
        raise UsageError(f"{path / SETTINGS_FILE} is not this project's settings file ({exc})") from None
    rows = ResultsFile(path / RESULTS_FILE, key=_row_key, repair=False).rows
    if rows and "rounds" not in rows[0]:
        raise UsageError(
            f"{path}'s rows are a benchmark's, not PaCoRe answers (no 'rounds'): read its report.md or table.md"
        )
    problems = [
        ShownProblem(
            str(row["id"]),
            row.get("answer", ""),
            [RoundRecord.model_validate(r) for r in row["rounds"]],
            row.get("ttc", 0),
            row.get("models") or {},
        )
        for row in rows
    ]
    return fingerprint, problems


def _row_key(row: dict[str, Any]) -> Any:
    return row.get("id", row.get("instance_id"))


def episode_rows(folder: str | Path) -> list[dict[str, Any]] | None:
    """The rows of a folder of agent episodes run on sandbox hosts (rows with ``hosts``: episodes per host, and
    ``moved``: episodes started again elsewhere), or None for any other folder."""
    path = Path(folder)
    if not (path / SETTINGS_FILE).is_file():
        return None
    rows = ResultsFile(path / RESULTS_FILE, key=_row_key, repair=False).rows
    return rows if rows and all("hosts" in row for row in rows) else None


def render_episodes(folder: str | Path, rows: list[dict[str, Any]]) -> str:
    """Per instance its patch, episodes and the hosts that ran them; then episodes per host over the folder."""
    lines = [str(folder), f"{len(rows)} instance(s) finished"]
    total: Counter[str] = Counter()
    for row in rows:
        hosts = Counter(row.get("hosts") or {})
        total += hosts
        patch = "a patch" if row.get("patch") else "no patch"
        lines += ["", fit(f"{_row_key(row)}  {patch}, {row.get('episodes', 0)} episode(s)")]
        moved = f"; {row['moved']} moved to another host" if row.get("moved") else ""
        lines.append(fit(f"    episodes per host: {_counts(hosts)}{moved}"))
    lines += ["", fit(f"episodes per host: {_counts(total)}; moved {sum(row.get('moved', 0) for row in rows)}")]
    return "\n".join(lines)


def _counts(counts: Counter[str]) -> str:
    return ", ".join(f"{host} {n}" for host, n in sorted(counts.items())) or "none"


def render(folder: str | Path) -> str:
    """The text ``pacore show`` prints: a header, then per problem its answer and one line per round (agent
    episodes on sandbox hosts: per instance its episodes per host)."""
    rows = episode_rows(folder)
    if rows is not None:
        return render_episodes(folder, rows)
    fingerprint, problems = read_folder(folder)
    settings = ", ".join(f"{name} {fingerprint[name]}" for name in ("model", "rounds") if fingerprint.get(name))
    if isinstance(fingerprint.get("panel"), dict):  # a panel run: its models by name, not their servers
        settings = f"panel {', '.join(fingerprint['panel'].get('models') or {})}, rounds {fingerprint.get('rounds')}"
    lines = [str(folder), f"{len(problems)} problem(s) finished" + (f" ({settings})" if settings else "")]
    for problem in problems:
        lines += ["", fit(f"{problem.id}  answer: {shorten(problem.answer, WIDTH)}")]
        for round_, agreed in zip(problem.rounds, problem.agreements, strict=True):
            lines.append(fit(f"    round {round_.round_index + 1}: {round_line(round_)}; {agreed}"))
        calls = sum(r.k for r in problem.rounds)
        reused = sum(1 for r in problem.rounds for t in r.trajectories if t.reused)
        sent = f" ({reused} reused from an earlier run, {calls - reused} sent)" if reused else ""
        lines.append(fit(f"    effective TTC {problem.ttc:,} completion tokens over {calls} calls{sent}"))
        lines += [fit(f"    {model_line(name, account)}") for name, account in problem.models.items()]
    if not problems:
        lines.append("nothing finished yet: run the same command again to go on")
    return "\n".join(lines)


def fit(line: str) -> str:
    """``line`` cut to the rendering's width."""
    return line if len(line) <= WIDTH else line[: WIDTH - 1] + "…"


def plot(folder: str | Path, png: str | Path) -> Path:
    """Per problem, its completion tokens stacked by round, and the first round's agreement (the share of its
    usable answers that agree) as a point: where PaCoRe spent tokens, and how split each problem was."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install matplotlib (or the bench extra)") from None
    _, problems = read_folder(folder)
    if not problems:
        raise UsageError(f"{folder} has no finished problem to plot")
    figure, tokens_axis = plt.subplots(figsize=(max(6.0, 0.5 * len(problems) + 2), 4))
    ids = [shorten(p.id, 16) for p in problems]
    bottom = [0] * len(problems)
    for round_index in range(max(len(p.rounds) for p in problems)):
        heights = [p.rounds[round_index].completion_tokens if round_index < len(p.rounds) else 0 for p in problems]
        tokens_axis.bar(ids, heights, bottom=bottom, label=f"round {round_index + 1}")
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    tokens_axis.set_ylabel("completion tokens")
    tokens_axis.tick_params(axis="x", labelrotation=45)
    share_axis = tokens_axis.twinx()
    first = [p.agreements[0] for p in problems]
    share_axis.plot(ids, [a.votes / a.usable if a.usable else 0 for a in first], "ko", label="round 1 agreement")
    share_axis.set_ylim(0, 1.05)
    share_axis.set_ylabel("round 1: share of answers agreeing")
    handles = tokens_axis.get_legend_handles_labels()[0] + share_axis.get_legend_handles_labels()[0]
    tokens_axis.legend(handles=handles, loc="upper left", fontsize="small")
    tokens_axis.set_title(f"{Path(folder).name}: tokens per round and first-round agreement")
    figure.tight_layout()
    out = Path(png)
    figure.savefig(out, dpi=120)
    plt.close(figure)
    return out
