"""Reading the answer a conclusion commits to: MathArena's non-strict extraction, shared by the operator
(early stop, vote, dedup) and the math benchmark's grader.

MathArena (eth-sri/matharena, ``extract_and_grade`` with ``strict_parsing: false``, as its AIME and HMMT
configs run it) reads the answer from the final message: its last ``\\boxed{}``; when the gold answer is a
list (it has a comma) and several boxes are written, all boxes on the last line that has one, joined by
commas; when no box is complete, the last integer of the message. Where it is wrong this stays right: the
last number of an unboxed message keeps its sign and decimals (MathArena reads ``-5`` as 5 and ``3.5`` as
5) and brings the math span it stands in (``The answer is $\\frac{24}{17}$.``: MathArena reads 17); a
conclusion that is nothing but a short expression is its own answer; and an answer the message states
(``The answer is 81, found after 3 tries.``, ``Final answer: 81``) is that answer, where MathArena reads the
last integer, 3. With no box and nothing stated, the last number stays the answer, as in MathArena.

Pure text functions: no math-verify here (the operator must not need it). Comparing two answers for
equality of meaning is the grader's business (``pacore_benchmarks.math.grading``); the operator compares
:func:`answer_key` forms.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Literal

from pacore_graph.config import BUILTIN_EXTRACTORS, importable
from pacore_graph.synthesis.compaction import compact

Flag = Literal["no_conclusion", "no_boxed", "unboxed", "unparsable", "timeout"]

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
# The last number of a message: a minus sign counts when it is not a binary minus ("a-5" ends in 5).
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?!\w)")
_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+")
_PROSE_WORD = re.compile(r"[A-Za-z]{2,}")
TEXT_GROUP = re.compile(r"\\(?:text|textbf|textrm|textit|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_UNICODE = {"\u2212": "-", "\u221a": "\\sqrt", "\u03c0": "\\pi", "\u00d7": "\\cdot", "\u202f": " "}
_MAX_BARE_ANSWER = 120
# "The answer is", "Final answer:", "answer =" ... followed (after bold markers or a colon) by the answer itself.
_STATED = re.compile(r"\banswer\s*(?:is|:|=)[\s*:=]*", re.IGNORECASE)
_STATED_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?![\d.])|-?\d+(?:\.\d+)?(?!\w)")


def _closing_brace(text: str, start: int) -> int | None:
    """Index of the brace closing the one opened just before ``start``; None when it never closes."""
    depth = 1
    for position in range(start, len(text)):
        if text[position] == "{":
            depth += 1
        elif text[position] == "}":
            depth -= 1
            if depth == 0:
                return position
    return None


def boxes(text: str) -> list[tuple[int, str]]:
    """Every complete ``\\boxed{...}`` (or ``\\fbox``): (start, content), braces balanced, in order.

    A box that never closes (cut off mid-answer) is left out; a box inside another is part of the outer
    one's content, without its own ``\\boxed``.
    """
    found: list[tuple[int, str]] = []
    end_of_last = -1
    for match in _BOX_OPEN.finditer(text):
        close = None if match.start() < end_of_last else _closing_brace(text, match.end())
        if close is not None:
            found.append((match.start(), _unbox(text[match.end() : close]).strip()))
            end_of_last = close
    return found


def _unbox(content: str) -> str:
    """``\\boxed{x}`` inside a box is just x."""
    match = _BOX_OPEN.search(content)
    while match:
        close = _closing_brace(content, match.end())
        if close is None:
            break
        content = content[: match.start()] + content[match.end() : close] + content[close + 1 :]
        match = _BOX_OPEN.search(content, match.start())
    return content


def last_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}``; None when there is none."""
    found = boxes(text)
    return found[-1][1] if found else None


def _boxed_answer(text: str, found: list[tuple[int, str]], list_answer: bool) -> str:
    """The last box; for a list answer written as several boxes, all boxes on the last line with one."""
    if not list_answer or len(found) == 1:
        return found[-1][1]
    line = text.count("\n", 0, found[-1][0])
    return ",".join(content for start, content in found if text.count("\n", 0, start) == line)


def strip_math_delimiters(text: str) -> str:
    text = text.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\[", "\\]"), ("\\(", "\\)")):
        if text.startswith(left) and text.endswith(right) and len(text) >= len(left) + len(right):
            return text[len(left) : len(text) - len(right)].strip()
    return text


