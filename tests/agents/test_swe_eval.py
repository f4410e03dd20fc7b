"""Offline grading for real: Docker containers, the local suite's images, swebench's own graders."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pacore_agents.swe.eval_cli import register_eval
from pacore_agents.swe.evaluation import PredictionError, evaluate, load_predictions, run_swebench_harness
from pacore_agents.swe.sandbox import open_sandbox
from pacore_agents.swe.tasks import listed_tests, load_tasks
from pacore_graph.command_kit import CommandParser, run_parsed

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("own_sandboxes_removed")]
VERIFIED_ROWS = Path(__file__).parents[1] / "fixtures" / "swe" / "verified_rows.jsonl"


@pytest.fixture(scope="module")
def rows(local_tasks) -> list[dict]:
    return local_tasks()


def _report(summary_dir: Path, model: str, instance_id: str) -> dict:
    return json.loads((summary_dir / model / instance_id / "report.json").read_text())[instance_id]


def test_gold_patches_resolve_every_local_task(rows, tmp_path):
    summary = evaluate(rows, load_predictions("gold", rows), run_id="gold", output_dir=tmp_path, progress=False)
    assert summary.resolved_ids == [row["instance_id"] for row in rows]
    assert summary.error_ids == [] and summary.unresolved_ids == []
    for row in rows:
        report = _report(tmp_path / "gold", "gold", row["instance_id"])
        status = report["tests_status"]
        assert sorted(status["FAIL_TO_PASS"]["success"]) == sorted(listed_tests(row, "FAIL_TO_PASS"))
        assert sorted(status["PASS_TO_PASS"]["success"]) == sorted(listed_tests(row, "PASS_TO_PASS"))
    written = json.loads((tmp_path / "gold" / "summary.json").read_text())
    assert written["resolved_instances"] == len(rows)


def test_empty_patches_are_only_empty_and_never_run(rows, tmp_path):
    """As swebench: an empty patch is counted as empty_patch, not run, neither completed nor an error."""
    predictions = {
        row["instance_id"]: {"instance_id": row["instance_id"], "model_name_or_path": "empty", "model_patch": ""}
        for row in rows
    }
    summary = evaluate(rows, predictions, run_id="empty", output_dir=tmp_path, progress=False)
    assert summary.resolved_ids == [] and summary.error_ids == [] and summary.completed_ids == []
    assert summary.empty_patch_ids == sorted(row["instance_id"] for row in rows)
    for row in rows:
        assert not (tmp_path / "empty" / "empty" / row["instance_id"]).exists()  # no container, no logs
    assert summary.submitted_instances == len(rows) and summary.empty_patch_instances == len(rows)


def test_an_empty_predictions_file_resolves_none(rows, tmp_path):
    empty_file = tmp_path / "predictions.jsonl"
    empty_file.write_text("")
    summary = evaluate(
        rows, load_predictions(str(empty_file), rows), run_id="nothing", output_dir=tmp_path, progress=False
    )
    assert summary.resolved_instances == 0 and summary.submitted_instances == 0
    assert summary.total_instances == len(rows)


def test_a_patch_made_in_an_episode_sandbox_grades_as_resolved(rows, tmp_path):
    """The sandbox's diff() is a valid prediction: edit like an agent would, then grade it."""
    row = next(r for r in rows if r["instance_id"] == "pacore__durations-1")
    with open_sandbox(row) as box:
        edit = (
            "python3 - <<'EOF'\nimport pathlib\np = pathlib.Path('durations/parse.py')\ns = p.read_text()\n"
            "s = s.replace('    match = _PART.match(text)\\n    return int(match.group(1)) * "
            "UNITS[match.group(2)]', '    return sum(int(a) * UNITS[u] for a, u in _PART.findall(text))')\n"
            "p.write_text(s)\nEOF"
        )
        assert box.run(edit).exit_code == 0
        patch = box.diff()
    assert "findall" in patch
    prediction = {
        row["instance_id"]: {"instance_id": row["instance_id"], "model_name_or_path": "episode", "model_patch": patch}
    }
    summary = evaluate([row], prediction, run_id="episode", output_dir=tmp_path, progress=False)
    assert summary.resolved_ids == [row["instance_id"]]


def test_a_wrong_patch_is_unresolved_and_a_broken_one_an_error(rows, tmp_path):
    row = next(r for r in rows if r["instance_id"] == "pacore__semver-1")
    broken = (
        "diff --git a/semver/core.py b/semver/core.py\n--- a/semver/core.py\n+++ b/semver/core.py\n"
        "@@ -1,3 +1,3 @@\n-this line is not there\n+nor this\n"
    )
    wrong = row["patch"].replace("int(p) for p in parts", "p for p in parts")
    summaries = {}
    for model, patch in {"broken": broken, "wrong": wrong}.items():
        summaries[model] = evaluate(
            [row],
            {
                row["instance_id"]: {
                    "instance_id": row["instance_id"],
                    "model_name_or_path": model,
                    "model_patch": patch,
                }
            },
            run_id=f"bad-{model}",
            output_dir=tmp_path,
            progress=False,
        )
    assert summaries["wrong"].unresolved_ids == [row["instance_id"]]
    assert summaries["broken"].error_ids == [row["instance_id"]]  # swebench: a patch that does not apply
    assert "Patch Apply Failed" in summaries["broken"].errors[row["instance_id"]]
    assert not (tmp_path / "bad-broken" / "broken" / row["instance_id"] / "report.json").exists()
    assert _report(tmp_path / "bad-wrong", "wrong", row["instance_id"])["patch_successfully_applied"]


