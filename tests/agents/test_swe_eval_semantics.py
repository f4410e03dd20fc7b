"""`pacore swe eval` counts as swebench does, on the same prediction files, and keeps every path in --output.

The reference is swebench's own ``make_run_report`` (swebench 5): it reads the report.json files our
evaluation wrote (same layout) and counts from the predictions. Predictions run on the local suite's
real Docker images: gold, empty, null, non-applying, wrong, and all of them mixed.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from swebench.harness.reporting import make_run_report

from pacore_agents.swe.eval_cli import register_eval
from pacore_agents.swe.evaluation import PredictionError, evaluate, load_predictions
from pacore_agents.swe.output_paths import folder_name, inside
from pacore_agents.swe.run import trajectory_path
from pacore_graph.command_kit import CommandParser, run_parsed

pytestmark = pytest.mark.docker
COUNTS = (
    "total_instances",
    "submitted_instances",
    "completed_instances",
    "resolved_instances",
    "unresolved_instances",
    "empty_patch_instances",
    "error_instances",
)
ID_LISTS = ("completed_ids", "resolved_ids", "unresolved_ids", "empty_patch_ids", "error_ids")
NOT_APPLYING = (
    "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n"
    "@@ -1,2 +1,2 @@\n-this line is not in the file\n+nor is this one\n the end\n"
)


@pytest.fixture(scope="module")
def rows(local_tasks) -> list[dict]:
    return local_tasks()


def _cli(*argv: str) -> int:
    parser = CommandParser(prog="pacore swe")
    register_eval(parser.add_subparsers(required=True))
    return run_parsed(parser.parse_args(list(argv)))  # as `pacore` runs it: an error is one line and its status


def _wrong(row: dict) -> str:
    """A patch that applies but fixes nothing: a comment appended to the gold patch's first file."""
    path = row["patch"].split(" b/", 1)[1].split("\n", 1)[0]
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,0 +1,1 @@\n+# not a fix\n"


def _predictions(kind: str, rows: list[dict]) -> list[dict]:
    def one(row: dict, patch) -> dict:
        return {"instance_id": row["instance_id"], "model_name_or_path": f"model-{kind}", "model_patch": patch}

    if kind == "gold":
        return [one(row, row["patch"]) for row in rows]
    if kind == "empty":
        return [one(row, "") for row in rows[:3]] + [one(row, None) for row in rows[3:5]]
    if kind == "not-applying":
        return [one(row, NOT_APPLYING) for row in rows[:3]]
    patches = [rows[0]["patch"], "", None, NOT_APPLYING, _wrong(rows[4]), rows[5]["patch"]]
    return [one(row, patch) for row, patch in zip(rows, patches, strict=False)]  # the last row: no prediction


