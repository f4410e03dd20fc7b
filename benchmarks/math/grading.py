"""Grading a response against a gold answer: the last ``\\boxed{}`` of its conclusion, checked by math-verify.

math-verify bounds its parsing and comparison time with ``signal.alarm``, which Python only allows in the
main thread. The grader therefore refuses to run elsewhere instead of silently running without a bound:
the runner grades from the event loop's (main) thread. Anything that cannot be graded (no boxed answer,
an unparsable one, a timeout) counts as wrong and carries a flag saying why.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from typing import Any, Literal

from pydantic import BaseModel

from pacore_graph.compaction import compact

Flag = Literal["no_conclusion", "no_boxed", "unboxed", "unparsable", "timeout"]

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
# Separators people put inside integers: 7{,}521, 7\,521, 7\!521, 7~521, 7 521.
_INT_SEPARATORS = re.compile(r"\{,\}|\\[,!;: ]|~|\s")
_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+$")
_INTEGER = re.compile(r"^-?\d+$")
_LATEX_WRAPPERS = re.compile(r"^\\(?:text|textbf|mathrm|mathbf)\{(.*)\}$")
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+")
_PROSE_WORD = re.compile(r"[A-Za-z]{2,}")
_TEXT_GROUP = re.compile(r"\\(?:text|mathrm|textbf|mbox)\s*\{[^{}]*\}")
_MAX_BARE_ANSWER = 120


class Verdict(BaseModel):
    """The grade of one response. ``flag`` says why it could not be graded normally (it is then wrong),
    or ``unboxed`` when a bare answer with no ``\\boxed{}`` was graded as is."""

    correct: bool
    extracted: str | None = None
    flag: Flag | None = None


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox``), braces balanced; None when there is none."""
    starts = [m.end() for m in _BOX_OPEN.finditer(text)]
    for start in reversed(starts):
        depth = 1
        for position in range(start, len(text)):
            char = text[position]
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    return text[start:position].strip()
        # unbalanced (cut off mid-answer): try the previous box
    return None


def _strip_math_delimiters(text: str) -> str:
    text = text.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\[", "\\]"), ("\\(", "\\)")):
        if text.startswith(left) and text.endswith(right) and len(text) >= len(left) + len(right):
            return text[len(left) : len(text) - len(right)].strip()
    return text


def _bare_answer(conclusion: str) -> str | None:
    """A conclusion that is nothing but a short math expression ("025", "$\\frac{1}{2}$") is its own answer."""
    text = _strip_math_delimiters(conclusion).rstrip(".").strip()
    if not text or len(text) > _MAX_BARE_ANSWER or "\n" in text:
        return None
    if _PROSE_WORD.search(_LATEX_COMMAND.sub("", _TEXT_GROUP.sub("", text))):
        return None
    return text


def extract_answer(response: str) -> tuple[str | None, Flag | None]:
    """The answer text a response commits to, and a flag when it is missing or not boxed.

    Only the conclusion counts: text before the last ``</think>`` is reasoning (see compaction).
    """
    conclusion = compact(response or "").conclusion
    if not conclusion.strip():
        return None, "no_conclusion"
    boxed = last_boxed(conclusion)
    if boxed is not None:
        return boxed, None
    if _BOX_OPEN.search(conclusion):
        return None, "unparsable"  # a box opened and never closed: cut off mid-answer
    bare = _bare_answer(conclusion)
    if bare is not None:
        return bare, "unboxed"
    return None, "no_boxed"


def as_integer(text: str) -> int | None:
    """``"025"``, ``"7{,}521"``, ``"7,521"``, ``"\\text{25}"`` -> int; anything else -> None."""
    text = _strip_math_delimiters(text)
    wrapped = _LATEX_WRAPPERS.match(text)
    if wrapped:
        text = wrapped.group(1)
    text = _INT_SEPARATORS.sub("", text).rstrip(".")
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    return int(text) if _INTEGER.match(text) else None


