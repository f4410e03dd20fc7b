"""The evaluation benchmarks without the dataset hub: one line at once (not ~30 s of hub retries first), saying
what to pass instead, in the form and with the exit status every ``pacore`` command's errors have."""

from __future__ import annotations

from pathlib import Path

import pytest

from pacore_graph.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BENCHMARKS = [("math", "math/aime_2025.jsonl"), ("multichallenge", "multichallenge/benchmark_questions.jsonl")]


@pytest.mark.parametrize(("bench", "excerpt"), BENCHMARKS)
def test_offline_without_data_fails_at_once_naming_data_and_the_shipped_excerpt(
    bench, excerpt, tmp_path, monkeypatch, capsys
):
    import datasets

    def never(*args, **kwargs):
        raise AssertionError("datasets.load_dataset was called: its retries are what took ~30 s")

    monkeypatch.chdir(tmp_path)  # no ../shared beside it
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: the hub is out of reach
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(datasets, "load_dataset", never)
    code = main(["bench", bench, "--limit", "1", "--output", str(tmp_path / "out")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2  # the default source cannot be read: a refused input, before anything started
    assert lines[0].startswith("pacore: no --data given") and lines[0].endswith("from the hub")  # what it tries
    (error,) = lines[1:]
    assert error.startswith("pacore: error: ") and "the dataset hub (http://127.0.0.1:9) cannot be reached" in error
    assert "pass --data PATH" in error and f"--data {FIXTURES / excerpt}" in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("bench", "excerpt"), BENCHMARKS)
def test_both_benchmarks_report_bad_input_in_one_form(bench, excerpt, tmp_path, capsys):
    code = main(["bench", bench, "--data", str(tmp_path / "missing.jsonl"), "--output", str(tmp_path / "out")])
    (error,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and error.startswith("pacore: error: ") and "missing.jsonl" in error
