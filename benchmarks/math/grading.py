"""Grading a response against a gold answer, by MathArena's non-strict rules where they are right.

MathArena (eth-sri/matharena, ``extract_and_grade`` with ``strict_parsing: false``, as its AIME and HMMT
configs run it) reads the answer from the final message: its last ``\\boxed{}``; when the gold answer is a
list (it has a comma) and several boxes are written, all boxes on the last line that has one, joined by
commas; when no box is complete, the last integer of the message. A decimal matches an exact answer
only within an absolute and relative error of 1e-10, so ``0.444444`` is not ``4/9``.

Where MathArena is wrong, this grader stays right: ``\\textbf{890}`` and ``\\text{20}`` are numbers, a
unit in ``\\text{}`` after the answer is not part of it (MathArena reads ``\\frac{448}{3}\\text{ cm}^2``
as 448/9), ``0`` equals ``0`` (MathArena divides 0 by 0 and so fails every answer containing 0),
``\\sqrt 10`` is the root of 10, and the last number of an unboxed message keeps its sign and decimals
(MathArena reads ``-5`` as 5 and ``3.5`` as 5) and brings the math span it stands in (``The answer is
$\\frac{24}{17}$.``: MathArena reads 17). A conclusion that is nothing but a short expression is its
own answer, and an answer the message states is that answer (``The answer is 81, found after 3 tries.``:
MathArena reads 3); with no box and nothing stated, the last number is, as in MathArena.

math-verify bounds its parsing and comparison time with ``signal.alarm``, which Python only allows in the
main thread. The grader therefore refuses to run elsewhere instead of silently running without a bound:
the runner grades from the event loop's (main) thread. Anything that cannot be graded (no answer, an
unparsable one, a timeout) counts as wrong and carries a flag saying why.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import logging
import math
import re
import sys
import threading
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel

from pacore_graph.coordination import extract_answer
from pacore_graph.extend import TEXT_GROUP, strip_math_delimiters
from pacore_graph.extend import AnswerFlag as Flag

# Separators people put inside integers: 7{,}521, 7\,521, 7\!521, 7~521, 7 521.
_INT_SEPARATORS = re.compile(r"\{,\}|\\[,!;: ]|~|\s")
_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+$")
_INTEGER = re.compile(r"^-?\d+$")
_DECIMAL = re.compile(r"-?\d*\.\d+")
_CONJUNCTION = re.compile(r"^\s*(?:and|or)\s*$", re.IGNORECASE)
# A unit after the answer: \text{ cm}^2, \,\mathrm{km}, \text{ degrees}.
_UNIT = re.compile(
    r"(?:\\[,;: ]|~|\s)*(?:\\(?:text|mbox)\s*\{\s*[A-Za-z]|\\mathrm\s*\{\s*[A-Za-z]{2})[A-Za-z\s.]*\}"
    r"(?:\^\{?[23]\}?)?[\s.]*$"
)
_SQRT_DIGITS = re.compile(r"\\sqrt\s*(\d+)")  # \sqrt 10 and \sqrt10 mean the root of 10
# math-verify rounds floats to this many decimals before comparing them (its default, 6, takes 0.444444
# for 4/9); MathArena's relative-error rule decides single numbers, this bounds numbers inside lists.
_FLOAT_ROUNDING = 10
_DECIMAL_ERROR = 1e-10


class Verdict(BaseModel):
    """The grade of one response. ``flag`` says why it could not be graded normally (it is then wrong),
    or ``unboxed`` when an answer with no ``\\boxed{}`` was graded (the whole conclusion or its last number)."""

    correct: bool
    extracted: str | None = None
    flag: Flag | None = None


def _text_group(match: re.Match[str]) -> str:
    """``\\text{20}`` is 20, ``\\text{ and }`` a comma, ``\\mathrm{i}`` i; words beside a number
    (``\\text{(C) } 70``) go, as in MathArena; a text answer (``\\text{Alice}``) stays."""
    content = match.group(1)
    if not re.search(r"[A-Za-z]", content):
        return content
    if _CONJUNCTION.match(content):
        return ","
    if not match.group(0).startswith(("\\text", "\\mbox")):  # \mathrm{i} is i (math-verify drops it as a unit)
        return content if len(content.strip()) == 1 else match.group(0)
    outside = match.string[: match.start()] + match.string[match.end() :]
    return " " if re.search(r"\d", TEXT_GROUP.sub("", outside)) else match.group(0)


def normalize_answer(answer: str) -> str:
    """The forms MathArena's parser accepts, made readable to math-verify (see the module docstring)."""
    answer = _SQRT_DIGITS.sub(r"\\sqrt{\1}", answer)
    unit = _UNIT.search(answer)
    if unit and re.search(r"\d", answer[: unit.start()]):
        answer = answer[: unit.start()]
    return TEXT_GROUP.sub(_text_group, answer).strip()


