"""Tables and the plot of ``pacore bench overhead``: the same numbers for a terminal, a markdown file, a PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pacore_benchmarks.perf.overhead import (
    REFERENCE_TARGETS,
    TARGETS,
    Measurement,
    OverheadReport,
    Pair,
    expected_trajectories,
    proxy_added_cpu_ms,
)

PAIR_COLUMNS = ["workload", "client", "wall s", "wall ratio", "CPU ms/traj", "CPU ratio", "peak RSS MB",
                "full GC passes (longest ms)", "trajectories", "failed", "answered", "emulator CPU s",
                "peak in flight"]


def pair_rows(pair: Pair, tokens: bool = False) -> list[list[str]]:
    """The floor's row, the reference pipeline's (when it ran), then the measured client's; ratios to the floor."""
    rows = []
    sides: list[Measurement] = [pair.floor, *([pair.reference] if pair.reference else []), pair.operator]
    for side in sides:
        is_floor = side is pair.floor
        floor_rate = pair.floor.tokens_per_cpu_s
        row = [
            pair.label if is_floor else "",
            side.client,
            f"{side.wall_s:.2f}",
            f"{side.wall_s / pair.floor.wall_s:.3f}" if not is_floor else "1",
            f"{side.cpu_ms_per_trajectory:.3f}",
            f"{side.cpu_s / pair.floor.cpu_s:.2f}" if not is_floor and pair.floor.cpu_s > 0 else "1",
            f"{side.peak_rss_mb:.0f}",
            f"{side.gc_full_passes} ({side.gc_longest_pause_ms:.0f})",
            f"{side.trajectories}/{expected_trajectories(side.rounds, side.problems)}",
            str(side.failures),
            f"{side.answered}/{side.problems}",
            f"{side.emulator_cpu_s:.2f}",
            str(side.peak_active),
        ]
        if tokens:
            ratio = f"{side.tokens_per_cpu_s / floor_rate:.3f}" if not is_floor and floor_rate else "1"
            row += [f"{side.tokens_per_cpu_s:,.0f}", ratio]
        rows.append(row)
    return rows


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _section(title: str, pairs: list[Pair], tokens: bool = False) -> str:
    header = PAIR_COLUMNS + (["tokens per CPU s", "stream ratio"] if tokens else [])
    rows = [row for pair in pairs for row in pair_rows(pair, tokens)]
    return f"## {title}\n\n{_markdown_table(header, rows)}\n"


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
    return {"extra_ms_per_trajectory": per_trajectory, "extra_ms_per_problem": per_problem,
            "worst_relative_residual": worst}


def render_markdown(report: OverheadReport, summary: dict[str, Any], plot: Path | None) -> str:
    s = report.settings
    emu = s.emulator
    verdict = "all targets met" if summary["targets_met"] else "targets missed: " + ", ".join(
        name for name, ok in summary["targets"].items() if not ok)
    parts = [
        "# PaCoRe operator overhead vs the bare aiohttp floor\n",
        f"{s.problems} problems, up to {s.concurrency} requests in flight (emulator slots {s.concurrency}); "
        f"emulator: time to first token {emu.ttft} s, {emu.token_delay * 1000:g} ms per token, output tokens "
        f"{emu.output_tokens} (mean request {emu.mean_latency():.2f} s). Each client runs in its own process; "
        "CPU and RSS are the client's only.\n",
        f"Targets: wall <= {TARGETS['wall_ratio']}x floor, client CPU <= {TARGETS['cpu_ms_per_trajectory']} ms per "
        f"trajectory, streamed tokens per CPU second >= {TARGETS['stream_ratio']}x floor. **Verdict: {verdict}.**\n",
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
                ["problems", "file bytes", "file bytes per problem", "checkpoints", "checkpoint payload bytes",
                 "writes", "write payload bytes", "payload bytes per problem", "wall s", "CPU ms/traj"],
                [[str(c["problems"]), f"{c['file_bytes']:,}", f"{c['file_bytes_per_problem']:,.0f}",
                  str(c["checkpoints"]), f"{c['checkpoint_bytes']:,}", str(c["writes"]), f"{c['write_bytes']:,}",
                  f"{c['payload_bytes_per_problem']:,.0f}", f"{report.checkpoint.wall_s:.2f}",
                  f"{report.checkpoint.cpu_ms_per_trajectory:.3f}"]],
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
    """The operator as multiples of the reference pipeline, per schedule, against the issue-27 targets."""
    rows = [[label, f"{r['wall']:.3f}", f"{r['cpu']:.3f}", f"{r['rss']:.2f}"]
            for label, r in summary["reference"]["per_schedule"].items()]
    limits = ", ".join(f"{name} <= {limit}x" for name, limit in REFERENCE_TARGETS.items())
    spreads = [[pair.label if side is pair.floor else "", side.client, _span(side.wall_runs, "{:.2f}"),
                _span(side.cpu_runs, "{:.3f}"), _span(side.rss_runs, "{:.0f}")]
               for pair in report.schedules if pair.reference is not None
               for side in (pair.floor, pair.reference, pair.operator)]  # fmt: skip
    return (
        "## Operator vs the reference pipeline (stepfun-ai/PaCoRe `base_exp.Exp`)\n\n"
        f"Reference checkout: `{report.settings.reference}`, installed into a scratch venv with this project's "
        "aiohttp; the same emulator, requests and problems, runs alternating floor, reference, operator. "
        f"Targets: {limits}.\n\n"
        + _markdown_table(["workload", "wall (operator / reference)", "client CPU", "peak RSS"], rows)
        + f"\n\nEvery run ({report.settings.repeats} per client, in run order; the tables above show medians):\n\n"
        + _markdown_table(["workload", "client", "wall s", "CPU s", "peak RSS MB"], spreads)
        + "\n"
    )


def _span(values: list[float], form: str) -> str:
    return ", ".join(form.format(value) for value in values)


def versus_reference_line(summary: dict[str, Any]) -> str | None:
    """One line for the terminal: the worst of each ratio to the reference pipeline."""
    if summary.get("reference") is None:
        return None
    worst = summary["reference"]["worst"]
    return (f"against the reference pipeline (worst schedule): wall {worst['wall']:.3f}x, client CPU "
            f"{worst['cpu']:.3f}x, peak RSS {worst['rss']:.2f}x (targets "
            + ", ".join(f"{name} <= {limit}" for name, limit in REFERENCE_TARGETS.items()) + ")")


def rich_tables(report: OverheadReport) -> list[Any]:
    from rich.table import Table

    tables = []
    for title, pairs, tokens in (("Schedules", report.schedules, False), ("Streaming", report.streaming, True),
                                 ("Through the endpoint", report.proxy, False),
                                 ("Scaling with K", report.scaling_k, False),
                                 ("Scaling with problems", report.scaling_problems, False)):
        if not pairs:
            continue
        table = Table(title=title)
        for column in PAIR_COLUMNS + (["tokens per CPU s", "stream ratio"] if tokens else []):
            table.add_column(column, justify="left" if column in ("workload", "client") else "right")
        for pair in pairs:
            for row in pair_rows(pair, tokens):
                table.add_row(*row)
        tables.append(table)
    return tables


def plot_scaling(report: OverheadReport, path: Path) -> Path | None:
    """CPU per trajectory and wall time against K and problems, both clients; None without data or matplotlib."""
    sections = [(name, pairs) for name, pairs in (("K", report.scaling_k), ("problems", report.scaling_problems))
                if pairs]
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
