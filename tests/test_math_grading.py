"""The math grader on tricky answers, and on whole competitions' gold answers (all right) and altered ones."""

from __future__ import annotations

import json
import re
import sys
import threading
from pathlib import Path

import pytest

from pacore_benchmarks.math.data import DataError, load_problems
from pacore_benchmarks.math.grading import MathGrader, as_integer, extract_answer, last_boxed

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "math"
COMPETITIONS = ["aime_2024", "aime_2025", "hmmt_feb_2024"]


@pytest.fixture(scope="module")
def grader() -> MathGrader:
    return MathGrader()


@pytest.mark.parametrize(
    ("response", "gold", "correct"),
    [
        # AIME keeps leading zeros in the gold; integers compare as integers
        ("so the answer is $\\boxed{25}$.", "025", True),
        ("\\boxed{025}", "025", True),
        ("\\boxed{026}", "025", False),
        ("\\boxed{7{,}521}", "7521", True),
        ("\\boxed{7,521}", "7521", True),
        ("\\boxed{184\\,320}", "184320", True),  # math-verify alone reads this as 184+320
        ("\\boxed{\\text{70}}", "70", True),
        # fractions: \frac, \dfrac, a/b
        ("\\boxed{\\frac{24}{17}}", "\\dfrac{24}{17}", True),
        ("\\boxed{24/17}", "\\dfrac{24}{17}", True),
        ("\\boxed{\\dfrac{24}{17}}", "\\frac{24}{17}", True),
        ("\\boxed{\\frac{17}{24}}", "\\dfrac{24}{17}", False),
        # sets of answers, in any order; a subset is wrong
        ("\\boxed{\\frac{13}{40}, -\\frac{13}{96}}", "-\\dfrac{13}{96}, \\dfrac{13}{40}", True),
        ("\\boxed{\\frac{13}{40}}", "-\\dfrac{13}{96}, \\dfrac{13}{40}", False),
        ("\\boxed{0, \\pm i\\sqrt{6}}", "0,i\\sqrt{6},-i\\sqrt{6}", True),
        ("\\boxed{\\{2, 1\\}}", "\\{1,2\\}", True),
        # tuples keep their order
        ("\\boxed{(1, 2)}", "(1,2)", True),
        ("\\boxed{(2, 1)}", "(1,2)", False),
        # factorials, roots, binomials, equal forms
        ("\\boxed{120}", "5!", True),
        ("\\boxed{5!}", "120", True),
        ("\\boxed{128-64\\sqrt{3}}", "64(2-\\sqrt{3})", True),
        ("\\boxed{\\sqrt{38}-4}", "\\sqrt{38}-3", False),
        ("\\boxed{2^{-9}}", "\\dfrac{1}{512}", True),
        # math-verify's own check chops huge differences to 0; the grader's second look does not
        ("\\boxed{\\frac{5^{2024}}{\\binom{4048}{2024}}-2}", "\\dfrac{4^{2024}}{\\binom{4048}{2024}}-2", False),
        ("\\boxed{\\frac{4^{2024}}{\\binom{4048}{2024}}-2}", "\\dfrac{4^{2024}}{\\binom{4048}{2024}}-2", True),
        ("\\boxed{\\frac{2}{2^{100}}}", "\\dfrac{1}{2^{100}}", False),  # tiny but 100% apart
        ("\\boxed{2^{-100}}", "\\dfrac{1}{2^{100}}", True),
        ("\\boxed{\\text{Alice}}", "\\text{Alice}", True),
        ("\\text{Alice}", "\\text{Alice}", True),  # written bare
        ("\\boxed{\\text{Bob}}", "\\text{Alice}", False),
        ("\\boxed{[1, 2)}", "[1, 2)", True),
        ("\\boxed{(1, 2]}", "[1, 2)", False),
        ("\\boxed{30^\\circ}", "30^\\circ", True),
        # the LAST box of the CONCLUSION counts; reasoning before </think> never does
        ("first \\boxed{3} then corrected: \\boxed{4}", "4", True),
        ("first \\boxed{4} then corrected: \\boxed{3}", "4", False),
        ("<think>maybe \\boxed{4}</think>The answer is \\boxed{3}.", "4", False),
        ("<think>maybe \\boxed{3}</think>The answer is \\boxed{4}.", "4", True),
        ("\\boxed{\\boxed{4}}", "4", True),
    ],
)
def test_tricky_answers(grader: MathGrader, response: str, gold: str, correct: bool) -> None:
    assert grader.grade(response, gold).correct is correct


@pytest.mark.parametrize(
    ("response", "flag"),
    [
        ("I think the answer is 25.", "no_boxed"),
        ("<think>still thinking, \\boxed{25} maybe", "no_conclusion"),
        ("", "no_conclusion"),
        ("The answer is \\boxed{2", "unparsable"),  # cut off mid-answer
        ("\\boxed{}", "unparsable"),
    ],
)
def test_ungradable_output_is_wrong_and_flagged(grader: MathGrader, response: str, flag: str) -> None:
    verdict = grader.grade(response, "25")
    assert verdict.correct is False
    assert verdict.flag == flag