def _bare_answer(conclusion: str) -> str | None:
    """A conclusion that is nothing but a short math expression ("025", "$\\frac{1}{2}$", "**70**") is its own
    answer."""
    text = strip_math_delimiters(conclusion.strip().strip("*`#").strip()).rstrip(".").strip()
    if not text or len(text) > _MAX_BARE_ANSWER or "\n" in text:
        return None
    if _PROSE_WORD.search(_LATEX_COMMAND.sub("", TEXT_GROUP.sub("", text))):
        return None
    return text


def last_number(text: str) -> str | None:
    """MathArena's fallback, the last number written, but with its sign and decimals, and when it stands
    in a math span (``The answer is $\\frac{24}{17}$.``) the whole span; None when there is no number."""
    numbers = list(_NUMBER.finditer(text))
    if not numbers:
        return None
    last = numbers[-1]
    for span in _MATH_SPAN.finditer(text):
        if span.start() <= last.start() and last.end() <= span.end():
            content = next(group for group in span.groups() if group is not None).strip()
            if len(content) <= _MAX_BARE_ANSWER:
                return content
    return last.group()


def stated_answer(text: str) -> str | None:
    """The answer the text states last ("The answer is 81, ...", "**Final answer:** $\\frac{1}{2}$"): the number
    or math span right after the statement; None when no statement is followed by one."""
    for statement in reversed(list(_STATED.finditer(text))):
        rest = text[statement.end() :]
        span = _MATH_SPAN.match(rest)
        if span:
            content = next(group for group in span.groups() if group is not None).strip()
            if content and len(content) <= _MAX_BARE_ANSWER:
                return content
        number = _STATED_NUMBER.match(rest)
        if number:
            return number.group()
    return None


def extract_answer(response: str, list_answer: bool = False) -> tuple[str | None, Flag | None]:
    """The answer text a response commits to, and a flag when it is missing or not boxed.

    Only the conclusion counts: text before the last ``</think>`` is reasoning (see compaction).
    ``list_answer``: the gold is a list, so several boxes on the last line are one answer.
    """
    conclusion = compact(response or "").conclusion
    if not conclusion.strip():
        return None, "no_conclusion"
    for char, latex in _UNICODE.items():
        conclusion = conclusion.replace(char, latex)
    found = boxes(conclusion)
    if found:
        return _boxed_answer(conclusion, found, list_answer), None
    bare = None if _BOX_OPEN.search(conclusion) else _bare_answer(conclusion)
    answer = next((a for a in (bare, stated_answer(conclusion)) if a is not None), None) or last_number(conclusion)
    return (answer, "unboxed") if answer is not None else (None, "no_boxed")


# ------------------------------------------------------------------------ extractors the operator uses

AnswerExtractor = Callable[[str], "str | None"]


def boxed_answer(conclusion: str) -> str | None:
    """The ``"boxed"`` extractor: MathArena's non-strict reading (last box, else a bare answer or the last
    number), exactly what the math benchmark grades."""
    return extract_answer(conclusion)[0]


@lru_cache(maxsize=64)
def resolve_extractor(name: str) -> AnswerExtractor:
    """The extractor a config names: ``"boxed"``, ``"last_boxed"`` (only a complete box counts) or an
    importable ``"module:function"`` (see :func:`pacore_graph.config.extractor_name`)."""
    found: AnswerExtractor = importable(BUILTIN_EXTRACTORS.get(name, name))
    return found


_SPACES = re.compile(r"\s+")
_INTEGER = re.compile(r"-?\d+")


def answer_key(answer: str | None) -> str | None:
    """The form under which two extracted answers count as the same (agreement, vote, dedup).

    Math delimiters, spaces, a final period, ``\\dfrac`` against ``\\frac`` and leading zeros of an
    integer do not matter; anything subtler is the grader's business, not the operator's.
    """
    if answer is None:
        return None
    text = _SPACES.sub("", strip_math_delimiters(answer)).rstrip(".")
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    if _INTEGER.fullmatch(text):
        text = str(int(text))
    return text or None


def compared_answer(recorded: str | None, conclusion: str) -> str:
    """The answer an ``answer_extractor`` recorded, else the one read off the conclusion (:func:`boxed_answer`,
    else the conclusion's first line, lower-cased): what agreement compares, on a record or on its JSON."""
    if recorded:
        return recorded
    found = boxed_answer(conclusion)
    if found:
        return found
    first_line = next((line.strip() for line in conclusion.splitlines() if line.strip()), "")
    return " ".join(first_line.lower().split())
