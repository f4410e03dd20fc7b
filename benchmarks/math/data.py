"""Competition math problems (AIME, HMMT) from a local .jsonl file or a MathArena hub name.

The prompt is MathArena's: the competition's instruction, a blank line, then the problem. The
instruction is the one in the competition's current MathArena config (eth-sri/matharena,
``configs/competitions``; read at e927660, May 2026). Since 2026-02-05 (commit e629578) AIME 2025,
HMMT Feb 2025 and the later final-answer competitions say "Put your final answer within \\boxed{}.";
AIME 2024 and HMMT Feb 2024 keep the older "Please reason step by step, ..." sentence. AIME adds the
integer range. A competition MathArena does not list gets the current sentence.

A file may also hold PaCoRe-Train rows (``conversation`` + ``ground_truth``, see ``train_format.py``): the
conversation is then asked as it is, the ground truth is the gold answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, convert_to_messages
from pydantic import BaseModel, Field

OLDER_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
CURRENT_INSTRUCTION = "Put your final answer within \\boxed{}."
AIME_RANGE = "The answer is an integer between 0 and 999 inclusive."
ROW_FIELDS = "JSON lines with id, problem, answer, as in MathArena's data, or PaCoRe-Train rows"
# Competition name prefixes (MathArena's config names; the longest matching prefix wins).
INSTRUCTIONS = {
    "aime": f"{CURRENT_INSTRUCTION}\n{AIME_RANGE}",
    "aime_2024": f"{OLDER_INSTRUCTION}\n{AIME_RANGE}",
    "hmmt_feb_2024": OLDER_INSTRUCTION,
    "cmimc_2025": f"{CURRENT_INSTRUCTION} Thus, format your final answer as follows:\n\n### Final answer\n\n"
    "The final answer is \\boxed{your final answer}.",
}


def instruction_for(competition: str) -> str:
    """MathArena's current instruction for a competition such as ``aime_2025_I`` or ``hmmt_feb_2024``."""
    name = competition.lower()
    matches = [prefix for prefix in INSTRUCTIONS if name.startswith(prefix)]
    return INSTRUCTIONS[max(matches, key=len)] if matches else CURRENT_INSTRUCTION


class DataError(ValueError):
    """The dataset cannot be used; the message names the file, row and field."""


class Problem(BaseModel):
    """One problem with its gold answer (kept as text: AIME golds keep leading zeros, HMMT's are LaTeX)."""

    id: str
    problem: str
    answer: str
    competition: str = ""
    problem_idx: int | None = None
    extra: dict[str, Any] = Field(default_factory=dict[str, Any])
    conversation: list[dict[str, str]] | None = Field(
        None, description="a PaCoRe-Train row's messages (role, content), asked as they are; None: MathArena's prompt"
    )

    def instruction(self) -> str:
        return instruction_for(self.competition or self.id)

    def prompt(self) -> str:
        """The user message, exactly as MathArena builds it: instruction, blank line, problem (for a
        PaCoRe-Train row: its last user message)."""
        if self.conversation is not None:
            return self.problem
        return f"{self.instruction()}\n\n{self.problem}"

    def asked(self) -> list[dict[str, str]]:
        """The conversation the model is asked, as role/content dicts: PaCoRe-Train's ``conversation``."""
        return self.conversation if self.conversation is not None else [{"role": "user", "content": self.prompt()}]

    def messages(self) -> list[BaseMessage]:
        """What the model is asked, as LangChain messages; PaCoRe wraps only the last user message."""
        return convert_to_messages(self.asked())

    def asked_text(self) -> str:
        """The text a pool's prompt digest is made of: the prompt, or the whole conversation when it holds
        more than the user's one message (a system message, earlier turns)."""
        asked = self.asked()
        return self.prompt() if len(asked) == 1 else json.dumps(asked, ensure_ascii=False, sort_keys=True)