def test_rerun_skips_finished_instances(rows, tmp_path):
    row = rows[0]
    predictions = load_predictions("gold", [row])
    evaluate([row], predictions, run_id="again", output_dir=tmp_path, progress=False)
    report = tmp_path / "again" / "gold" / row["instance_id"] / "report.json"
    first = report.stat().st_mtime_ns
    summary = evaluate([row], predictions, run_id="again", output_dir=tmp_path, progress=False)
    assert summary.resolved_ids == [row["instance_id"]] and report.stat().st_mtime_ns == first


def test_missing_swebench_image_is_an_error_entry_not_a_crash(client, tmp_path):
    [stored] = load_tasks(str(VERIFIED_ROWS), instances=["psf__requests-1142"])
    # A row whose official image this host lacks and that no offline build made.
    row = {**stored, "instance_id": "psf__requests-0", "image": "swebench/sweb.eval.x86_64.psf_1776_requests-0:latest"}
    summary = evaluate([row], load_predictions("gold", [row]), run_id="real", output_dir=tmp_path, progress=False)
    assert summary.error_ids == [row["instance_id"]]
    assert row["image"] in summary.errors[row["instance_id"]] and "docker pull" in summary.errors[row["instance_id"]]
    assert "pacore swe images build" in summary.errors[row["instance_id"]]  # or build it here, offline


def test_bad_predictions_get_one_clear_error(rows, tmp_path):
    unknown = tmp_path / "unknown.jsonl"
    unknown.write_text(json.dumps({"instance_id": "nope__nope-1", "model_patch": ""}) + "\n")
    with pytest.raises(PredictionError, match="nope__nope-1"):
        load_predictions(str(unknown), rows)
    shapeless = tmp_path / "shapeless.jsonl"
    shapeless.write_text(json.dumps({"instance_id": rows[0]["instance_id"]}) + "\n")
    with pytest.raises(PredictionError, match="model_patch"):
        load_predictions(str(shapeless), rows)


def _cli(*argv: str) -> int:
    parser = CommandParser(prog="pacore swe")
    register_eval(parser.add_subparsers(required=True))
    return run_parsed(parser.parse_args(list(argv)))  # as `pacore` runs it: an error is one line and its status


def test_cli_eval_gold_and_instances(rows, tmp_path, capsys):
    ids = f"{rows[0]['instance_id']},{rows[1]['instance_id']}"
    code = _cli(
        "eval",
        "--dataset",
        "local",
        "--predictions",
        "gold",
        "--run-id",
        "cli",
        "--output",
        str(tmp_path),
        "--instances",
        ids,
    )
    assert code == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["resolved_ids"] == ids.split(",")
    assert printed["command"] == "swe eval" and printed["exit_code"] == 0 and printed["output"] == str(tmp_path / "cli")
    assert printed["counts"] == {
        "total": 2,
        "done": 2,
        "failed": 0,
        "dataset": 2,
        "completed": 2,
        "resolved": 2,
        "unresolved": 0,
        "empty_patch": 0,
    }
    assert json.loads((tmp_path / "cli" / "summary.json").read_text())["resolved_instances"] == 2
    assert (
        _cli(
            "eval",
            "--dataset",
            "local",
            "--predictions",
            str(tmp_path / "missing.jsonl"),
            "--run-id",
            "x",
            "--output",
            str(tmp_path),
        )
        == 2
    )


def test_swebench_own_harness_resolves_a_local_task(rows, client, tmp_path, monkeypatch):
    """swebench.harness.run_evaluation itself accepts the local rows and images (format compatibility)."""
    monkeypatch.chdir(tmp_path)  # swebench writes logs/ under the working directory
    row = next(r for r in rows if r["instance_id"] == "pacore__roman-1")
    run_id = f"harness-{os.getpid()}"  # its containers' names end with it: another run's are not looked at
    report_file = run_swebench_harness("local", [row], "gold", run_id=run_id, output_dir=tmp_path / "out")
    report = json.loads(Path(report_file).read_text())
    assert report["resolved_ids"] == [row["instance_id"]]
    names = [c.name for c in client.containers.list(all=True, filters={"name": run_id})]
    assert not [name for name in names if name.startswith("sweb.eval.") and name.endswith(f".{run_id}")]