def test_bare_answer_is_graded_but_marked_unboxed(grader: MathGrader) -> None:
    verdict = grader.grade("$\\frac{24}{17}$", "\\dfrac{24}{17}")
    assert verdict.correct and verdict.flag == "unboxed"
    assert grader.grade("025", "25").correct


def test_extraction_helpers() -> None:
    assert last_boxed("a \\boxed{\\frac{1}{2}} b \\fbox{x^{2}}") == "x^{2}"
    assert last_boxed("no box") is None
    assert extract_answer("<think>\\boxed{1}</think>done: \\boxed{2}") == ("2", None)
    assert as_integer("025") == 25 and as_integer("-7") == -7 and as_integer("1/2") is None
    assert as_integer("1,234,567") == 1234567 and as_integer("12,34") is None


def test_grading_refuses_other_threads(grader: MathGrader) -> None:
    """signal.alarm only works in the main thread: the grader says so instead of running unbounded."""
    errors: list[BaseException] = []

    def work() -> None:
        try:
            MathGrader().grade("\\boxed{\\frac{1}{3}}", "\\dfrac{2}{6}")
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert errors and "main thread" in str(errors[0])


def _alter(answer: str) -> str:
    """Change one digit (the first) of a gold answer: always a different value."""
    return re.sub(r"\d", lambda m: str((int(m.group()) + 1) % 10), answer, count=1)


@pytest.mark.parametrize("competition", COMPETITIONS)
def test_gold_answers_grade_correct_and_altered_ones_wrong(grader: MathGrader, competition: str) -> None:
    problems = load_problems(DATA / f"{competition}.jsonl")
    assert len(problems) == 30
    for problem in problems:
        boxed = f"Therefore the final answer is $\\boxed{{{problem.answer}}}$."
        assert grader.grade(boxed, problem.answer).correct, problem.id
        assert grader.grade(problem.answer, problem.answer).correct, problem.id  # written bare
        altered = _alter(problem.answer)
        assert altered != problem.answer
        assert not grader.grade(f"\\boxed{{{altered}}}", problem.answer).correct, (problem.id, altered)
        if as_integer(problem.answer) is not None:
            assert not grader.grade(f"\\boxed{{{int(problem.answer) + 1}}}", problem.answer).correct


def test_prompt_is_matharenas(tmp_path: Path) -> None:
    aime = load_problems(DATA / "aime_2025.jsonl", limit=1)[0]
    assert aime.prompt() == (
        "Please reason step by step, and put your final answer within \\boxed{}.\n"
        "The answer is an integer between 0 and 999 inclusive.\n\n" + aime.problem
    )
    hmmt = load_problems(DATA / "hmmt_feb_2024.jsonl", limit=1)[0]
    assert hmmt.prompt() == "Please reason step by step, and put your final answer within \\boxed{}.\n\n" + hmmt.problem


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"id": "a", "problem": "p"}\n', "missing field(s) answer"),
        ('{"id": "a", "problem": "  ", "answer": "1"}\n', "'problem' is empty"),
        ('{"id": "a", "problem": "p", "answer": "1"}\n{"id": "a", "problem": "q", "answer": "2"}\n', "more than once"),
        ('{"id": "a", "problem": "p", "answer": "1"}\n{not json\n', ":2: not valid JSON"),
        ("", "no problems"),
    ],
)
def test_bad_datasets_get_one_clear_message(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(DataError, match=re.escape(message)):
        load_problems(path)


def test_missing_dataset(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        load_problems(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match="is a directory"):
        load_problems(tmp_path)


class _HubStub:
    """Stands in for `datasets`: MathArena's hub rows carry problem_idx, problem and answer."""

    def __init__(self, rows: list[dict] | None):
        self.rows = rows

    def load_dataset(self, name: str, split: str):
        if self.rows is None:
            raise ConnectionError(f"Couldn't reach '{name}' on the Hub")
        return type("Table", (), {"to_list": lambda _self: list(self.rows)})()


def test_hub_names_load_through_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"problem_idx": i, "problem": f"p{i}", "answer": str(i)} for i in (2, 1)]
    monkeypatch.setitem(sys.modules, "datasets", _HubStub(rows))
    problems = load_problems("MathArena/aime_2025")
    assert [p.id for p in problems] == ["aime_2025_1", "aime_2025_2"] and problems[0].is_aime
    monkeypatch.setitem(sys.modules, "datasets", _HubStub(None))
    with pytest.raises(DataError, match="cannot load 'MathArena/aime_2025' from the hub .*pass a .jsonl path"):
        load_problems("MathArena/aime_2025")
    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed
    with pytest.raises(DataError, match="needs the `datasets` package"):
        load_problems("MathArena/aime_2025")


def test_problem_idx_rows_get_ids(tmp_path: Path) -> None:
    path = tmp_path / "hub_like.jsonl"
    path.write_text(json.dumps({"problem_idx": 3, "problem": "p", "answer": "1"}) + "\n")
    (problem,) = load_problems(path)
    assert problem.id == "hub_like_3" and problem.problem_idx == 3
