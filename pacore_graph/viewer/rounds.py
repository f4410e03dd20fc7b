"""One PaCoRe run as the page draws it: per round its trajectories (tokens, finish reason, extracted answer and
its agreement group, failures and cuts), the references the round was given in the order sent, and the messages
its trajectories were sent, rebuilt from the records.

Works on the JSON of :class:`~pacore_graph.records.RoundRecord` (``RoundRecord.model_dump()``, what a run
folder's rows keep), reading each field with a default, so that rows of older versions still show what they
have. Answers are compared as ``pacore show`` compares them
(:func:`~pacore_graph.coordination.answers.compared_answer`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from pacore_graph.config import DEFAULT_TEMPLATE
from pacore_graph.coordination.answers import compared_answer
from pacore_graph.synthesis.compaction import reference_text
from pacore_graph.synthesis.prompt import render_synthesis_prompt
from pacore_graph.viewer.rows import Json

# What a trajectory is compared by (its answer) and how it is shown in its cell; the SWE view compares patches.
AnswerOf = Callable[[Json], str]

REBUILT_NOTE = (
    "Rebuilt from the run's records: the conversation with its last user message replaced by the synthesis "
    "template over the references, in the order sent (a context-window cap or a coordination option may have "
    "shortened or annotated what the model saw)."
)


def message_text(content: Any) -> str:
    """A message's content as text (a list of content blocks joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            block if isinstance(block, str) else str(block.get("text", "")) for block in content if block is not None
        )
    return "" if content is None else str(content)


def plain_messages(messages: Any) -> list[Json] | None:
    """OpenAI-style messages as ``{"role", "content"}`` text pairs (tool calls kept), or None for none."""
    if not isinstance(messages, list) or not messages:
        return None
    plain = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        entry: Json = {"role": str(message.get("role", "")), "content": message_text(message.get("content"))}
        if message.get("tool_calls"):
            entry["tool_calls"] = message["tool_calls"]
        plain.append(entry)
    return plain


def usable(record: Json) -> bool:
    return not record.get("error") and bool(str(record.get("conclusion") or "").strip() or record.get("tool_calls"))


def math_answer(record: Json) -> str:
    """A chat trajectory's answer, as ``pacore show`` reads it."""
    return compared_answer(record.get("answer"), str(record.get("conclusion") or ""))


def agreement_groups(answers: Sequence[str | None]) -> tuple[list[str], dict[str, int]]:
    """The answers given more than once, most common first, and each one's group number (its colour)."""
    counts = Counter(answer for answer in answers if answer)
    shared = [answer for answer, count in counts.most_common() if count > 1]
    return shared, {answer: number for number, answer in enumerate(shared)}


def agreement_line(answers: Sequence[str | None]) -> str:
    """The round's agreement in words, as ``pacore show`` says it."""
    given = [answer for answer in answers if answer is not None]
    if not given:
        return "no usable answer"
    answer, votes = Counter(given).most_common(1)[0]
    if len(given) == 1:
        return f"one usable answer: {short(answer, 40)}"
    if votes == 1:
        return f"all {len(given)} answers differ"
    return f"{votes}/{len(given)} agree on {short(answer, 32)}"