def as_integer(text: str) -> int | None:
    """``"025"``, ``"7{,}521"``, ``"7,521"``, ``"\\text{25}"`` -> int; anything else -> None."""
    text = _INT_SEPARATORS.sub("", normalize_answer(strip_math_delimiters(text))).rstrip(".")
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    return int(text) if _INTEGER.match(text) else None


def _number(text: str, parsed: list[Any]) -> Any:
    """The value of one answer as a sympy number (a decimal literal exactly: 0.1 is 1/10), else None."""
    import sympy  # noqa: PLC0415

    if _DECIMAL.fullmatch(strip_math_delimiters(text)):
        return sympy.Rational(strip_math_delimiters(text))
    expr = next((p for p in parsed if isinstance(p, sympy.Expr)), None)
    return expr if expr is not None and expr.is_number else None


def plain_numbers(gold: str, gold_parsed: list[Any], candidate: str, parsed: list[Any]) -> NumberPair | None:
    """Both answers' values to 50 digits, their difference, and whether both are exact forms (no decimal);
    None unless both are plain numbers."""
    import sympy  # noqa: PLC0415

    a, b = _number(gold, gold_parsed), _number(candidate, parsed)
    if a is None or b is None:
        return None
    exact = not any(_DECIMAL.fullmatch(strip_math_delimiters(t)) for t in (gold, candidate)) and not (
        a.has(sympy.Float) or b.has(sympy.Float)
    )
    try:
        values = [complex(sympy.N(x, 50)) for x in (a, b, a - b)]
    except (TypeError, ValueError, OverflowError, ArithmeticError):
        return None
    if not all(math.isfinite(part) for value in values for part in (value.real, value.imag)):
        return None
    return NumberPair(abs(values[0]), abs(values[1]), abs(values[2]), exact)


class NumberPair(NamedTuple):
    gold: float  # magnitudes
    candidate: float
    difference: float
    exact: bool


def numbers_equal(pair: NumberPair) -> bool:
    """Exact forms must agree to 12 digits relatively (math-verify's own check chops differences that are
    small next to 1 or huge next to its precision: it calls 4^2024/C(4048,2024) - 2 equal to
    5^2024/C(4048,2024) - 2, and 1/2^100 equal to 2/2^100). With a decimal on either side, MathArena's
    rule: absolute and relative error below 1e-10, so 0.444444 is not 4/9; but 0 equals 0.0."""
    scale = max(pair.gold, pair.candidate)
    if pair.exact:
        return pair.difference <= 1e-12 * scale
    return pair.difference == 0 or (pair.difference < _DECIMAL_ERROR and pair.difference < _DECIMAL_ERROR * scale)


def _squeeze(text: str) -> str:
    return re.sub(r"\s+", "", strip_math_delimiters(text))


def _wrap(latex: str) -> str:
    """math-verify finds math inside ``$...$``: a bare gold such as ``\\dfrac{24}{17}`` needs wrapping."""
    latex = latex.strip()
    return latex if latex.startswith("$") else f"${latex}$"


