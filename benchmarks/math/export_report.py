"""The export's summary: how many problems each stage kept (``summary.json``) and the accuracy histograms the
filters cut (``accuracy.png``), each filter's bounds drawn over its histogram."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from pacore_benchmarks.math.settings import MESSAGE_SET_SIZES, ExportSettings

# The paper's math data pipeline (PaCoRe, Sec. 3.2), beside what a run used.
PAPER = {
    "pool_size": 24,
    "message_set_sizes": list(MESSAGE_SET_SIZES),
    "message_accuracy": [0.0, 0.375],
    "synthesis_accuracy": [0.0, 1.0],
}


class ExportCounts(BaseModel):
    problems: int = Field(description="problems in --data (after --limit)")
    pooled: int = Field(description="problems with a pool (the others have none, or their pool failed)")
    pool_failed: int = Field(description="problems whose pool trajectories failed after retries (rerun to retry)")
    no_responses: int = Field(description="pooled problems of which no trajectory left a conclusion")
    stage1: int = Field(description="kept by the message-accuracy filter")
    synthesized: int | None = Field(description="stage-1 problems with every synthesis run made (None: no stage 2)")
    synthesis_failed: int = Field(0, description="stage-1 problems with a failed synthesis run (rerun to retry)")
    exported: int = Field(description="rows written: kept by both stages")


def summary_json(
    counts: ExportCounts, settings: ExportSettings, message: list[float], synthesis: list[float]
) -> dict[str, Any]:
    return {
        **counts.model_dump(),
        "filters": {
            "message_accuracy": [settings.min_message_accuracy, settings.max_message_accuracy],
            "synthesis_accuracy": [settings.min_synthesis_accuracy, settings.max_synthesis_accuracy],
            "synthesis_samples": settings.synthesis_samples,
            "pool_size": settings.pool,
        },
        "paper": PAPER,
        "message_accuracies": message,
        "synthesis_accuracies": synthesis,
    }


def plot_accuracies(
    path: Path,
    message: list[float],
    synthesis: list[float],
    settings: ExportSettings,
    counts: ExportCounts,
    title: str,
    pool_size: int,
) -> Path | None:
    """One histogram per measured accuracy, one bar per value it can take (k of ``pool_size`` responses, k of
    the synthesis samples), the kept interval shaded, its bounds dashed."""
    if not message:
        return None
    import matplotlib  # noqa: PLC0415 - heavy, and the backend must be chosen before pyplot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415

    panels = [
        (
            message,
            settings.min_message_accuracy,
            settings.max_message_accuracy,
            f"stage 1: message accuracy ({counts.stage1} of {len(message)} kept)",
            "#1f77b4",
            pool_size,
        )
    ]
    if synthesis:
        panels.append(
            (
                synthesis,
                settings.min_synthesis_accuracy,
                settings.max_synthesis_accuracy,
                f"stage 2: synthesis accuracy ({counts.exported} of {len(synthesis)} kept)",
                "#d62728",
                settings.synthesis_samples,
            )
        )
    figure, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), dpi=120, squeeze=False)
    for axis, (values, low, high, name, color, steps) in zip(axes[0], panels, strict=True):
        edges = [(k - 0.5) / steps for k in range(steps + 2)]
        axis.hist(values, bins=edges, color=color, alpha=0.85, edgecolor="white")
        axis.axvspan(low if low is not None else -0.05, high if high is not None else 1.05, color="#2ca02c", alpha=0.1)
        for bound in (low, high):
            if bound is not None:
                axis.axvline(bound, color="#2ca02c", linestyle="--", linewidth=1.2)
        axis.set_xlim(-0.05, 1.05)
        axis.set_xlabel("share of correct answers per problem")
        axis.set_ylabel("problems")
        axis.yaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_title(name, fontsize=10)
        axis.grid(True, axis="y", alpha=0.3)
    figure.suptitle(f"{title}: {counts.exported} of {counts.problems} problems exported (kept range shaded)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
