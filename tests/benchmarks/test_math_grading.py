"""The math grader on tricky answers, and on whole competitions' gold answers (all right) and altered ones.

Cases marked MathArena are its non-strict rules (eth-sri/matharena ``extract_and_grade``); cases marked
"MathArena is wrong" are where it errs and this grader must not."""

from __future__ import annotations

import json
import re
import sys
import threading
from pathlib import Path

import pytest

from pacore_benchmarks.math.data import DataError, load_problems
from pacore_benchmarks.math.grading import MathGrader, as_integer
from pacore_graph.coordination.answers import extract_answer, last_boxed, last_number

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "math"
GOLD_ANSWERS = json.loads((FIXTURES / "gold_answers.json").read_text())
HMMT_9 = "0,i\\sqrt{6},-i\\sqrt{6}"  # HMMT Feb 2024 #9


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
        # MathArena: with nothing boxed, the last number is the answer
        ("Final answer: 103", "103", True),
        ("**Final Answer:** 890", "890", True),
        ("The answer is 62.", "62", True),
        ("**62**", "62", True),  # a conclusion that is only the answer, in bold
        ("The answer is \\boxed{60", "60", True),  # a box never closed
        ("After 3 tries the answer is 61.", "62", False),
        # MathArena is wrong: a stated answer is the answer, not a later number (MathArena reads 3 here) ...
        ("The answer is 81, found after 3 tries.", "81", True),
        ("**Final answer:** 81 (checked 3 ways)", "81", True),
        ("Answer = $\\frac{1}{2}$, from 3 cases.", "\\frac{1}{2}", True),
        ("The answer is 1,234 after 5 steps.", "1234", True),
        # ... and with nothing stated, MathArena's last integer stays the answer
        ("After 3 tries we get 12 apples and 81 pears.", "81", True),
        ("After 3 tries we get 81 apples and 12 pears.", "81", False),
        ("The answer is not obvious: we get 7 and then 81", "81", True),
        # ... keeping its sign and decimals (MathArena reads -62 and 62.5 as 62)
        ("The answer is -62.", "62", False),
        ("The answer is 62.5", "62", False),
        # ... or the math it stands in (MathArena reads 17 here)
        ("The answer is $\\frac{24}{17}$.", "\\dfrac{24}{17}", True),
        ("**Final Answer:** $\\dfrac{24}{17}$", "\\dfrac{24}{17}", True),
        # MathArena: a list answer boxed in several boxes on the last line
        ("The roots are $\\boxed{0}$, $\\boxed{i\\sqrt{6}}$ and $\\boxed{-i\\sqrt{6}}$.", HMMT_9, True),
        ("\\boxed{\\frac{13}{40}}, \\boxed{-\\frac{13}{96}}", "-\\dfrac{13}{96}, \\dfrac{13}{40}", True),
        ("\\boxed{0}\n\\boxed{i\\sqrt{6}}\n\\boxed{-i\\sqrt{6}}", HMMT_9, False),  # only the last line counts
        ("\\boxed{3} and \\boxed{4}", "4", True),  # not a list answer: the last box
        # MathArena: exact answers are never matched by rounded decimals (relative error below 1e-10)
        ("\\boxed{0.444444}", "\\frac{4}{9}", False),
        ("\\boxed{0.363380}", "1-\\frac{2}{\\pi}", False),
        ("\\boxed{0.44444444444444444}", "\\frac{4}{9}", True),
        ("\\boxed{149.333333333}", "\\frac{448}{3}", False),  # relatively close, but 3e-10 apart
        ("\\boxed{\\frac{4}{9}, 0.444444}", "\\frac{4}{9}, \\frac{4}{9}", False),  # inside lists too
        ("\\boxed{0.5}", "\\frac{1}{2}", True),
        ("\\boxed{\\frac{1}{2}}", "0.5", True),
        # MathArena is wrong: \textbf, \text, units, 0 = 0 (its relative error divides 0 by 0)
        ("\\boxed{\\textbf{890}}", "890", True),
        ("\\boxed{\\text{20}}", "20", True),
        ("\\boxed{\\frac{448}{3}\\text{ cm}^2}", "\\frac{448}{3}", True),
        ("\\boxed{5\\text{ m}^2}", "25", False),
        ("\\boxed{0}", "0", True),
        ("\\boxed{0.0}", "0", True),
        ("\\boxed{0, i\\sqrt{6}, -i\\sqrt{6}}", HMMT_9, True),
        ("\\boxed{1 \\text{ and } 2}", "12", False),
        ("\\boxed{\\text{(C) } 70}", "70", True),  # MathArena drops words beside a number too
        ("\\boxed{2\\mathrm{i}}", "2", False),  # math-verify alone drops \mathrm{i} as a unit
        # \sqrt 10 is the root of 10
        ("\\boxed{8 \\sqrt 10}", "8\\sqrt{10}", True),
        ("\\boxed{8\\sqrt10}", "8\\sqrt{10}", True),
        ("\\boxed{8 \\sqrt 11}", "8\\sqrt{10}", False),
        ("\\boxed{8√10}", "8\\sqrt{10}", True),
    ],
)
def test_tricky_answers(grader: MathGrader, response: str, gold: str, correct: bool) -> None:
    assert grader.grade(response, gold).correct is correct


