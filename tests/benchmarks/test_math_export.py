"""``pacore bench math export-train`` against a scripted OpenAI-compatible server that answers each problem
correctly on a known share of its trajectories, with reasoning in ``<think>`` or in a ``reasoning`` field
(which boxes a wrong answer, so grading it would show): rows in PaCoRe-Train's shape with the exact message
accuracy, only conclusions in ``responses``, both filters, seeded draws, loading back, and resume."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import pytest
from endpoint import is_synthesis, last_user_text
from mock_openai import MockOpenAIServer

from pacore_benchmarks.math.data import load_problems
from pacore_benchmarks.math.export import draw_message_set
from pacore_graph import PaCoReConfig
from pacore_graph.cli import main
from pacore_graph.extend import Trajectory, passed_on

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "math" / "aime_2025.jsonl"
POOL = 8
CORRECT = {"aime_2025_I_1": 3, "aime_2025_I_2": 0, "aime_2025_I_3": 6}  # of POOL trajectories
SYNTHESIS_CORRECT = {"aime_2025_I_1": 2, "aime_2025_I_3": 4}  # of 4 synthesis samples
REASONING = "SECRET reasoning: \\boxed{999}"


class ScriptedMath:
    """Per problem, the n-th first-round call answers correctly when n <= CORRECT (call order does not matter:
    the count is exact), odd calls think in ``<think>``, even ones in the ``reasoning`` field; the n-th
    synthesis call answers correctly when n <= SYNTHESIS_CORRECT."""

    def __init__(self, *, synthesis_cut: bool = False) -> None:
        self.synthesis_cut = synthesis_cut  # every synthesis thinks until the token cap: no conclusion
        self.problems = load_problems(DATA)
        self.calls: Counter = Counter()
        self.lock = threading.Lock()

    def conclusion(self, answer: str) -> str:
        return f"So the answer is $\\boxed{{{answer}}}$."

    def __call__(self, body: dict, attempt: int) -> dict:
        text = last_user_text(body)
        problem = next(p for p in self.problems if p.problem in text)
        synthesis = is_synthesis(body)
        with self.lock:
            self.calls[problem.id, synthesis] += 1
            n = self.calls[problem.id, synthesis]
        right = n <= (SYNTHESIS_CORRECT.get(problem.id, 0) if synthesis else CORRECT[problem.id])
        answer = problem.answer if right else "1"
        usage = {"prompt_tokens": 40, "completion_tokens": 30, "total_tokens": 70}
        if synthesis and self.synthesis_cut:
            return {"content": f"<think>{REASONING}", "finish_reason": "length", "usage": usage}
        if n % 2:
            return {"content": f"<think>{REASONING}</think>{self.conclusion(answer)}", "usage": usage}
        return {"content": self.conclusion(answer), "reasoning": REASONING, "usage": usage}


def _export(server: MockOpenAIServer, out: Path, *extra: str, data: Path = DATA) -> int:
    return main(
        [
            "bench",
            "math",
            "export-train",
            "--data",
            str(data),
            "--pool",
            str(POOL),
            "--base-url",
            server.base_url,
            "--output",
            str(out),
            "--no-progress",
            *extra,
        ]
    )


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_export_holds_conclusions_exact_accuracy_and_ground_truth_and_resumes(tmp_path: Path, capsys) -> None:
    script = ScriptedMath()
    out = tmp_path / "out"
    with MockOpenAIServer(script) as server:
        assert _export(server, out) == 0
        assert len(server.requests) == 3 * POOL
        rows = _rows(out / "train.jsonl")
        assert _export(server, out) == 0  # a resume redoes nothing
        assert len(server.requests) == 3 * POOL
        assert _export(server, out, "--temperature", "0.6") == 2  # other sampling: not mixed into this folder
        assert len(server.requests) == 3 * POOL
    assert _rows(out / "train.jsonl") == rows
    refused = [line for line in capsys.readouterr().err.splitlines() if "other settings" in line]
    assert len(refused) == 1 and "temperature: folder has 1.0, this run 0.6" in refused[0]
    problems = {p.id: p for p in script.problems}
    assert [row["id"] for row in rows] == list(CORRECT)
    for row in rows:
        problem = problems[row["id"]]
        assert set(row) == {"id", "conversation", "responses", "ground_truth", "message_accuracy"}
        assert row["conversation"] == [{"role": "user", "content": problem.prompt()}]
        assert row["ground_truth"] == problem.answer
        assert len(row["responses"]) == POOL
        assert row["message_accuracy"] == CORRECT[row["id"]] / POOL
        assert sorted(row["responses"]) == sorted(
            [script.conclusion(problem.answer)] * CORRECT[row["id"]]
            + [script.conclusion("1")] * (POOL - CORRECT[row["id"]])
        )  # the conclusions only: no reasoning, from <think> or from the reasoning field
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["problems"], summary["pooled"], summary["stage1"], summary["exported"]) == (3, 3, 3, 3)
    assert summary["synthesized"] is None
    assert sorted(summary["message_accuracies"]) == sorted(c / POOL for c in CORRECT.values())
    assert summary["paper"]["message_accuracy"] == [0.0, 0.375]
    assert (out / "accuracy.png").stat().st_size > 10_000


def test_message_accuracy_filter_is_strict_and_refilters_without_calls(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with MockOpenAIServer(ScriptedMath()) as server:
        assert _export(server, out, "--max-message-accuracy", "0.3") == 0  # below every share but 0
        assert [row["id"] for row in _rows(out / "train.jsonl")] == ["aime_2025_I_2"]
        assert _export(server, out, "--min-message-accuracy", "0", "--max-message-accuracy", "0.3") == 0
        assert _rows(out / "train.jsonl") == []  # strictly above 0: below that share keeps nothing
        assert _export(server, out, "--min-message-accuracy", "0", "--max-message-accuracy", "0.375") == 0
        assert _rows(out / "train.jsonl") == []  # 3/8 is not below 0.375: the paper's filter is strict
        assert _export(server, out, "--max-message-accuracy", "0.76") == 0  # above every share: keeps all
        assert len(_rows(out / "train.jsonl")) == 3
        assert _export(server, out, "--min-message-accuracy", "0", "--max-message-accuracy", "0.5") == 0
        assert [row["id"] for row in _rows(out / "train.jsonl")] == ["aime_2025_I_1"]
        assert len(server.requests) == 3 * POOL  # the pool was made once; filters only re-read it
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["stage1"], summary["exported"], summary["filters"]["message_accuracy"]) == (1, 1, [0.0, 0.5])


def test_stage_two_filters_by_synthesis_accuracy_over_seeded_recorded_draws(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = (
        "--min-message-accuracy",
        "0",
        "--max-message-accuracy",
        "1",
        "--synthesis-samples",
        "4",
        "--min-synthesis-accuracy",
        "0",
        "--max-synthesis-accuracy",
        "1",
    )
    with MockOpenAIServer(ScriptedMath()) as server:
        assert _export(server, out, *args) == 0
        synthesis_requests = [body for body in server.requests if is_synthesis(body)]
        assert len(synthesis_requests) == 2 * 4  # stage 1 dropped the problem no trajectory solved
        rows = _rows(out / "train.jsonl")
        assert _export(server, out, *args) == 0
        assert len(server.requests) == 3 * POOL + 8  # resumed: nothing made again
        assert _export(server, out, *args[:-2]) == 0  # no upper bound: the always-solved one stays
        kept = {row["id"]: row["synthesis_accuracy"] for row in _rows(out / "train.jsonl")}
        assert kept == {"aime_2025_I_1": 0.5, "aime_2025_I_3": 1.0}
    assert [row["id"] for row in rows] == ["aime_2025_I_1"]  # 2/4 is in (0, 1); 4/4 is not
    row = rows[0]
    assert row["synthesis_accuracy"] == 0.5
    assert row["synthesis"]["seed"] == 0
    for draw in row["synthesis"]["draws"]:
        assert draw["responses"] == draw_message_set(POOL, problem_id=row["id"], sample=draw["sample"], seed=0)
    assert [draw["sample"] for draw in row["synthesis"]["draws"]] == [0, 1, 2, 3]
    assert sum(draw["correct"] for draw in row["synthesis"]["draws"]) == 2
    for body in synthesis_requests:  # the operator's template over the pooled conclusions, never their reasoning
        prompt = last_user_text(body)
        assert prompt.startswith("You are given a problem and a list of reference responses.")
        assert prompt.count("Reference ") == POOL + 1 and "SECRET" not in prompt
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["stage1"], summary["synthesized"], summary["exported"]) == (2, 2, 2)
    assert sorted(summary["synthesis_accuracies"]) == [0.5, 1.0]


def test_the_export_loads_back_as_data(tmp_path: Path) -> None:
    """The exported file is a dataset: the benchmark asks its conversations and grades its ground truths,
    and an export made from it holds the same problems."""
    with MockOpenAIServer(ScriptedMath()) as server:
        assert _export(server, tmp_path / "first") == 0
        exported = tmp_path / "first" / "train.jsonl"
        problems = load_problems(exported)
        assert [p.id for p in problems] == list(CORRECT)
        assert [p.prompt() for p in problems] == [p.prompt() for p in load_problems(DATA)]
        bench = [
            "bench",
            "math",
            "--data",
            str(exported),
            "--methods",
            "single",
            "--pool",
            "2",
            "--base-url",
            server.base_url,
            "--output",
            str(tmp_path / "bench"),
            "--no-progress",
        ]
        assert main(bench) == 0
        again = tmp_path / "again"
        assert _export(server, again, data=exported) == 0
    results = _rows(tmp_path / "bench" / "results.jsonl")
    assert {(r["problem_id"], r["gold"]) for r in results} == {(p.id, p.answer) for p in problems}
    assert [(r["id"], r["ground_truth"], r["conversation"]) for r in _rows(again / "train.jsonl")] == [
        (r["id"], r["ground_truth"], r["conversation"]) for r in _rows(exported)
    ]


def test_released_format_loads_a_json_list_with_conversations(tmp_path: Path) -> None:
    """PaCoRe-Train-8k is described as a list[dict] of conversation, responses and ground_truth (ids optional;
    the reference pipeline's own input rows write ``{"answer": ...}``); a system message stays in place."""
    rows = [
        {"conversation": [{"role": "user", "content": "What is 2+3?"}], "responses": ["5", "6"], "ground_truth": "5"},
        {
            "conversation": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1/2 + 1/4?"}],
            "responses": [],
            "ground_truth": {"answer": "\\frac{3}{4}"},
        },
    ]
    path = tmp_path / "released.json"
    path.write_text(json.dumps(rows))
    first, second = load_problems(path)
    assert (first.id, first.answer, first.prompt()) == ("released_0", "5", "What is 2+3?")
    assert (second.id, second.answer) == ("released_1", "\\frac{3}{4}")
    assert [type(m).__name__ for m in second.messages()] == ["SystemMessage", "HumanMessage"]
    assert second.asked() == rows[1]["conversation"]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"conversation": [{"role": "user", "content": "q"}]}, "has no ground_truth"),
        ({"conversation": [{"role": "user", "content": "q"}], "ground_truth": ["1", "2"]}, "not a gradable math"),
        ({"conversation": [{"role": "user", "content": "q"}], "ground_truth": None}, "not a gradable math"),
        ({"conversation": [{"role": "user", "content": "q"}], "ground_truth": " "}, "ground_truth is empty"),
        (
            {"conversation": [{"role": "user", "content": "q"}], "ground_truth": '[{"input": "1", "output": "2"}]'},
            "is JSON data (test cases?)",
        ),
        ({"conversation": [{"role": "user", "content": "q"}], "ground_truth": {"tests": []}}, "not a gradable"),
        ({"conversation": [{"role": "assistant", "content": "a"}], "ground_truth": "1"}, "must end with the user"),
        ({"conversation": "q", "ground_truth": "1"}, "non-empty list of {role, content}"),
        ({"conversation": [{"role": "robot", "content": "q"}], "ground_truth": "1"}, "conversation message 1"),
    ],
)
def test_bad_rows_are_refused_in_one_line_before_a_model_starts(tmp_path: Path, capsys, row: dict, message: str):
    good = {"conversation": [{"role": "user", "content": "What is 2+3?"}], "ground_truth": "5"}
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    for action in ([], ["export-train"]):
        assert main(["bench", "math", *action, "--data", str(path), "--output", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert f"{path}:2: " in err and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()


def test_export_without_a_pool_says_what_to_pass(tmp_path: Path, capsys) -> None:
    assert (
        main(
            [
                "bench",
                "math",
                "export-train",
                "--data",
                str(DATA),
                "--output",
                str(tmp_path / "o"),
                "--model",
                "m",
                "--no-progress",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "holds no pooled trajectories of these problems: pass --pool N" in err and err.count("\n") == 1
    assert (
        main(
            [
                "bench",
                "math",
                "export-train",
                "--data",
                str(DATA),
                "--output",
                str(tmp_path / "p"),
                "--min-message-accuracy",
                "0.5",
                "--max-message-accuracy",
                "0.2",
            ]
        )
        == 2
    )
    assert "must be below --max-message-accuracy" in capsys.readouterr().err


def test_message_sets_follow_the_paper_and_are_reproducible() -> None:
    sizes = Counter(len(draw_message_set(24, problem_id="p", sample=s)) for s in range(2000))
    assert set(sizes) == set(range(16, 25))  # |M| ~ U(16, 24) from a pool of 24
    assert all(abs(count - 2000 / 9) < 0.25 * 2000 / 9 for count in sizes.values()), sizes
    drawn = draw_message_set(24, problem_id="p", sample=3, seed=1)
    assert drawn == draw_message_set(24, problem_id="p", sample=3, seed=1)
    assert drawn != draw_message_set(24, problem_id="p", sample=3)
    assert draw_message_set(5, problem_id="p", sample=0) == [0, 1, 2, 3, 4]  # capped by the pool


def test_passed_on_is_what_the_operator_passes_on() -> None:
    config = PaCoReConfig(rounds=[4])
    assert passed_on(Trajectory(content="<think>x</think>Answer: 5"), config) == "Answer: 5"
    assert passed_on(Trajectory(content="Answer: 5", reasoning="x"), config) == "Answer: 5"
    assert passed_on(Trajectory(content="<think>never closed", finish_reason="length"), config) is None
    assert passed_on(Trajectory(content="   "), config) is None
    cut = Trajectory(content="half an answer", finish_reason="length")
    assert passed_on(cut, config) == "half an answer"
    tools = Trajectory(content="", tool_calls=[{"name": "bash", "args": {"cmd": "ls"}, "id": "c1"}])
    assert passed_on(tools, config) == 'Tool call: bash({"cmd": "ls"})'


def test_a_math_runs_pool_exports_without_a_server(tmp_path: Path, capsys) -> None:
    """The pool.jsonl of `pacore bench math` is an export's pool as it is: its model and token cap are taken,
    and with nothing left to generate no server is needed (no --base-url, and none is started)."""
    with MockOpenAIServer(ScriptedMath()) as server:
        bench = [
            "bench",
            "math",
            "--data",
            str(DATA),
            "--methods",
            "single",
            "--pool",
            str(POOL),
            "--max-tokens",
            "300",
            "--base-url",
            server.base_url,
            "--output",
            str(tmp_path / "bench"),
            "--no-progress",
        ]
        assert main(bench) == 0
        made = len(server.requests)
    capsys.readouterr()
    out = tmp_path / "export"
    pool = tmp_path / "bench" / "pool.jsonl"
    assert (
        main(
            [
                "bench",
                "math",
                "export-train",
                "--data",
                str(DATA),
                "--pool-file",
                str(pool),
                "--output",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    assert made == 3 * POOL
    assert "nothing to generate" in capsys.readouterr().err
    assert {row["id"]: row["message_accuracy"] for row in _rows(out / "train.jsonl")} == {
        problem_id: correct / POOL for problem_id, correct in CORRECT.items()
    }
    fingerprint = json.loads((out / "run.json").read_text())["fingerprint"]
    assert (fingerprint["model"], fingerprint["max_tokens"]) == ("mock-model", 300)


def test_a_synthesis_without_a_conclusion_counts_wrong_and_is_not_retried(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with MockOpenAIServer(ScriptedMath(synthesis_cut=True)) as server:
        assert _export(server, out, "--synthesis-samples", "2") == 0
        made = len(server.requests)
        assert _export(server, out, "--synthesis-samples", "2") == 0
        assert len(server.requests) == made == 3 * POOL + 3 * 2
    rows = _rows(out / "train.jsonl")
    assert [row["synthesis_accuracy"] for row in rows] == [0.0, 0.0, 0.0]
    results = _rows(out / "results.jsonl")
    assert {(r["correct"], r["flag"], r["conclusion"]) for r in results} == {(False, "no_conclusion", "")}
