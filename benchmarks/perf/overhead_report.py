"""Tables and the plot of ``pacore bench overhead``: the same numbers for a terminal, a markdown file, a PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pacore_benchmarks.perf.overhead import (
    REFERENCE_TARGETS,
    Measurement,
    OverheadReport,
    Pair,
    expected_trajectories,
    proxy_added_cpu_ms,
    target_verdict,
)

# every cell a pair's row can show: key -> (terminal header, split over two lines to keep tables narrow;
# markdown header). Ratios are to the first row of each workload: the floor (the in-process operator for
# the endpoint's rows).
COLUMNS: dict[str, tuple[str, str]] = {
    "workload": ("workload", "workload"),
    "client": ("client", "client"),
    "gc": ("GC", "GC (thresholds in force x collections)"),
    "wall_s": ("wall\ns", "wall s"),
    "wall_ratio": ("wall\nratio", "wall ratio"),
    "cpu_ms": ("CPU ms\n/ traj", "CPU ms/traj"),
    "cpu_ratio": ("CPU\nratio", "CPU ratio"),
    "rss": ("peak RSS\nMB", "peak RSS MB"),
    "full_gc": ("full GCs\n(longest ms)", "full GC passes (longest ms)"),
    "trajectories": ("trajectories", "trajectories"),
    "failed": ("failed", "failed"),
    "answered": ("answered", "answered"),
    "emulator_cpu": ("emulator\nCPU s", "emulator CPU s"),
    "peak_active": ("peak in\nflight", "peak in flight"),
    "tokens_rate": ("tokens\n/ CPU s", "tokens per CPU s"),
    "stream_ratio": ("tokens / CPU s\nratio", "stream ratio"),
}
COST_COLUMNS = ["workload", "client", "gc", "wall_s", "wall_ratio", "cpu_ms", "cpu_ratio", "rss", "full_gc"]
STREAM_COLUMNS = ["workload", "client", "gc", "wall_s", "wall_ratio", "cpu_ms", "tokens_rate", "stream_ratio", "rss"]
COUNT_COLUMNS = ["workload", "client", "trajectories", "failed", "answered", "emulator_cpu", "peak_active"]
MARKDOWN_COLUMNS = COST_COLUMNS + COUNT_COLUMNS[2:]
RATIO_NOTE = "ratios: to each workload's first row"


def gc_setting_line(report: OverheadReport) -> str:
    """The GC setting of every client of the run, in words (tables' titles, the report, the verdicts)."""
    from pacore_graph.extend import SPACED_GC_FULL_PASS_THRESHOLD as FULL_PASS_THRESHOLD

    if report.settings.gc == "spaced":
        return f"GC spaced on every client (full-pass threshold {FULL_PASS_THRESHOLD} while runs are in flight)"
    return "GC default on every client (CPython's thresholds)"


def _thresholds(side: Measurement) -> str:
    """The thresholds in force at the run's collections, most frequent first: ``700,10,100 x412; 700,10,10 x9``."""
    if not side.gc_thresholds_seen:
        return "no collection"
    return "; ".join(f"{thresholds} x{count}" for thresholds, count in side.gc_thresholds_seen.items())


def pair_cells(pair: Pair, side: Measurement, label: str | None = None) -> dict[str, str]:
    """Every cell of one client's row of a pair (see ``COLUMNS``); ratios to the pair's first client."""
    is_floor = side is pair.floor
    floor_rate = pair.floor.tokens_per_cpu_s
    return {
        "workload": (label or pair.label) if is_floor else "",
        "client": side.client,
        "gc": side.gc,
        "wall_s": f"{side.wall_s:.2f}",
        "wall_ratio": f"{side.wall_s / pair.floor.wall_s:.3f}" if not is_floor else "1",
        "cpu_ms": f"{side.cpu_ms_per_trajectory:.3f}",
        "cpu_ratio": f"{side.cpu_s / pair.floor.cpu_s:.2f}" if not is_floor and pair.floor.cpu_s > 0 else "1",
        "rss": f"{side.peak_rss_mb:.0f}",
        "full_gc": f"{side.gc_full_passes} ({side.gc_longest_pause_ms:.0f})",
        "trajectories": f"{side.trajectories}/{expected_trajectories(side.rounds, side.problems)}",
        "failed": str(side.failures),
        "answered": f"{side.answered}/{side.problems}",
        "emulator_cpu": f"{side.emulator_cpu_s:.2f}",
        "peak_active": str(side.peak_active),
        "tokens_rate": f"{side.tokens_per_cpu_s:,.0f}",
        "stream_ratio": f"{side.tokens_per_cpu_s / floor_rate:.3f}" if not is_floor and floor_rate else "1",
    }


def sides(pair: Pair) -> list[Measurement]:
    """The floor, the reference pipeline (when it ran), then the measured client."""
    return [pair.floor, *([pair.reference] if pair.reference else []), pair.operator]


def pair_rows(pair: Pair, columns: list[str], label: str | None = None, thresholds: bool = False) -> list[list[str]]:
    """One row per client of the pair, the cells of ``columns``; ``thresholds``: the GC cell names the
    thresholds the run recorded too."""
    rows = []
    for side in sides(pair):
        cells = pair_cells(pair, side, label)
        if thresholds:
            cells["gc"] = f"{side.gc} ({_thresholds(side)})"
        rows.append([cells[key] for key in columns])
    return rows


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _section(title: str, pairs: list[Pair], tokens: bool = False) -> str:
    columns = MARKDOWN_COLUMNS + (["tokens_rate", "stream_ratio"] if tokens else [])
    rows = [row for pair in pairs for row in pair_rows(pair, columns, thresholds=True)]
    return f"## {title}\n\n{_markdown_table([COLUMNS[key][1] for key in columns], rows)}\n"


def cost_model(pairs: list[Pair]) -> dict[str, float] | None:
    """Least-squares fit of the operator's extra CPU over the floor: a ms per trajectory + b ms per problem.

    Fitted over the scaling runs (K from 4 to 256, problems from 16 up), so a cost that grows faster than
    that shows up as a poor fit and as CPU per trajectory rising with K.
    """
    points = [(p.operator.trajectories, p.operator.problems, 1000 * (p.operator.cpu_s - p.floor.cpu_s)) for p in pairs]
    if len(points) < 3:
        return None
    stt = sum(t * t for t, _, _ in points)
    spp = sum(q * q for _, q, _ in points)
    stp = sum(t * q for t, q, _ in points)
    sty = sum(t * y for t, _, y in points)
    spy = sum(q * y for _, q, y in points)
    det = stt * spp - stp * stp
    if det == 0:
        return None
    per_trajectory = (sty * spp - spy * stp) / det
    per_problem = (spy * stt - sty * stp) / det
    worst = max(abs(y - per_trajectory * t - per_problem * q) / max(abs(y), 1e-9) for t, q, y in points)
    return {
        "extra_ms_per_trajectory": per_trajectory,
        "extra_ms_per_problem": per_problem,
        "worst_relative_residual": worst,
    }


def render_markdown(report: OverheadReport, summary: dict[str, Any], plot: Path | None) -> str:
    s = report.settings
    emu = s.emulator
    verdict = (
        "all targets met"
        if summary["targets_met"]
        else "targets missed: " + ", ".join(name for name, target in summary["targets"].items() if not target["met"])
    )
    parts = [
        "# PaCoRe operator overhead vs the bare aiohttp floor\n",
        f"{s.problems} problems, up to {s.concurrency} requests in flight (emulator slots {s.concurrency}); "
        f"emulator: time to first token {emu.ttft} s, {emu.token_delay * 1000:g} ms per token, output tokens "
        f"{emu.output_tokens} (mean request {emu.mean_latency():.2f} s). Each client runs in its own process; "
        f"CPU and RSS are the client's only. {gc_setting_line(report)}; the GC column names the thresholds "
        "in force at most of each run's collections.\n",
        f"**Verdict: {verdict}.**\n",
        "\n".join(f"- {target_verdict(name, target)}" for name, target in summary["targets"].items()) + "\n",
        _section("Schedules (non-streaming)", report.schedules),
    ]
    if summary.get("reference") is not None:
        parts.append(reference_paragraph(report, summary))
    if report.streaming:
        parts.append(_section("Streaming", report.streaming, tokens=True))
    if report.checkpoint is not None and report.checkpoint.checkpoint:
        c = report.checkpoint.checkpoint
        parts.append(
            "## Checkpoints (SQLite, [32, 4])\n\n"
            + _markdown_table(
                [
                    "problems",
                    "file bytes",
                    "file bytes per problem",
                    "checkpoints",
                    "checkpoint payload bytes",
                    "writes",
                    "write payload bytes",
                    "payload bytes per problem",
                    "wall s",
                    "CPU ms/traj",
                ],
                [
                    [
                        str(c["problems"]),
                        f"{c['file_bytes']:,}",
                        f"{c['file_bytes_per_problem']:,.0f}",
                        str(c["checkpoints"]),
                        f"{c['checkpoint_bytes']:,}",
                        str(c["writes"]),
                        f"{c['write_bytes']:,}",
                        f"{c['payload_bytes_per_problem']:,.0f}",
                        f"{report.checkpoint.wall_s:.2f}",
                        f"{report.checkpoint.cpu_ms_per_trajectory:.3f}",
                    ]
                ],
            )
            + "\n"
        )
    if report.proxy:
        pair = report.proxy[0]
        parts.append(
            _section("Through the OpenAI-compatible endpoint (pacore serve) vs the in-process operator", report.proxy)
            + f"\nThe endpoint adds {proxy_added_cpu_ms(pair):.3f} ms of CPU per trajectory (its process: the server "
            "and an aiohttp client sending one request per problem; baseline: PaCoReNode in a graph) and runs in "
            f"{pair.wall_ratio:.3f}x the operator's wall time.\n"
        )
    if report.scaling_k:
        parts.append(_section(f"Scaling with K (one round, {s.scaling_k_problems} problems)", report.scaling_k))
    if report.scaling_problems:
        parts.append(_section("Scaling with problems (schedule [4])", report.scaling_problems))
    model = cost_model(report.scaling_k + report.scaling_problems)
    if model is not None:
        k_pairs = report.scaling_k
        growth = ""
        if len(k_pairs) >= 2:
            first, last = k_pairs[0], k_pairs[-1]
            growth = (
                f" CPU per trajectory from {first.label} to {last.label}: operator "
                f"{first.operator.cpu_ms_per_trajectory:.3f} -> {last.operator.cpu_ms_per_trajectory:.3f} ms, floor "
                f"{first.floor.cpu_ms_per_trajectory:.3f} -> {last.floor.cpu_ms_per_trajectory:.3f} ms (flat or "
                "falling means no super-linear term)."
            )
        parts.append(
            "## Cost model of the operator's extra CPU\n\n"
            f"Fitted over the scaling runs: operator CPU - floor CPU = {model['extra_ms_per_trajectory']:.3f} ms per "
            f"trajectory + {model['extra_ms_per_problem']:.2f} ms per problem (worst relative residual "
            f"{model['worst_relative_residual']:.0%}).{growth}\n"
        )
    if plot is not None:
        parts.append(f"![scaling]({plot.name})\n")
    if report.profile_top:
        top = "\n".join(report.profile_top.splitlines()[:70])
        title = f"## Operator profile ([32, 4], cProfile; full stats in {report.profile_path})"
        parts.append(f"{title}\n\n```\n{top}\n```\n")
    return "\n".join(parts)


def reference_paragraph(report: OverheadReport, summary: dict[str, Any]) -> str:
    """The operator as multiples of the reference pipeline, per schedule, each against its target."""
    rows = [
        [label, *(versus_cell(name, ratios[name]) for name in REFERENCE_TARGETS)]
        for label, ratios in summary["reference"]["per_schedule"].items()
    ]
    spreads = [
        [
            pair.label if side is pair.floor else "",
            side.client,
            side.gc,
            _span(side.wall_runs, "{:.2f}"),
            _span(side.cpu_runs, "{:.3f}"),
            _span(side.rss_runs, "{:.0f}"),
        ]
        for pair in report.schedules
        if pair.reference is not None
        for side in (pair.floor, pair.reference, pair.operator)
    ]
    return (
        "## Operator vs the reference pipeline (stepfun-ai/PaCoRe `base_exp.Exp`)\n\n"
        f"Reference checkout: `{report.settings.reference}`, installed into a scratch venv with this project's "
        "aiohttp; the same emulator, requests and problems, runs alternating floor, reference, operator; "
        f"{gc_setting_line(report)}.\n\n"
        + _markdown_table(["workload", *versus_headers()], rows)
        + f"\n\nEvery run ({report.settings.repeats} per client, in run order; the tables above show medians):\n\n"
        + _markdown_table(["workload", "client", "GC", "wall s", "CPU s", "peak RSS MB"], spreads)
        + "\n"
    )


def versus_headers(newline: str = " ") -> list[str]:
    """The operator / reference columns, each with its target."""
    return [
        f"{what}{newline}(target <= {REFERENCE_TARGETS[name]:g}x)"
        for name, what in (("wall", "wall"), ("cpu", "client CPU"), ("rss", "peak RSS"))
    ]


def versus_cell(name: str, ratio: float) -> str:
    """One operator / reference ratio and which side of its target it is on: ``0.873x missed``."""
    return f"{ratio:.3f}x {'met' if ratio <= REFERENCE_TARGETS[name] else 'missed'}"


def _span(values: list[float], form: str) -> str:
    return ", ".join(form.format(value) for value in values)


def target_lines(report: OverheadReport, summary: dict[str, Any]) -> list[str]:
    """The verdicts for the terminal: the run's GC setting, then each target with its figure and side."""
    lines = [f"targets, {gc_setting_line(report)}:"]
    lines += [f"  {target_verdict(name, target)}" for name, target in summary["targets"].items()]
    return lines


def rich_tables(report: OverheadReport) -> list[Any]:
    """The terminal's tables, each under 100 columns: the costs per section, the operator against the
    reference pipeline (when it ran), and what every run got done."""
    from rich.table import Table

    def table(title: str, columns: list[str], rows: list[list[str]], caption: str | None = None) -> Any:
        made = Table(title=title, caption=caption)
        for key in columns:
            header = COLUMNS[key][0] if key in COLUMNS else key
            made.add_column(header, justify="left" if key in ("workload", "client", "gc") else "right")
        for row in rows:
            made.add_row(*row)
        return made

    gc_line = f"GC {report.settings.gc} on every client"
    tables = []
    counts: list[list[str]] = []
    for title, pairs, columns, suffix in (
        ("Schedules", report.schedules, COST_COLUMNS, ""),
        ("Streaming", report.streaming, STREAM_COLUMNS, " streamed"),
        ("Through the endpoint (pacore serve)", report.proxy, COST_COLUMNS, ""),
        ("Scaling with K", report.scaling_k, COST_COLUMNS, ""),
        ("Scaling with problems", report.scaling_problems, COST_COLUMNS, ""),
    ):
        if not pairs:
            continue
        rows = [row for pair in pairs for row in pair_rows(pair, columns, label=short_label(pair))]
        tables.append(table(f"{title}: {gc_line}", columns, rows, caption=RATIO_NOTE))
        counts += [row for pair in pairs for row in pair_rows(pair, COUNT_COLUMNS, label=pair.label + suffix)]
        if pairs is report.schedules and any(pair.reference is not None for pair in pairs):
            versus = [
                [pair.label, *(versus_cell(name, ratio) for name, ratio in ratios.items())]
                for pair in pairs
                if (ratios := pair.versus_reference()) is not None
            ]
            made = Table(title=f"Operator / reference pipeline: {gc_line}")
            for header in ["workload", *versus_headers("\n")]:
                made.add_column(header, justify="left" if header == "workload" else "right")
            for row in versus:
                made.add_row(*row)
            tables.append(made)
    if counts:
        tables.append(table("What each run got done", COUNT_COLUMNS, counts))
    return tables


def short_label(pair: Pair) -> str:
    """A workload's label in a table whose title already says it went through the endpoint."""
    return pair.label.removesuffix(" via endpoint")


def plot_scaling(report: OverheadReport, path: Path) -> Path | None:
    """CPU per trajectory and wall time against K and problems, both clients; None without data or matplotlib."""
    sections = [
        (name, pairs) for name, pairs in (("K", report.scaling_k), ("problems", report.scaling_problems)) if pairs
    ]
    if not sections:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(2, len(sections), figsize=(5.5 * len(sections), 7), squeeze=False)
    for column, (name, pairs) in enumerate(sections):
        xs = [p.operator.rounds[0] if name == "K" else p.operator.problems for p in pairs]
        for client in ("floor", "operator"):
            sides = [getattr(p, client) for p in pairs]
            axes[0][column].plot(xs, [m.cpu_ms_per_trajectory for m in sides], marker="o", label=client)
            axes[1][column].plot(xs, [m.wall_s for m in sides], marker="o", label=client)
        for row, label in ((0, "client CPU ms per trajectory"), (1, "wall s")):
            axes[row][column].set_xscale("log", base=2)
            axes[row][column].set_xlabel(name)
            axes[row][column].set_ylabel(label)
            axes[row][column].grid(alpha=0.3)
            axes[row][column].legend()
    fig.suptitle("PaCoRe operator vs floor: scaling")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