def _problem_from_row(row: object, where: str, default_competition: str, number: int) -> Problem:
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
    if "conversation" in row:
        from pacore_benchmarks.math.train_format import problem_from_train_row  # noqa: PLC0415 - it imports Problem

        return problem_from_train_row(row, where, f"{default_competition}_{number}")
    missing = [name for name in ("problem", "answer") if name not in row]
    if "id" not in row and "problem_idx" not in row:
        missing.append("id (or problem_idx)")
    if missing:
        raise DataError(f"{where}: row is missing field(s) {', '.join(missing)}")
    problem = row["problem"]
    if not isinstance(problem, str) or not problem.strip():
        raise DataError(f"{where}: field 'problem' is empty")
    answer = row["answer"]
    if answer is None or not str(answer).strip():
        raise DataError(f"{where}: field 'answer' is empty")
    competition = str(row.get("competition") or default_competition)
    problem_idx = row.get("problem_idx")
    problem_id = str(row["id"]) if "id" in row else f"{competition}_{problem_idx}"
    known = {"id", "problem", "answer", "competition", "problem_idx"}
    return Problem(
        id=problem_id,
        problem=problem,
        answer=str(answer).strip(),
        competition=competition,
        problem_idx=int(problem_idx) if isinstance(problem_idx, int | str) and str(problem_idx).isdigit() else None,
        extra={k: v for k, v in row.items() if k not in known and _jsonable(v)},
    )


def _jsonable(value: object) -> bool:
    return isinstance(value, str | int | float | bool | list | dict) or value is None


def _check_unique(problems: list[Problem], source: str) -> list[Problem]:
    seen: set[str] = set()
    for problem in problems:
        if problem.id in seen:
            raise DataError(f"{source}: id {problem.id!r} appears more than once")
        seen.add(problem.id)
    if not problems:
        raise DataError(f"{source}: no problems in it")
    return problems


def read_json_rows(path: Path, what: str) -> tuple[str, list[tuple[int, object]]]:
    """The rows of JSON lines, or of one JSON list: ("line" or "item", [(number, row)]); invalid JSON is a
    DataError naming the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read {what} {path}: {exc}") from exc
    if text.lstrip().startswith("["):
        try:
            return "item", list(enumerate(json.loads(text), start=1))
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: not valid JSON ({exc.msg})") from None
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
    return "line", rows


def read_jsonl(path: Path) -> list[Problem]:
    """Read and validate every row of JSON lines, or of one JSON list (as PaCoRe-Train-8k is described: a
    ``list[dict]``); the first bad row stops the load with its line (or item) number."""
    kind, rows = read_json_rows(path, "dataset")
    problems = [
        _problem_from_row(row, f"{path}:{number}" if kind == "line" else f"{path} item {number}", path.stem, n)
        for n, (number, row) in enumerate(rows)
    ]
    return _check_unique(problems, str(path))


def read_hub(name: str) -> list[Problem]:
    """A MathArena dataset from the Hugging Face hub (needs `datasets` and a network; offline it fails at once)."""
    from pacore_benchmarks.hub import load_from_hub  # noqa: PLC0415

    try:
        rows = load_from_hub(name, "train", ROW_FIELDS, "math/aime_2025.jsonl").to_list()
    except ValueError as exc:
        raise DataError(str(exc)) from exc.__cause__
    competition = name.rsplit("/", 1)[-1]
    problems = [_problem_from_row(row, f"{name} row {i}", competition, i) for i, row in enumerate(rows)]
    return _check_unique(sorted(problems, key=lambda p: (p.problem_idx is None, p.problem_idx or 0)), name)


def load_problems(source: str | Path, limit: int | None = None) -> list[Problem]:
    """Problems from a .jsonl path, or a hub name such as ``MathArena/aime_2025`` when no such file exists."""
    if limit is not None and limit < 1:
        raise DataError(f"--limit must be at least 1, got {limit}")
    path = Path(source)
    if path.exists():
        if path.is_dir():
            raise DataError(f"{path} is a directory; pass one .jsonl file")
        problems = read_jsonl(path)
    elif "/" in str(source) and not str(source).endswith((".jsonl", ".json")) and str(source).count("/") == 1:
        problems = read_hub(str(source))
    else:
        raise DataError(f"dataset file {path} does not exist")
    return problems[:limit] if limit else problems
