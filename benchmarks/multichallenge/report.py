"""Show MultiChallenge scores: a rich table for the terminal, a markdown report, a bar chart."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pacore_benchmarks.multichallenge.data import SkippedRow
from pacore_benchmarks.multichallenge.judge import OFFICIAL_JUDGE_MODEL
from pacore_benchmarks.multichallenge.scoring import Scores
from pacore_benchmarks.multichallenge.settings import PAPER_REFERENCE, RunSettings
from pacore_graph.extend import EMBEDDED_MODEL


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _ttc(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _columns(scores: Scores) -> list[str]:
    official = f"official (any of {scores.samples}) %" if scores.samples > 1 else "official %"
    return ["axis", "conv", "pass@1 %", official, "mean TTC", "unfinished", "resp err", "judge err"]


def _table_rows(scores: Scores) -> list[list[str]]:
    rows = [
        [a.axis, str(a.conversations), _pct(a.pass_at_1), _pct(a.official), _ttc(a.mean_ttc)]
        + [str(a.unfinished), str(a.response_errors), str(a.judge_errors)]
        for a in scores.axes
    ]
    rows.append(
        ["OVERALL", str(scores.conversations), _pct(scores.overall_pass_at_1), _pct(scores.overall_official)]
        + [_ttc(scores.mean_ttc), str(scores.unfinished), str(scores.response_errors), str(scores.judge_errors)]
    )
    return rows


def summary_table(scores: Scores, settings: RunSettings) -> Table:
    table = Table(title=f"MultiChallenge · {settings.schedule_label()}")
    for index, column in enumerate(_columns(scores)):
        if index == 0:
            table.add_column(column, no_wrap=True, min_width=len("RELIABLE_VERSION_EDITING"))
        else:
            table.add_column(column, justify="right")
    rows = _table_rows(scores)
    for row in rows[:-1]:
        table.add_row(*row)
    table.add_section()
    table.add_row(*rows[-1], style="bold")
    return table


def print_summary(scores: Scores, settings: RunSettings, console: Console | None = None) -> None:
    (console or Console()).print(summary_table(scores, settings))


def _endpoint(url: str | None, model: str | None) -> str:
    if not url:
        return f"`{model or EMBEDDED_MODEL}` (embedded SmolLM2 server)"
    return f"`{model or 'first listed model'}` at {url}"


def self_judging_warning(settings: RunSettings) -> str | None:
    """The warning to show when the judge is (or may be) the responder grading its own answers."""
    if not settings.judge_is_responder():
        return None
    return (
        f"the judge is the responder itself ({_endpoint(settings.base_url, settings.model)}): the model grades "
        f"its own answers, so the scores are not comparable with published MultiChallenge figures (official "
        f"judge: {OFFICIAL_JUDGE_MODEL}); pass --judge-base-url and --judge-model"
    )


def _judge_line(settings: RunSettings, formats: Mapping[str, int] | None) -> str:
    if settings.judge_prompt == "official":
        prompt = "the official MultiChallenge judge prompt (one user message, verdict YES/NO)"
    else:
        prompt = "the project's own judge prompt (not the official one)"
    used = ", ".join(f"{name} ({count} rows)" for name, count in sorted((formats or {}).items()))
    return (
        f"- Judge: {_endpoint(settings.judge_base_url, settings.judge_model)}, {prompt}, temperature 0, "
        f"max_tokens {settings.judge_max_tokens or 'unlimited'}"
        + (f", structured output {used}" if used else "")
        + "; it sees only the final response and TARGET_QUESTION; pass = verdict equals PASS_CRITERIA"
    )


def markdown_report(
    scores: Scores,
    settings: RunSettings,
    *,
    skipped: list[SkippedRow] | None = None,
    judge_formats: Mapping[str, int] | None = None,
    plot_name: str | None = None,
) -> str:
    lines = [
        "# MultiChallenge results",
        "",
        f"- Data: `{settings.data}`"
        + (f", axis {settings.axis}" if settings.axis else "")
        + (f", first {settings.limit} conversations" if settings.limit is not None else ""),
        f"- Responses: {_endpoint(settings.base_url, settings.model)}, {settings.schedule_label()}, "
        f"temperature {settings.temperature}, max_tokens {settings.max_tokens or 'unlimited'}",
        _judge_line(settings, judge_formats),
        f"- Samples (attempts) per conversation: {settings.samples}",
        f"- Rows: {scores.rows} over {scores.conversations} conversations, {scores.unfinished} unfinished",
        "",
        "| " + " | ".join(_columns(scores)) + " |",
        "|" + "---|" * len(_columns(scores)),
    ]
    for row in _table_rows(scores):
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "Scores are percentages; conv = conversations. official = MultiChallenge's official aggregation "
        "(ekwinox117/multi-challenge): a conversation passes when any of its attempts passed. pass@1 = the "
        "mean over a conversation's attempts. Both count unfinished rows, response errors (resp err) and "
        "judge errors as not passed, and keep them in the denominator. OVERALL is the mean of the axis "
        "scores. TTC is the effective test-time compute: completion tokens summed over every trajectory of "
        "every round.",
        "",
    ]
    warning = self_judging_warning(settings)
    if warning:
        lines += [f"**Warning:** {warning}.", ""]
    if scores.unfinished:
        lines += [
            f"**Incomplete:** {scores.unfinished} (conversation, sample) rows are not finished and count as "
            "failures; rerun the same command with the same `--output` to finish them.",
            "",
        ]
    if plot_name:
        lines += [f"![pass@1 per axis]({plot_name})", ""]
    lines += ["## Paper reference (PaCoRe-8B, overall)", "", "| setting | score |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in PAPER_REFERENCE.items()]
    if skipped:
        lines += ["", f"## Skipped malformed rows ({len(skipped)})", ""]
        lines += [f"- `{s.where}`: {s.reason}" for s in skipped]
    return "\n".join(lines) + "\n"


def plot_scores(scores: Scores, path: Path) -> bool:
    """Bar chart of pass@1 per axis; False (and no file) when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels = [a.axis.replace("_", "\n") for a in scores.axes] + ["OVERALL"]
    values = [100 * a.pass_at_1 for a in scores.axes] + [100 * (scores.overall_pass_at_1 or 0.0)]
    fig, ax = plt.subplots(figsize=(8, 4))
    bars = ax.bar(labels, values, color=["#4c72b0"] * len(scores.axes) + ["#dd8452"])
    ax.bar_label(bars, fmt="%.1f")
    ax.set_ylabel("pass@1 (%)")
    ax.set_ylim(0, 112)  # room for the value labels above a 100 % bar
    ax.set_yticks(range(0, 101, 20))
    ax.set_title("MultiChallenge pass@1 per axis")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
