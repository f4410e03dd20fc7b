"""MultiChallenge rows: load, validate, and turn into LangChain messages.

A run over 273 conversations must not die on one bad row, so every row is validated on its own and a
malformed one is reported by its id (or line number) and skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pacore_benchmarks.hub import DefaultData

AXES = ("INFERENCE_MEMORY", "INSTRUCTION_RETENTION", "SELF_COHERENCE", "RELIABLE_VERSION_EDITING")
LOCAL_PATH = Path("..") / "shared" / "data" / "multichallenge" / "benchmark_questions.jsonl"
HUB_NAME = "ScaleAI/MultiChallenge"
HUB_SPLIT = "test"
DEFAULT_DATA = DefaultData(LOCAL_PATH, HUB_NAME)  # no --data: the shared copy when it is here, else the hub


class Turn(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


class Conversation(BaseModel):
    """One MultiChallenge item; the judge sees only the final response and ``target_question``."""

    model_config = ConfigDict(frozen=True)

    question_id: str = Field(min_length=1)
    axis: str
    conversation: list[Turn] = Field(min_length=1)
    target_question: str = Field(min_length=1)
    pass_criteria: Literal["YES", "NO"]

    @field_validator("axis")
    @classmethod
    def _known_axis(cls, value: str) -> str:
        if value not in AXES:
            raise ValueError(f"unknown axis {value!r} (expected one of {', '.join(AXES)})")
        return value

    @field_validator("pass_criteria", mode="before")
    @classmethod
    def _normalise_criteria(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("conversation")
    @classmethod
    def _ends_with_user(cls, turns: list[Turn]) -> list[Turn]:
        if turns[-1].role != "user":
            raise ValueError("conversation must end with a user turn")
        return turns

    def messages(self) -> list[BaseMessage]:
        """The whole history as LangChain messages; PaCoRe wraps only the last user turn."""
        kinds = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}
        return [kinds[turn.role](content=turn.content) for turn in self.conversation]


class SkippedRow(BaseModel):
    where: str  # question id when the row has one, else "line N"
    reason: str


class Dataset(BaseModel):
    source: str
    conversations: list[Conversation]
    skipped: list[SkippedRow] = Field(default_factory=list)


class DataError(ValueError):
    """The data source as a whole cannot be read (missing file, not JSONL, hub unreachable)."""


def parse_row(raw: Mapping[str, Any]) -> Conversation:
    """Validate one row; field names are accepted in the release's UPPER case or the hub's lower case."""
    lowered = {str(key).lower(): value for key, value in raw.items()}
    return Conversation.model_validate(lowered)


def _row_label(raw: Any, line_no: int) -> str:
    if isinstance(raw, Mapping):
        for key in ("QUESTION_ID", "question_id"):
            if raw.get(key):
                return str(raw[key])
    return f"line {line_no}"


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "row"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def validate_rows(raws: Iterable[tuple[int, Any]], source: str) -> Dataset:
    conversations: list[Conversation] = []
    skipped: list[SkippedRow] = []
    seen: set[str] = set()
    for line_no, raw in raws:
        label = _row_label(raw, line_no)
        if isinstance(raw, str):  # a line that is not JSON arrives as its error message
            skipped.append(SkippedRow(where=label, reason=raw))
            continue
        if not isinstance(raw, Mapping):
            skipped.append(SkippedRow(where=label, reason="row is not a JSON object"))
            continue
        try:
            row = parse_row(raw)
        except ValidationError as exc:
            skipped.append(SkippedRow(where=label, reason=_describe(exc)))
            continue
        if row.question_id in seen:
            skipped.append(SkippedRow(where=label, reason="duplicate QUESTION_ID"))
            continue
        seen.add(row.question_id)
        conversations.append(row)
    return Dataset(source=source, conversations=conversations, skipped=skipped)


def _read_jsonl(path: Path) -> Iterable[tuple[int, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read MultiChallenge data {path}: {exc}") from exc
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield line_no, json.loads(line)
        except json.JSONDecodeError as exc:
            yield line_no, f"invalid JSON ({exc.msg})"


def _read_hub(name: str) -> Iterable[tuple[int, Any]]:
    from pacore_benchmarks.hub import load_from_hub

    try:
        table = load_from_hub(
            name, HUB_SPLIT, "a benchmark_questions.jsonl", "multichallenge/benchmark_questions.jsonl"
        )
    except ValueError as exc:
        raise DataError(str(exc)) from exc.__cause__
    for index, row in enumerate(table, start=1):
        row = dict(row)
        conv = row.get("conversation")
        if isinstance(conv, Mapping):  # `datasets` stores a sequence of structs as a struct of lists
            row["conversation"] = [
                {"role": r, "content": c} for r, c in zip(conv.get("role", []), conv.get("content", []), strict=False)
            ]
        yield index, row


def load_dataset(source: str | Path) -> Dataset:
    """Read MultiChallenge from a .jsonl path or a hub dataset name."""
    path = Path(source)
    if path.exists():
        if path.is_dir():
            raise DataError(f"{path} is a directory; pass the benchmark_questions.jsonl file")
        raws = _read_jsonl(path)
    elif path.suffix in {".jsonl", ".json"} or str(source).startswith((".", "/")):
        raise DataError(f"MultiChallenge data file not found: {path}")
    else:
        raws = _read_hub(str(source))
    dataset = validate_rows(raws, str(source))
    if not dataset.conversations and not dataset.skipped:
        raise DataError(f"{source} has no rows")
    return dataset


def select(
    conversations: list[Conversation], *, axis: str | None = None, limit: int | None = None
) -> list[Conversation]:
    """Filter by axis, then keep the first ``limit`` in file order (stable, so reruns pick the same ones)."""
    if axis is not None:
        axis = axis.strip().upper()
        if axis not in AXES:
            raise DataError(f"unknown axis {axis!r}; choose from {', '.join(AXES)}")
        conversations = [c for c in conversations if c.axis == axis]
    if limit is not None:
        conversations = conversations[: max(limit, 0)]
    return conversations
