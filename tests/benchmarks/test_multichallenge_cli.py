"""``pacore bench multichallenge`` bad input: one clear message each, and nothing computed is lost."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest
from multichallenge_mock import MockServer, write_data

from pacore_benchmarks.multichallenge import cli as mc_cli
from pacore_benchmarks.multichallenge.cli import cli

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "multichallenge" / "benchmark_questions.jsonl"


def run(capsys, *args: str) -> tuple[int, str]:
    code = cli(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_register_adds_the_subcommand():
    parser = argparse.ArgumentParser()
    mc_cli.register(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["multichallenge", "--limit", "4", "--rounds", "0", "--samples", "8"])
    assert args.func is mc_cli.main and args.limit == 4 and args.rounds == "0" and args.samples == 8


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rounds", "4,0"], "round 2 asks for 0 trajectories"),
        (["--rounds", "four"], "comma-separated integers"),
        (["--samples", "0"], "--samples must be at least 1"),
        (["--data", "missing/questions.jsonl"], "not found"),
        (["--axis", "memory", "--data", str(FIXTURE)], "unknown axis 'MEMORY'"),
    ],
)
def test_bad_arguments_get_one_clear_message(capsys, tmp_path, args, message):
    code, text = run(capsys, *args, "--output", str(tmp_path / "out"))
    assert code == 2 and text.startswith("pacore: error: ") and message in " ".join(text.split())
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_no_data_and_no_shared_copy_says_what_to_pass(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ../shared here, and the hub is out of reach (or `datasets` is missing)
    monkeypatch.setitem(sys.modules, "datasets", None)
    code, text = run(capsys, "--output", str(tmp_path / "out"))
    text = " ".join(text.split())
    assert code == 2
    assert "no --data given and ../shared/data/multichallenge/benchmark_questions.jsonl is not here" in text
    assert "--data PATH" in text and not (tmp_path / "out").exists()


def test_unreachable_server_stops_the_run_with_a_clear_message(capsys, tmp_path):
    data = tmp_path / "data.jsonl"
    write_data(data, 2)
    code, text = run(
        capsys, "--data", str(data), "--base-url", "http://127.0.0.1:9/v1", "--output", str(tmp_path / "o")
    )
    assert code == 1 and "cannot reach the model server at http://127.0.0.1:9/v1" in " ".join(text.split())


def test_wrong_model_name_is_named(capsys, tmp_path):
    data = tmp_path / "data.jsonl"
    write_data(data, 1)
    with MockServer() as server:
        code, text = run(
            capsys, "--data", str(data), "--base-url", server.url, "--model", "nope", "--output", str(tmp_path / "o")
        )
        assert server.calls == []
    assert code == 1 and "does not serve model 'nope'" in " ".join(text.split()) and "mock" in text


def test_resuming_into_a_folder_of_another_run_is_refused_and_keeps_its_rows(capsys, tmp_path):
    data = tmp_path / "data.jsonl"
    write_data(data, 2)
    out = tmp_path / "out"
    with MockServer() as server:
        base = ["--data", str(data), "--base-url", server.url, "--output", str(out), "--max-tokens", "16"]
        code, text = run(capsys, *base, "--rounds", "0")
        assert code == 0, text
        calls = len(server.calls)
        assert calls == 4  # 2 plain calls + 2 judge calls
        rows = (out / "results.jsonl").read_bytes()
        code, text = run(capsys, *base, "--rounds", "2")
        text = " ".join(text.split())
        assert code == 2 and "holds results made with other settings" in text
        assert "rounds: folder has [], this run [2]" in text
        assert len(server.calls) == calls and (out / "results.jsonl").read_bytes() == rows
        # More conversations later into the same folder: only the new ones run.
        write_data(data, 3)
        code, text = run(capsys, *base, "--rounds", "0")
        assert code == 0 and len(server.calls) == calls + 2
    ids = [json.loads(line)["question_id"] for line in (out / "results.jsonl").read_text().splitlines()]
    assert ids == ["q0", "q1", "q2"]


@pytest.mark.parametrize("failure", ["the judge's model is unknown", "the run raises"])
def test_the_clients_are_closed_however_the_run_ends(capsys, tmp_path, monkeypatch, failure):
    from pacore_benchmarks.multichallenge.runner import MultiChallengeRunner
    from pacore_graph.models import OpenAICompatibleChatModel

    closed: list[str] = []
    close = OpenAICompatibleChatModel.aclose

    async def recording_close(self):
        closed.append(self.model)
        await close(self)

    monkeypatch.setattr(OpenAICompatibleChatModel, "aclose", recording_close)
    data = tmp_path / "data.jsonl"
    write_data(data, 1)
    with MockServer() as server:
        args = ["--data", str(data), "--base-url", server.url, "--model", "mock", "--output", str(tmp_path / "o")]
        if failure == "the run raises":

            async def crash(self, *args, **kwargs):
                raise RuntimeError("the run crashed")

            monkeypatch.setattr(MultiChallengeRunner, "arun", crash)
            code, text = run(capsys, *args)
            assert code == 1 and "pacore: error: the run crashed" in text
            assert closed == ["mock", "mock"]  # the responder and the judge's own client
        else:
            code, text = run(capsys, *args, "--judge-base-url", server.url, "--judge-model", "nope")
            assert code == 1 and "does not serve model 'nope'" in " ".join(text.split())
            assert sorted(closed) == ["mock", "nope"]