def short(text: str, width: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def rounds_view(
    rounds: Sequence[Json],
    messages: list[Json] | None = None,
    *,
    template: str | None = None,
    answer_of: AnswerOf = math_answer,
    rebuild_prompts: bool = True,
) -> list[Json]:
    """Each round of a run, ready to draw (see the module's docstring). ``messages``: the conversation the run
    answered, when the folder keeps it (the prompts of later rounds are rebuilt over it); ``rebuild_prompts``
    False where every trajectory's own messages are recorded (SWE episodes)."""
    shown: list[Json] = []
    previous: dict[int, Json] = {}
    previous_order: list[int] = []
    previous_texts: list[Any] = []
    for number, round_ in enumerate(rounds):
        records = sorted(
            (t for t in round_.get("trajectories") or [] if isinstance(t, dict)), key=lambda t: t.get("index", 0)
        )
        answers = [answer_of(t) if usable(t) else None for t in records]
        groups, group_of = agreement_groups(answers)
        given = _given(previous, previous_order, previous_texts, number)
        cells = [_cell(t, answer, group_of) for t, answer in zip(records, answers, strict=True)]
        entry: Json = {
            "index": round_.get("round_index", number),
            "k": round_.get("k", len(records)),
            "tokens": sum(int(t.get("completion_tokens") or 0) for t in records),
            "prompt_tokens": sum(int(t.get("prompt_tokens") or 0) for t in records),
            "failed": sum(1 for t in records if t.get("error")),
            "truncated": sum(1 for t in records if t.get("truncated")),
            "cut": sum(1 for t in records if t.get("cut")),
            "agreement": agreement_line(answers),
            "groups": groups,
            "given": given,
            "trajectories": cells,
        }
        if rebuild_prompts and messages:
            entry["prompt"] = _prompt(messages, [g["text"] for g in given], template) if number else messages
            entry["prompt_note"] = REBUILT_NOTE if number else "The conversation the run answered, unchanged."
            for cell, record in zip(cells, records, strict=True):
                subset = record.get("reference_indices")
                if number and isinstance(subset, list):  # this trajectory saw its own subset of the references
                    texts = [_reference(previous[i]) for i in subset if i in previous]
                    cell["prompt"] = _prompt(messages, texts, template)
        shown.append(entry)
        previous = {int(t.get("index", 0)): t for t in records}
        previous_order = [int(i) for i in round_.get("reference_order") or []]
        previous_texts = list(round_.get("references") or [])
    return shown


def _reference(record: Json) -> str:
    return reference_text(str(record.get("conclusion") or ""), record.get("tool_calls") or [])


def _given(previous: dict[int, Json], order: list[int], texts: list[Any], number: int) -> list[Json]:
    """The references this round was given: the previous round's usable conclusions in template order."""
    if not number:
        return []
    if any("conclusion" in t for t in previous.values()):
        return [{"from": index, "text": _reference(previous[index])} for index in order if index in previous]
    # rows that kept only the texts the previous round passed on (MultiChallenge rows of earlier versions)
    return [{"from": None, "text": str(text)} for text in texts]


def _prompt(messages: list[Json], references: list[str], template: str | None) -> list[Json]:
    """The conversation with its last user message replaced by the template over ``references``."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") in ("user", "human")), default=None)
    if last_user is None:
        return messages
    text = render_synthesis_prompt(messages[last_user]["content"], references, template or DEFAULT_TEMPLATE)
    return [*messages[:last_user], {**messages[last_user], "content": text}, *messages[last_user + 1 :]]


def _cell(record: Json, answer: str | None, group_of: dict[str, int]) -> Json:
    cell: Json = {
        "index": record.get("index", 0),
        "tokens": int(record.get("completion_tokens") or 0),
        "prompt_tokens": int(record.get("prompt_tokens") or 0),
        "finish": record.get("finish_reason"),
        "answer": answer,
        "group": group_of.get(answer) if answer else None,
        "usable": answer is not None,
        "conclusion": str(record.get("conclusion") or ""),
    }
    names = ("error", "error_type", "error_status", "cut", "model_name", "model", "tool_calls", "reference_indices")
    for name in names:  # model: a panel's member
        if record.get(name) not in (None, [], ""):
            cell[name] = record[name]
    if record.get("truncated"):
        cell["truncated"] = True
    if record.get("reused"):  # drawn by an earlier run of the problem (escalation)
        cell["reused"] = True
    if int(record.get("attempts") or 1) > 1:
        cell["attempts"] = record["attempts"]
    if record.get("tokens_approximate"):
        cell["tokens_approximate"] = True
    return cell
