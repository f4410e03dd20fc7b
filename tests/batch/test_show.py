"""Results people can read: the one-line reprs of results and records, and ``pacore show`` on a real run folder
(made by ``RunFolder`` over real HTTP), its plot, and its refusals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from langchain_core.messages import AIMessage

from pacore_graph import PaCoReConfig, Problem, RunFolder
from pacore_graph.models.openai_compatible import OpenAICompatibleChatModel
from pacore_graph.records import PaCoReResult, RoundRecord, TrajectoryRecord


def pacore(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pacore_graph.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_results_and_records_print_one_short_line_each():
    long = "The product is \\boxed{391}, since 17 times 23 is 391 " + "and a lot more reasoning " * 20
    kept = TrajectoryRecord(round_index=0, index=0, conclusion=long, completion_tokens=812)
    failed = TrajectoryRecord(round_index=0, index=1, error="ModelRequestError: HTTP 500 from http://x", attempts=3)
    round_ = RoundRecord(round_index=0, k=2, reference_order=[0], trajectories=[kept, failed])
    result = PaCoReResult(answer=long, rounds=[round_], message=AIMessage(content=long))
    assert repr(kept) == (
        "TrajectoryRecord(round_index=0, index=0, completion_tokens=812, "
        "conclusion='The product is \\\\boxed{391}, since 17 ti…')"
    )
    assert repr(failed) == (
        "TrajectoryRecord(round_index=0, index=1, error='ModelRequestError: HTTP 500 from http://x', attempts=3)"
    )
    assert (
        repr([round_])
        == "[RoundRecord(round_index=0, k=2, prompt_tokens=0, completion_tokens=812, failed=1, usable=1)]"
    )
    assert repr(result).startswith("PaCoReResult(answer='The product is") and repr(result).endswith(
        "rounds=[2], ttc=812, failures=1)"
    )
    assert all(len(repr(value)) <= 120 for value in (kept, failed, round_, result))
    lines = str(result).splitlines()
    assert lines[0] == long.strip() and lines[2] == "round 1: K=2, 812 tokens, 1 failed"
    assert lines[-1] == "effective TTC: 812 completion tokens over 2 calls"


async def _run_folder(path: Path, mock_server) -> None:
    """Two problems, [4] then the synthesis: three proposals of q1 answer 391 and one 400; q2's all agree."""
    drafts = {"q1": ["\\boxed{391}", "\\boxed{391}", "\\boxed{400}", "\\boxed{391}"], "q2": ["Blue."] * 4}
    seen: dict[str, int] = {"q1": 0, "q2": 0}

    def reply(body, attempt):
        text = str(body["messages"][-1]["content"])
        problem = "q1" if "17*23" in text else "q2"
        if "Reference Responses" in text:
            return {"content": "So \\boxed{391}." if problem == "q1" else "Blue."}
        seen[problem] += 1
        return {"content": drafts[problem][seen[problem] - 1]}

    with mock_server(reply) as server:
        model = OpenAICompatibleChatModel(base_url=server.base_url, model="mock-model")
        problems = [Problem("q1", "What is 17*23?"), Problem("q2", "Name a colour.")]
        try:
            async with RunFolder(path, fingerprint={"model": "mock-model", "rounds": [4]}, progress=False) as folder:
                await folder.run(model, PaCoReConfig(rounds=[4]), problems, concurrency=1)
        finally:
            await model.aclose()


async def test_pacore_show_renders_each_problem_its_rounds_agreement_and_tokens(tmp_path, mock_server):
    await _run_folder(tmp_path / "run", mock_server)
    shown = pacore("show", str(tmp_path / "run"))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[:2] == [str(tmp_path / "run"), "2 problem(s) finished (model mock-model, rounds [4])"]
    assert lines[3:7] == [
        "q1  answer: So \\boxed{391}.",
        "    round 1: K=4, 20 tokens; 3/4 agree on '391'",
        "    round 2: K=1, 5 tokens; -> '391'",
        "    effective TTC 25 completion tokens over 5 calls",
    ]
    assert lines[8:10] == ["q2  answer: Blue.", "    round 1: K=4, 20 tokens; 4/4 agree on 'blue.'"]
    assert max(map(len, lines[1:])) <= 100


async def test_pacore_show_draws_its_plot_and_leaves_a_torn_last_line_alone(tmp_path, mock_server):
    await _run_folder(tmp_path / "run", mock_server)
    results = tmp_path / "run" / "results.jsonl"
    with results.open("ab") as handle:
        handle.write(b'{"id": "q3", "answ')  # a row being written by a run beside the reader
    before = results.read_bytes()
    shown = pacore("show", str(tmp_path / "run"), "--plot", str(tmp_path / "run.png"))
    assert shown.returncode == 0, shown.stderr
    assert "2 problem(s) finished" in shown.stdout and results.read_bytes() == before
    assert (tmp_path / "run.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pacore_show_refuses_a_folder_no_run_made_in_one_line(tmp_path):
    shown = pacore("show", str(tmp_path))
    assert shown.returncode == 2 and shown.stdout == ""
    assert (
        shown.stderr
        == f"pacore: error: {tmp_path} is not a run folder (it has no run.json): give the folder a run wrote\n"
    )


def test_a_round_whose_answers_all_differ_says_so():
    from pacore_graph.batch.show import agreement

    records = [TrajectoryRecord(round_index=0, index=i, conclusion=f"\\boxed{{{i}}}") for i in range(3)]
    assert str(agreement(RoundRecord(round_index=0, k=3, trajectories=records))) == "all 3 answers differ"
