"""Task rows: the shipped local suite, real SWE-bench Verified rows (tests/fixtures/swe), the file formats."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT
from swebench.harness.log_parsers import PARSER_REGISTRY
from swebench.harness.utils import make_test_spec

from pacore_agents.swe.images import compute_base_commit
from pacore_agents.swe.tasks import (
    HIDDEN_KEYS,
    TaskLoadError,
    listed_tests,
    load_tasks,
    parse_instances,
    patched_files,
    public_view,
)

VERIFIED_ROWS = Path(__file__).parents[1] / "fixtures" / "swe" / "verified_rows.jsonl"
V5_KEYS = {
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "version",
    "environment_setup_commit",
    "eval_script",
    "log_parser",
    "eval_type",
    "image",
}


@pytest.fixture(scope="module")
def local_rows() -> list[dict]:
    return load_tasks("local")


def test_local_suite_has_six_or_more_complete_rows(local_rows):
    assert len(local_rows) >= 6
    assert len({row["instance_id"] for row in local_rows}) == len(local_rows)
    for row in local_rows:
        assert V5_KEYS <= set(row), row["instance_id"]
        assert listed_tests(row, "FAIL_TO_PASS") and listed_tests(row, "PASS_TO_PASS")


def test_local_rows_feed_swebench_make_test_spec(local_rows):
    for row in local_rows:
        spec = make_test_spec(row)
        assert spec.image == row["image"]
        assert spec.FAIL_TO_PASS == listed_tests(row, "FAIL_TO_PASS")
        assert row["log_parser"] in PARSER_REGISTRY
        assert START_TEST_OUTPUT in spec.eval_script and END_TEST_OUTPUT in spec.eval_script
        assert row["test_patch"].rstrip("\n") in spec.eval_script


def test_stored_base_commit_is_the_commit_of_the_repo(local_rows):
    for row in local_rows:
        assert row["base_commit"] == compute_base_commit(Path(row["pacore_task_dir"]) / "repo"), row["instance_id"]


def test_tests_to_grade_live_in_the_files_the_test_patch_touches(local_rows):
    for row in local_rows:
        files = set(patched_files(row["test_patch"]))
        for test in listed_tests(row, "FAIL_TO_PASS") + listed_tests(row, "PASS_TO_PASS"):
            assert test.split("::")[0] in files, (row["instance_id"], test)
        assert not set(patched_files(row["patch"])) & files, "gold patch must not touch test files"


def test_hidden_tests_are_not_in_the_repository(local_rows):
    for row in local_rows:
        repo = Path(row["pacore_task_dir"]) / "repo"
        text = "\n".join(p.read_text() for p in repo.rglob("*.py"))
        for test in listed_tests(row, "FAIL_TO_PASS"):
            name = test.split("::")[1].split("[")[0]
            assert f"def {name}(" not in text, (row["instance_id"], name)


def test_public_view_hides_gold_patch_and_tests(local_rows):
    view = public_view(local_rows[0])
    assert not set(HIDDEN_KEYS) & set(view)
    assert view["problem_statement"] == local_rows[0]["problem_statement"]


def test_instances_filter_keeps_the_requested_order(local_rows):
    ids = [local_rows[2]["instance_id"], local_rows[0]["instance_id"]]
    assert [r["instance_id"] for r in load_tasks("local", instances=ids)] == ids
    with pytest.raises(TaskLoadError, match="no-such-task"):
        load_tasks("local", instances=["no-such-task"])
    assert parse_instances(["a,b", "c"]) == ["a", "b", "c"]


def test_verified_rows_load_from_parquet_and_make_test_spec_works_offline(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    stored = [json.loads(line) for line in VERIFIED_ROWS.read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(stored), tmp_path / "verified.parquet")
    rows = load_tasks(str(tmp_path / "verified.parquet"))
    assert rows == stored and len(rows) == 2
    for row in rows:
        spec = make_test_spec(row)
        assert spec.instance_id == row["instance_id"] and spec.image == row["image"]
        assert spec.log_parser in PARSER_REGISTRY
        assert spec.FAIL_TO_PASS, row["instance_id"]
        assert START_TEST_OUTPUT in spec.eval_script


def test_jsonl_and_json_round_trip(tmp_path, local_rows):
    plain = [{k: v for k, v in row.items() if k != "pacore_task_dir"} for row in local_rows]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in plain))
    (tmp_path / "rows.json").write_text(json.dumps(plain))
    assert load_tasks(str(tmp_path / "rows.jsonl")) == plain
    assert load_tasks(str(tmp_path / "rows.json")) == plain


def test_bad_inputs_get_one_clear_error(tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"instance_id": "a"}\nnot json\n')
    with pytest.raises(TaskLoadError, match="broken.jsonl:2"):
        load_tasks(str(broken))
    missing_key = tmp_path / "missing.jsonl"
    missing_key.write_text(json.dumps({"instance_id": "a", "repo": "r", "base_commit": "c"}) + "\n")
    with pytest.raises(TaskLoadError, match="problem_statement"):
        load_tasks(str(missing_key))
    with pytest.raises(TaskLoadError, match="does not exist"):
        load_tasks(str(tmp_path / "nope.parquet"))
    with pytest.raises(TaskLoadError, match="expected a"):
        load_tasks("verified")


def test_hub_name_offline_fails_with_a_pointer_to_the_local_file(monkeypatch):
    # swebench imports `datasets` first, so offline mode is set on the libraries, not in the environment
    import datasets
    import huggingface_hub

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(TaskLoadError, match="verified.parquet"):
        load_tasks("pacore-test/no-such-dataset")


def test_a_task_folder_of_your_own_gets_its_derived_fields(tmp_path, local_rows):
    source = Path(local_rows[0]["pacore_task_dir"])
    task = tmp_path / "mine"
    shutil.copytree(source / "repo", task / "repo")
    stored = json.loads((source / "task.json").read_text())
    minimal = {
        k: stored[k]
        for k in ("instance_id", "problem_statement", "patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS")
    }
    minimal["instance_id"] = "mine__task-1"
    (task / "task.json").write_text(json.dumps(minimal))
    [row] = load_tasks(str(tmp_path))
    assert row["base_commit"] == stored["base_commit"]  # same files, same reproducible commit
    assert row["image"] == "pacore-swe.eval.mine__task-1:latest"
    assert row["eval_script"] == stored["eval_script"]
    make_test_spec(row)