@pytest.mark.parametrize("kind", ["gold", "empty", "not-applying", "mixed"])
def test_summary_counts_equal_swebench_make_run_report(kind, rows, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # make_run_report reads logs/run_evaluation/RUN_ID under the working directory
    predictions = _predictions(kind, rows)
    source = tmp_path / "predictions.jsonl"
    source.write_text("".join(json.dumps(p) + "\n" for p in predictions))
    code = _cli("eval", "--dataset", "local", "--predictions", str(source), "--run-id", kind, "--workers", "2")
    ours = json.loads((tmp_path / "logs" / "run_evaluation" / kind / "summary.json").read_text())
    report_file = make_run_report({p["instance_id"]: p for p in predictions}, rows, kind, report_dir=str(tmp_path))
    theirs = json.loads(Path(report_file).read_text())
    assert {key: ours[key] for key in COUNTS} == {key: theirs[key] for key in COUNTS}
    assert {key: sorted(ours[key]) for key in ID_LISTS} == {key: theirs[key] for key in ID_LISTS}
    assert code == (1 if theirs["error_instances"] else 0)
    if kind == "mixed":
        assert theirs["resolved_instances"] == 2 and theirs["empty_patch_instances"] == 2
        assert theirs["error_instances"] == 1 and theirs["unresolved_instances"] == 1
        assert "Patch Apply Failed" in ours["errors"][rows[3]["instance_id"]]
        log = tmp_path / "logs" / "run_evaluation" / kind / f"model-{kind}" / rows[3]["instance_id"]
        assert "git apply --check --reverse" in (log / "run_instance.log").read_text()  # the chain's last step
        assert not (log / "report.json").exists()


def test_no_patch_runs_the_tests_on_the_unchanged_repository(rows, tmp_path):
    """`--predictions no-patch` (swebench's skip_patch): every FAIL_TO_PASS test fails, PASS_TO_PASS pass."""
    summary = evaluate(
        rows, load_predictions("no-patch", rows), run_id="nop", output_dir=tmp_path, skip_patch=True, progress=False
    )
    assert summary.unresolved_ids == sorted(row["instance_id"] for row in rows)
    assert summary.empty_patch_ids == [] and summary.error_ids == []
    for row in rows:
        report = json.loads((tmp_path / "nop" / "no-patch" / row["instance_id"] / "report.json").read_text())
        status = report[row["instance_id"]]["tests_status"]
        assert sorted(status["FAIL_TO_PASS"]["failure"]) == sorted(json.loads(row["FAIL_TO_PASS"]))
        assert status["PASS_TO_PASS"]["failure"] == []


def test_test_output_is_kept_whole(rows, tmp_path):
    """A test log bigger than the command runner's cap (4 MB) reaches test_output.txt in full."""
    row = dict(rows[0])
    row["eval_script"] = row["eval_script"].replace(
        ": '>>>>> Start Test Output'",
        "head -c 6000000 /dev/zero | tr '\\0' 'y'; echo; echo END-OF-FILLER\n: '>>>>> Start Test Output'",
    )
    summary = evaluate([row], load_predictions("gold", [row]), run_id="big", output_dir=tmp_path, progress=False)
    assert summary.resolved_ids == [row["instance_id"]]
    log = (tmp_path / "big" / "gold" / row["instance_id"] / "test_output.txt").read_text()
    assert log.count("y") >= 6_000_000 and "END-OF-FILLER" in log and "bytes cut" not in log


# ------------------------------------------------------------------------------------------ adversarial


def test_adversarial_ids_and_model_names_stay_inside_output(rows, tmp_path, capsys):
    roman = next(row for row in rows if row["instance_id"] == "pacore__roman-1")
    outside = f"/tmp/pacore-escape-{uuid.uuid4().hex}"
    ids = ["../../escape", outside, "a" * 300, "dup/x", "dup_x", "Case", "case"]
    models = ["..", "../../up", f"{outside}-model", "org/model", "org_model", ".", "x" * 300]
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text("".join(json.dumps({**roman, "instance_id": i}) + "\n" for i in ids))
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text(
        "".join(
            json.dumps({"instance_id": i, "model_name_or_path": m, "model_patch": roman["patch"]}) + "\n"
            for i, m in zip(ids, models, strict=True)
        )
    )
    output = tmp_path / "out" / "logs"
    code = _cli(
        "eval",
        "--dataset",
        str(dataset),
        "--predictions",
        str(predictions),
        "--run-id",
        "../run",
        "--output",
        str(output),
        "--workers",
        "2",
    )
    assert code == 0, capsys.readouterr().err[-3000:]
    assert not Path(outside).exists() and not Path(f"{outside}-model").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "predictions.jsonl", "rows.jsonl"]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["logs"]
    reports = sorted(output.rglob("report.json"))
    assert len(reports) == len(ids) and len({p.parent for p in reports}) == len(ids)
    assert all(p.resolve().is_relative_to(output.resolve()) for p in output.rglob("*"))
    summary = json.loads((inside(output, "../run") / "summary.json").read_text())
    assert sorted(summary["resolved_ids"]) == sorted(ids)


def test_duplicate_prediction_ids_are_refused_with_a_message(rows, tmp_path, capsys):
    row = rows[0]
    source = tmp_path / "predictions.jsonl"
    lines = [
        {"instance_id": row["instance_id"], "model_name_or_path": "m", "model_patch": patch}
        for patch in ("", row["patch"])
    ]
    source.write_text("".join(json.dumps(p) + "\n" for p in lines))
    with pytest.raises(PredictionError, match=r"predictions 1 and 2 are both for 'pacore__"):
        load_predictions(str(source), rows)
    assert (
        _cli(
            "eval",
            "--dataset",
            "local",
            "--predictions",
            str(source),
            "--run-id",
            "dup",
            "--output",
            str(tmp_path / "out"),
        )
        == 2
    )
    assert "both for" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before anything ran
    for bad, message in ((123, "model_patch must be a string or null"), ({"x": 1}, "model_patch must be")):
        source.write_text(json.dumps({"instance_id": row["instance_id"], "model_patch": bad}) + "\n")
        with pytest.raises(PredictionError, match=message):
            load_predictions(str(source), rows)


def test_folder_names_are_safe_short_and_distinct(tmp_path):
    texts = ["../../x", "/tmp/x", "dup/x", "dup_x", "Dup_x", "a" * 300, "a" * 301, ".", "..", "", "x+y", "é"]
    names = [folder_name(text) for text in texts]
    assert len(set(names)) == len(texts)
    assert len({name.lower() for name in names}) == len(texts)  # case-insensitive file systems too
    for name in names:
        assert "/" not in name and name not in (".", "..", "") and len(name) <= 100
        assert inside(tmp_path, name).parent == tmp_path
    assert folder_name("psf__requests-1142") == "psf__requests-1142"  # swebench's layout for ordinary ids
    paths = {trajectory_path(tmp_path, text) for text in texts}
    assert len(paths) == len(texts) and all(p.parent == tmp_path / "trajectories" for p in paths)