class MathGrader:
    """math-verify with its time bounds on, parse results cached (gold and pooled answers repeat a lot)."""

    def __init__(self, parse_timeout: int = 5, verify_timeout: int = 5):
        try:
            import math_verify  # noqa: F401, PLC0415 - checked early for a clear message
        except ModuleNotFoundError:
            raise RuntimeError(
                "math grading needs math-verify: pip install 'math-verify>=0.7' (or the [bench] extra)"
            ) from None
        self.parse_timeout = parse_timeout
        self.verify_timeout = verify_timeout
        self._parsed: dict[str, tuple[list[Any], Flag | None]] = {}
        # math-verify logs every timeout at WARNING; the flag on the verdict already says it.
        logging.getLogger("math_verify").setLevel(logging.ERROR)

    @staticmethod
    def _require_main_thread() -> None:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError(
                "math-verify bounds its time with signal.alarm, which only works in the main thread: "
                "grade from the main thread (the event loop's) or in a process pool"
            )

    def parse(self, latex: str) -> tuple[list[Any], Flag | None]:
        """Parsed candidates of one answer (math-verify's list: sympy object, then the raw string)."""
        from math_verify import parse  # noqa: PLC0415
        from math_verify.errors import TimeoutException  # noqa: PLC0415

        if latex in self._parsed:
            return self._parsed[latex]
        self._require_main_thread()
        flag: Flag | None = None
        try:
            parsed = parse(_wrap(latex), parsing_timeout=self.parse_timeout, raise_on_error=True)
        except TimeoutException:
            parsed, flag = [], "timeout"
        except Exception:  # noqa: BLE001 - a malformed answer is a wrong answer, never a crash
            parsed, flag = [], "unparsable"
        if not parsed and flag is None:
            flag = "unparsable"
        self._parsed[latex] = (parsed, flag)
        return parsed, flag

    def equivalent(self, gold: str, candidate: str) -> bool:
        """Whether ``candidate`` is the same answer as ``gold`` (integers as integers, then math-verify)."""
        return self._compare(gold, candidate)[0]

    def _compare(self, gold: str, candidate: str) -> tuple[bool, Flag | None]:
        gold, candidate = normalize_answer(gold), normalize_answer(candidate)
        if _squeeze(gold) == _squeeze(candidate) and candidate.strip():
            return True, None  # even when math-verify cannot parse it
        gold_int = as_integer(gold)
        candidate_int = as_integer(candidate)
        if gold_int is not None and candidate_int is not None:
            return gold_int == candidate_int, None
        return self._verify(gold, candidate)

    def _verify(self, gold: str, candidate: str) -> tuple[bool, Flag | None]:
        """math-verify, except that two plain numbers with a decimal among them follow MathArena's rule,
        and two exact numbers it calls equal must also agree to 12 digits (see ``numbers_equal``)."""
        from math_verify import verify  # noqa: PLC0415
        from math_verify.errors import TimeoutException  # noqa: PLC0415
        from math_verify.utils import timeout  # noqa: PLC0415

        gold_parsed, _ = self.parse(gold)
        parsed, flag = self.parse(candidate)
        if flag is not None:
            return False, flag
        self._require_main_thread()
        try:
            numbers = timeout(self.verify_timeout)(plain_numbers)(gold, gold_parsed, candidate, parsed)
            if numbers is not None and not numbers.exact:
                return numbers_equal(numbers), None
            ok = verify(
                gold_parsed,
                parsed,
                float_rounding=_FLOAT_ROUNDING,
                timeout_seconds=self.verify_timeout,
                raise_on_error=True,
            )
        except TimeoutException:
            return False, "timeout"
        except Exception:  # noqa: BLE001
            return False, "unparsable"
        return bool(ok) and (numbers is None or numbers_equal(numbers)), None

    def grade_answer(self, answer: str | None, gold: str, flag: Flag | None = None) -> Verdict:
        """Grade an extracted answer (None: nothing to grade)."""
        if answer is None:
            return Verdict(correct=False, extracted=None, flag=flag)
        ok, compare_flag = self._compare(gold, answer)
        return Verdict(correct=ok, extracted=answer, flag=compare_flag or flag)

    def grade(self, response: str, gold: str) -> Verdict:
        """Grade a whole response against the gold; a gold with a comma is a list answer (as in MathArena)."""
        answer, flag = extract_answer(response, list_answer="," in gold)
        return self.grade_answer(answer, gold, flag)


@functools.cache
def grading_rules() -> str:
    """Which rules graded a verdict: a digest of the grader's source and of the answer reading it uses
    (``extract_answer``'s module), with math-verify's version.

    Verdicts are stored with the rows and never made again, so a run folder's fingerprint holds this: rows
    graded by other rules are not mixed into one score (and a pooled trajectory's verdict is made again).
    """
    try:
        verifier = importlib.metadata.version("math-verify")
    except importlib.metadata.PackageNotFoundError:
        verifier = "missing"
    sources = [Path(__file__), Path(sys.modules[extract_answer.__module__].__file__ or "")]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:12]
    return f"{digest}+math-verify-{verifier}"
