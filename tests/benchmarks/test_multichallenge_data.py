"""MultiChallenge data: official rows load (a fixture excerpt); malformed rows are reported by id and skipped."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from pacore_benchmarks.multichallenge.data import (
    AXES,
    DEFAULT_DATA,
    HUB_NAME,
    LOCAL_PATH,
    DataError,
    load_dataset,
    select,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "multichallenge" / "benchmark_questions.jsonl"


def _row(qid: str, **overrides) -> dict:
    row = {
        "QUESTION_ID": qid,
        "AXIS": "SELF_COHERENCE",
        "CONVERSATION": [
            {"role": "user", "content": "Plan a trip."},
            {"role": "assistant", "content": "Sure."},
            {"role": "user", "content": "Now shorter."},
        ],
        "TARGET_QUESTION": "Is it shorter?",
        "PASS_CRITERIA": "YES",
    }
    row.update(overrides)
    return row


def test_official_rows_load_with_their_axes():
    dataset = load_dataset(FIXTURE)
    assert dataset.skipped == []
    first_two = [c.question_id for c in dataset.conversations][:2]
    assert first_two == ["674552683acc22154b07a598", "674552684d7f0f0dad442da6"]
    counts = Counter(c.axis for c in dataset.conversations)
    assert counts == {
        "INFERENCE_MEMORY": 2,
        "SELF_COHERENCE": 1,
        "INSTRUCTION_RETENTION": 1,
        "RELIABLE_VERSION_EDITING": 2,
    }
    assert set(counts) == set(AXES)
    assert all(c.pass_criteria == "YES" and c.target_question.strip() for c in dataset.conversations)


def test_messages_keep_the_whole_history_in_order():
    conv = load_dataset(FIXTURE).conversations[0]
    messages = conv.messages()
    assert len(messages) == len(conv.conversation)
    assert isinstance(messages[-1], HumanMessage)
    for turn, message in zip(conv.conversation, messages, strict=True):
        assert message.content == turn.content
        kind = {"user": HumanMessage, "assistant": AIMessage, "system": SystemMessage}[turn.role]
        assert isinstance(message, kind)


def test_malformed_rows_are_reported_by_id_and_skipped(tmp_path):
    path = tmp_path / "rows.jsonl"
    lines = [
        json.dumps(_row("good-1")),
        json.dumps({k: v for k, v in _row("no-target").items() if k != "TARGET_QUESTION"}),
        json.dumps(_row("bad-axis", AXIS="MEMORY")),
        json.dumps(_row("ends-with-assistant", CONVERSATION=[{"role": "assistant", "content": "hi"}])),
        json.dumps(_row("bad-criteria", PASS_CRITERIA="MAYBE")),
        '{"QUESTION_ID": "torn", "AXIS": ',
        json.dumps(_row("good-1")),
        "",
        json.dumps(["not", "an", "object"]),
        json.dumps(_row("good-2", PASS_CRITERIA=" no ")),
    ]
    path.write_text("\n".join(lines) + "\n")
    dataset = load_dataset(path)
    assert [c.question_id for c in dataset.conversations] == ["good-1", "good-2"]
    assert dataset.conversations[1].pass_criteria == "NO"
    reasons = {s.where: s.reason for s in dataset.skipped}
    assert set(reasons) == {
        "no-target",
        "bad-axis",
        "ends-with-assistant",
        "bad-criteria",
        "line 6",
        "good-1",
        "line 9",
    }
    assert "target_question" in reasons["no-target"]
    assert "MEMORY" in reasons["bad-axis"]
    assert "end with a user turn" in reasons["ends-with-assistant"]
    assert "invalid JSON" in reasons["line 6"]
    assert "duplicate" in reasons["good-1"]
    assert "not a JSON object" in reasons["line 9"]


def test_hub_style_lower_case_fields_are_accepted(tmp_path):
    row = {k.lower(): v for k, v in _row("hub-row").items()}
    path = tmp_path / "hub.jsonl"
    path.write_text(json.dumps(row) + "\n")
    assert load_dataset(path).conversations[0].question_id == "hub-row"


@pytest.mark.parametrize(
    "source, expected",
    [("missing/file.jsonl", "not found"), ("./nowhere", "not found")],
)
def test_unreadable_sources_raise_one_clear_error(source, expected):
    with pytest.raises(DataError, match=expected):
        load_dataset(source)


def test_directory_and_empty_file_are_refused(tmp_path):
    with pytest.raises(DataError, match="directory"):
        load_dataset(tmp_path)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DataError, match="no rows"):
        load_dataset(empty)


def test_default_source_prefers_the_local_copy(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    assert DEFAULT_DATA.source(None, project) == HUB_NAME
    shared = project / LOCAL_PATH
    shared.parent.mkdir(parents=True)
    shared.write_bytes(FIXTURE.read_bytes())
    assert DEFAULT_DATA.source(None, project) == str(LOCAL_PATH)
    assert DEFAULT_DATA.source("mine.jsonl", project) == "mine.jsonl"  # --data wins


def test_select_filters_axis_then_limits_in_file_order():
    conversations = load_dataset(FIXTURE).conversations
    picked = select(conversations, axis="reliable_version_editing", limit=1)
    assert [c.question_id for c in picked] == ["67455ecca969fda3803814da"]
    expected = [c.question_id for c in conversations if c.axis == "RELIABLE_VERSION_EDITING"]
    assert [c.question_id for c in select(conversations, axis="RELIABLE_VERSION_EDITING", limit=3)] == expected
    assert len(expected) == 2
    assert len(select(conversations, limit=4)) == 4
    with pytest.raises(DataError, match="unknown axis"):
        select(conversations, axis="MEMORY")
    assert set(AXES) == {c.axis for c in conversations}


def test_hub_name_reads_the_hub_release_format(monkeypatch):
    """The hub release (lower-case fields, conversation as a struct of lists) becomes the same rows."""
    datasets = pytest.importorskip("datasets")
    seen = {}

    def fake_load_dataset(name, split):
        seen["args"] = (name, split)
        row = {k.lower(): v for k, v in _row("hub-1").items()}
        turns = row["conversation"]
        row["conversation"] = {"role": [t["role"] for t in turns], "content": [t["content"] for t in turns]}
        return [row, {**row, "question_id": "hub-2", "axis": "NOPE"}]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setattr("pacore_benchmarks.hub.unreachable_reason", lambda: None)  # the hub answers
    dataset = load_dataset(HUB_NAME)
    assert seen["args"] == (HUB_NAME, "test")
    assert [c.question_id for c in dataset.conversations] == ["hub-1"]
    assert dataset.conversations[0].conversation[-1].content == "Now shorter."
    assert [s.where for s in dataset.skipped] == ["hub-2"]


def test_unreachable_hub_is_one_clear_error(monkeypatch):
    datasets = pytest.importorskip("datasets")

    def offline(name, split):
        raise ConnectionError("no network\n(a long second line of details)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    monkeypatch.setattr("pacore_benchmarks.hub.unreachable_reason", lambda: None)  # it answers, then fails
    expected = r"cannot load 'someone/dataset' from the hub \(ConnectionError: no network\)"
    with pytest.raises(DataError, match=expected) as err:
        load_dataset("someone/dataset")
    assert "\n" not in str(err.value) and "pass --data PATH" in str(err.value)