@pytest.mark.parametrize(
    ("response", "flag"),
    [
        ("I could not finish.", "no_boxed"),
        ("<think>still thinking, \\boxed{25} maybe", "no_conclusion"),
        ("", "no_conclusion"),
        ("The answer is \\boxed{2", "unboxed"),  # cut off mid-answer: its last number, 2, is graded
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
    assert last_boxed("no box") is None and last_boxed("\\boxed{1} then \\boxed{2") == "1"
    assert extract_answer("<think>\\boxed{1}</think>done: \\boxed{2}") == ("2", None)
    assert extract_answer("$\\boxed{1}$ or $\\boxed{2}$", list_answer=True) == ("1,2", None)
    assert extract_answer("$\\boxed{1}$\nor $\\boxed{2}$", list_answer=True) == ("2", None)
    assert extract_answer("so it is 7") == ("7", "unboxed")
    assert extract_answer("The answer is 81, found after 3 tries.") == ("81", "unboxed")
    assert extract_answer("Tried 3 times, got 81 and then 5") == ("5", "unboxed")  # MathArena's last integer
    assert last_number("x-5") == "5" and last_number("x = -5.") == "-5" and last_number("none") is None
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


@pytest.mark.parametrize("competition", sorted(GOLD_ANSWERS))
def test_gold_answers_grade_correct_and_altered_ones_wrong(grader: MathGrader, competition: str) -> None:
    answers = GOLD_ANSWERS[competition]
    assert len(answers) == 30
    for problem_id, answer in answers.items():
        boxed = f"Therefore the final answer is $\\boxed{{{answer}}}$."
        assert grader.grade(boxed, answer).correct, problem_id
        assert grader.grade(answer, answer).correct, problem_id  # written bare
        altered = _alter(answer)
        assert altered != answer
        assert not grader.grade(f"\\boxed{{{altered}}}", answer).correct, (problem_id, altered)
        if as_integer(answer) is not None:
            assert not grader.grade(f"\\boxed{{{int(answer) + 1}}}", answer).correct
            assert grader.grade(f"So the answer is {int(answer)}.", answer).correct, problem_id


def test_prompt_is_matharenas_current_one_per_competition(tmp_path: Path) -> None:
    """MathArena's configs since 2026-02: the newer sentence for AIME 2025 and HMMT Feb 2025, the older one for 2024."""
    current, older = (
        "Put your final answer within \\boxed{}.",
        ("Please reason step by step, and put your final answer within \\boxed{}."),
    )
    aime_range = "The answer is an integer between 0 and 999 inclusive."
    aime = load_problems(FIXTURES / "aime_2025.jsonl", limit=1)[0]
    assert aime.prompt() == f"{current}\n{aime_range}\n\n{aime.problem}"
    aime_2024 = load_problems(FIXTURES / "aime_2024.jsonl", limit=1)[0]
    assert aime_2024.prompt() == f"{older}\n{aime_range}\n\n{aime_2024.problem}"
    hmmt = load_problems(FIXTURES / "hmmt_feb_2024.jsonl", limit=1)[0]
    assert hmmt.prompt() == f"{older}\n\n{hmmt.problem}"
    path = tmp_path / "hmmt_feb_2025.jsonl"  # no competition field: the file name says it
    path.write_text(json.dumps({"id": "h1", "problem": "Compute 1+1.", "answer": "2"}) + "\n")
    assert load_problems(path)[0].prompt() == f"{current}\n\nCompute 1+1."


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
    monkeypatch.setattr("pacore_benchmarks.hub.unreachable_reason", lambda: None)  # the hub answers
    problems = load_problems("MathArena/aime_2025")
    assert [p.id for p in problems] == ["aime_2025_1", "aime_2025_2"]
    assert problems[0].instruction().endswith("between 0 and 999 inclusive.")
    monkeypatch.setitem(sys.modules, "datasets", _HubStub(None))
    with pytest.raises(DataError, match="cannot load 'MathArena/aime_2025' from the hub .*pass --data PATH"):
        load_problems("MathArena/aime_2025")
    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed
    with pytest.raises(DataError, match="needs `pip install datasets`"):
        load_problems("MathArena/aime_2025")


def test_problem_idx_rows_get_ids(tmp_path: Path) -> None:
    path = tmp_path / "hub_like.jsonl"
    path.write_text(json.dumps({"problem_idx": 3, "problem": "p", "answer": "1"}) + "\n")
    (problem,) = load_problems(path)
    assert problem.id == "hub_like_3" and problem.problem_idx == 3