def _numbers_disagree(gold: list[Any], candidate: list[Any]) -> bool:
    """A second look when math-verify says "equal" to two plain numbers.

    math-verify compares exact numbers by ``(a - b).evalf(chop=True) == 0``, which chops differences that
    are small next to 1 or huge next to the precision: it calls 4^2024/C(4048,2024) - 2 equal to
    5^2024/C(4048,2024) - 2, and 1/2^100 equal to 2/2^100. Both sides are evaluated to 50 digits here and
    compared relatively: exact forms must agree to 12 digits; with a decimal on either side, math-verify's
    own 6-decimal rounding stands (1/3 = 0.333333).
    """
    import sympy  # noqa: PLC0415

    gold_expr = next((g for g in gold if isinstance(g, sympy.Expr)), None)
    candidate_expr = next((c for c in candidate if isinstance(c, sympy.Expr)), None)
    if gold_expr is None or candidate_expr is None:
        return False
    try:
        if not (gold_expr.is_number and candidate_expr.is_number):
            return False
        exact = not (gold_expr.has(sympy.Float) or candidate_expr.has(sympy.Float))
        a = complex(sympy.N(gold_expr, 50))
        b = complex(sympy.N(candidate_expr, 50))
    except (TypeError, ValueError, OverflowError, ArithmeticError):
        return False
    if not all(map(math.isfinite, (a.real, a.imag, b.real, b.imag))):
        return False
    if exact:
        return abs(a - b) > 1e-12 * max(abs(a), abs(b))
    return abs(a - b) > 1e-6 * max(1.0, abs(a))


def _squeeze(text: str) -> str:
    return re.sub(r"\s+", "", _strip_math_delimiters(text))


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
        gold_int = as_integer(gold)
        candidate_int = as_integer(candidate)
        if gold_int is not None and candidate_int is not None:
            return gold_int == candidate_int
        if _squeeze(gold) == _squeeze(candidate):
            return True
        return self._verify(gold, candidate)[0]

    def _verify(self, gold: str, candidate: str) -> tuple[bool, Flag | None]:
        from math_verify import verify  # noqa: PLC0415
        from math_verify.errors import TimeoutException  # noqa: PLC0415

        gold_parsed, _ = self.parse(gold)
        parsed, flag = self.parse(candidate)
        if flag is not None:
            return False, flag
        self._require_main_thread()
        try:
            ok = verify(gold_parsed, parsed, timeout_seconds=self.verify_timeout, raise_on_error=True)
        except TimeoutException:
            return False, "timeout"
        except Exception:  # noqa: BLE001
            return False, "unparsable"
        if ok and self._second_look_disagrees(gold_parsed, parsed):
            return False, None
        return bool(ok), None

    def _second_look_disagrees(self, gold: list[Any], candidate: list[Any]) -> bool:
        """``_numbers_disagree`` under the same time bound; when it runs out, math-verify's "equal" stands."""
        from math_verify.errors import TimeoutException  # noqa: PLC0415
        from math_verify.utils import timeout  # noqa: PLC0415

        try:
            return timeout(self.verify_timeout)(_numbers_disagree)(gold, candidate)
        except TimeoutException:
            return False

    def grade_answer(self, answer: str | None, gold: str, flag: Flag | None = None) -> Verdict:
        """Grade an extracted answer (None: nothing to grade)."""
        if answer is None:
            return Verdict(correct=False, extracted=None, flag=flag)
        if _squeeze(answer) == _squeeze(gold) and answer.strip():
            return Verdict(correct=True, extracted=answer, flag=flag)  # even when math-verify cannot parse it
        gold_int = as_integer(gold)
        answer_int = as_integer(answer)
        if gold_int is not None and answer_int is not None:
            return Verdict(correct=gold_int == answer_int, extracted=answer, flag=flag)
        ok, verify_flag = self._verify(gold, answer)
        return Verdict(correct=ok, extracted=answer, flag=verify_flag or flag)

    def grade(self, response: str, gold: str) -> Verdict:
        """Grade a whole response: its conclusion's last boxed answer against the gold."""
        answer, flag = extract_answer(response)
        return self.grade_answer(answer, gold, flag)
