"""Escalation: a problem solved at one schedule continued at a larger one re-sends only what it lacks. Each run is
counted on the serving emulator's own request counter (and its request log, for what each request was), over real
loopback HTTP: low then medium sends exactly 12 + 1; a changed temperature or model reuses nothing and says why;
a smaller schedule or something that is no result is refused before anything is sent."""

from __future__ import annotations

import json

import pytest

from pacore_emulator import Emulator, EmulatorConfig
from pacore_graph import PaCoReConfig, Problem, RunFolder, asolve
from pacore_graph.extend import SettingsMismatch, UsageError
from pacore_graph.models.openai_compatible import OpenAICompatibleChatModel

PROBLEM = "How many ordered pairs (a, b) of positive integers satisfy a * b = 12?"
SYNTHESIS_START = "You are given a problem and a list of reference responses."


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    log = tmp_path_factory.mktemp("escalation") / "requests.jsonl"
    config = EmulatorConfig(ttft=0.0, token_delay=0.0, output_tokens=(20, 60), strict_model=False, request_log=str(log))
    with Emulator(config) as emu:
        yield emu


class Counted:
    """The requests the emulator received inside the block: how many, and how many were syntheses."""

    def __init__(self, emulator: Emulator):
        self.emulator = emulator
        self.log = emulator.config.request_log

    def __enter__(self) -> Counted:
        self.start = self.emulator.stats()["requests"]
        with open(self.log, encoding="utf-8") as fh:
            self.offset = len(fh.readlines())
        return self

    def __exit__(self, *exc: object) -> None:
        self.requests = self.emulator.stats()["requests"] - self.start
        with open(self.log, encoding="utf-8") as fh:
            bodies = [json.loads(line)["body"] for line in fh.readlines()[self.offset :]]
        last_users = [[m for m in b["messages"] if m["role"] == "user"][-1]["content"] for b in bodies]
        self.syntheses = sum(1 for text in last_users if text.startswith(SYNTHESIS_START))
        self.first_round = len(bodies) - self.syntheses


def model_of(emulator: Emulator, name: str | None = None) -> OpenAICompatibleChatModel:
    return OpenAICompatibleChatModel(base_url=emulator.base_url, model=name or emulator.config.model)


async def test_low_then_medium_sends_12_plus_1_and_records_the_4_reused(emulator):
    model = model_of(emulator)
    try:
        low = await asolve(model, PROBLEM, PaCoReConfig.preset("low"))
        with Counted(emulator) as sent:
            medium = await asolve(model, PROBLEM, PaCoReConfig.preset("medium"), reuse=low)
    finally:
        await model.aclose()
    assert sent.requests == 12 + 1 and (sent.first_round, sent.syntheses) == (12, 1)
    first = medium.rounds[0]
    assert [t.index for t in first.trajectories if t.reused] == [0, 1, 2, 3]  # each in the place it held
    earlier = {t.index: t for t in low.rounds[0].trajectories}
    for t in first.trajectories[:4]:  # the very trajectories bought before, their tokens counted in the TTC
        assert (t.conclusion, t.completion_tokens, t.request) == (
            earlier[t.index].conclusion,
            earlier[t.index].completion_tokens,
            earlier[t.index].request,
        )
    assert not any(t.reused for t in medium.rounds[1].trajectories)  # the synthesis sees 16: a new request
    assert medium.reuse is not None and (medium.reuse.offered, medium.reuse.reused) == (5, 4)
    assert medium.reuse.completion_tokens == low.rounds[0].completion_tokens and medium.reuse.note is None
    account = medium.message.response_metadata["pacore"]
    assert account["reuse"]["reused"] == 4 and account["rounds"][0]["reused"] == 4
    assert "(4 reused from an earlier run, 13 sent)" in str(medium)


async def test_each_earlier_trajectory_is_used_once_and_a_replay_sends_nothing(emulator):
    model = model_of(emulator)
    try:
        first = await asolve(model, PROBLEM, PaCoReConfig(rounds=[3]))
        with Counted(emulator) as again:
            same = await asolve(model, PROBLEM, PaCoReConfig(rounds=[3]), reuse=first)
        with Counted(emulator) as wider:
            wide = await asolve(model, PROBLEM, PaCoReConfig(rounds=[5]), reuse=same.rounds)
    finally:
        await model.aclose()
    assert again.requests == 0 and same.answer == first.answer and same.reuse and same.reuse.reused == 4
    assert wider.requests == 2 + 1 and wide.reuse and wide.reuse.reused == 3  # 3 of its 5 identical requests
    assert len({t.message_id for t in wide.rounds[0].trajectories}) == 5  # no trajectory counted twice


async def test_a_later_round_is_reused_where_its_references_are_the_same(emulator):
    """[6, 2] -> [6, 3]: round 1 whole, so round 2's messages (same references, same seeded order) are the same:
    2 of its 3 are reused; the final synthesis sees 3 references, so it is new."""
    model = model_of(emulator)
    try:
        earlier = await asolve(model, PROBLEM, PaCoReConfig(rounds=[6, 2]))
        with Counted(emulator) as sent:
            later = await asolve(model, PROBLEM, PaCoReConfig(rounds=[6, 3]), reuse=earlier)
    finally:
        await model.aclose()
    assert [r.counts().get("reused", 0) for r in later.rounds] == [6, 2, 0]
    assert sent.requests == 1 + 1 and sent.syntheses == 2  # round 2's third and the final synthesis


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"temperature": 0.7}, "the sampling"),
        ({"max_tokens": 500}, "the sampling"),
        ({"model": "another-model"}, "the model"),
    ],
)
async def test_a_changed_sampling_or_model_reuses_nothing_and_says_why(emulator, change, why):
    model = model_of(emulator)
    other = model_of(emulator, change.pop("model", None))
    try:
        low = await asolve(model, PROBLEM, PaCoReConfig.preset("low"))
        with Counted(emulator) as sent:
            medium = await asolve(other, PROBLEM, PaCoReConfig.preset("medium", **change), reuse=low)
    finally:
        await model.aclose()
        await other.aclose()
    assert sent.requests == 16 + 1
    assert medium.reuse is not None and medium.reuse.reused == 0 and medium.reuse.offered == 5
    assert medium.reuse.note is not None and medium.reuse.note.startswith(why)
    assert medium.message.response_metadata["pacore"]["reuse"]["note"] == medium.reuse.note
    assert f"reused nothing: {why}" in str(medium)


async def test_another_problem_reuses_nothing(emulator):
    model = model_of(emulator)
    try:
        low = await asolve(model, PROBLEM, PaCoReConfig.preset("low"))
        with Counted(emulator) as sent:
            other = await asolve(model, "What is 2 + 2?", PaCoReConfig.preset("medium"), reuse=low)
    finally:
        await model.aclose()
    assert sent.requests == 17 and other.reuse and other.reuse.note and "messages differ" in other.reuse.note


@pytest.mark.parametrize(
    ("earlier_rounds", "reuse", "error", "message"),
    [
        ([16], None, ValueError, "ran rounds [16]; rounds [4] is smaller"),
        ([2, 2], None, ValueError, "ran rounds [2, 2]; rounds [4] is smaller"),
        (None, {"answer": "42"}, ValueError, "not a PaCoRe result (no 'rounds' list"),
        (None, {"rounds": [{"k": "x"}]}, ValueError, "not a PaCoRe result (its rounds do not read"),
        (None, "results.jsonl", TypeError, "reuse takes a PaCoReResult"),
    ],
)
async def test_bad_input_is_refused_in_one_line_before_anything_is_sent(
    emulator, earlier_rounds, reuse, error, message
):
    model = model_of(emulator)
    try:
        if earlier_rounds is not None:
            reuse = await asolve(model, PROBLEM, PaCoReConfig(rounds=earlier_rounds))
        with Counted(emulator) as sent, pytest.raises(error) as refused:
            await asolve(model, PROBLEM, PaCoReConfig.preset("low"), reuse=reuse)
    finally:
        await model.aclose()
    assert sent.requests == 0
    assert message in str(refused.value) and "\n" not in str(refused.value)


async def test_a_run_folder_run_again_at_medium_continues_from_its_low_rows(emulator, tmp_path):
    problems = [Problem("p1", PROBLEM), Problem("p2", "What is 17 * 23?")]
    model = model_of(emulator)

    def folder(rounds: list[int], **fingerprint: object) -> RunFolder:
        return RunFolder(
            tmp_path / "run", fingerprint={"model": "emulated", "rounds": rounds, **fingerprint}, progress=False
        )

    try:
        async with folder([4]) as low:
            await low.run(model, PaCoReConfig(rounds=[4]), problems)
        with Counted(emulator) as sent:
            async with folder([16]) as medium:
                summary = await medium.run(model, PaCoReConfig(rounds=[16]), problems)
        rows = {row["id"]: row for row in medium.results.rows}
        with Counted(emulator) as again:
            async with folder([16]) as same:
                rerun = await same.run(model, PaCoReConfig(rounds=[16]), problems)
    finally:
        await model.aclose()
    assert sent.requests == 2 * (12 + 1) and summary.fresh == 2
    assert all(row["reuse"]["reused"] == 4 and row["rounds"][0]["k"] == 16 for row in rows.values())
    assert (tmp_path / "run" / "results.4.jsonl").exists()  # the low rows, kept aside
    assert again.requests == 0 and rerun.skipped == 2
    with pytest.raises(UsageError, match=r"holds results of rounds \[16\]; rounds \[4\] is smaller"):
        folder([4]).claim()
    with pytest.raises(SettingsMismatch, match="model: folder has 'emulated'"):  # a real change is still refused
        RunFolder(tmp_path / "run", fingerprint={"model": "other", "rounds": [32]}, progress=False).claim()


async def test_a_folder_killed_mid_escalation_finds_its_earlier_rows_again(emulator, tmp_path):
    """The low rows kept aside still feed the problems the medium run had not finished before it stopped."""
    problems = [Problem("p1", PROBLEM), Problem("p2", "What is 17 * 23?")]
    model = model_of(emulator)
    path = tmp_path / "run"
    try:
        async with RunFolder(path, fingerprint={"rounds": [4]}, progress=False) as low:
            await low.run(model, PaCoReConfig(rounds=[4]), problems)
        async with RunFolder(path, fingerprint={"rounds": [16]}, progress=False) as first:
            await first.run(model, PaCoReConfig(rounds=[16]), problems[:1])  # stopped after one problem
        with Counted(emulator) as sent:
            async with RunFolder(path, fingerprint={"rounds": [16]}, progress=False) as rest:
                summary = await rest.run(model, PaCoReConfig(rounds=[16]), problems)
    finally:
        await model.aclose()
    assert summary.skipped == 1 and sent.requests == 12 + 1
    assert rest.results.rows[-1]["reuse"]["reused"] == 4


async def test_a_panel_continued_reuses_each_slot_from_its_own_model(emulator):
    """Panels and escalation together: each trajectory's request names its slot's model (panel name and served
    name), so low then medium reuses the 3 small and 1 strong draws in slots of the same model; a member served
    by another model reuses none of that member's."""
    panel = {"models": {"small": 3, "strong": 1}, "synthesizer": "strong"}
    models = {"small": model_of(emulator, "small-m"), "strong": model_of(emulator, "strong-m")}
    other = {"small": model_of(emulator, "small-other"), "strong": models["strong"]}
    try:
        low = await asolve(models, PROBLEM, PaCoReConfig(rounds=[4], panel=panel))
        with Counted(emulator) as sent:
            medium = await asolve(models, PROBLEM, PaCoReConfig(rounds=[16], panel=panel), reuse=low)
        with Counted(emulator) as switched:
            changed = await asolve(other, PROBLEM, PaCoReConfig(rounds=[16], panel=panel), reuse=low)
    finally:
        for model in {id(m): m for m in [*models.values(), *other.values()]}.values():
            await model.aclose()
    bought = sorted(t.model or "" for t in low.rounds[0].trajectories)
    assert bought == ["small", "small", "small", "strong"]
    assert sent.requests == 12 + 1 and medium.reuse is not None and medium.reuse.reused == 4
    reused = [t for t in medium.rounds[0].trajectories if t.reused]
    assert sorted(t.model or "" for t in reused) == bought  # each in a slot of the model that drew it
    small = medium.models["small"]  # this run's requests; the 3 bought before counted apart
    assert (small["trajectories"], small["requests"], small["reused"]) == (12, 9, 3)
    assert switched.requests == 15 + 1 and changed.reuse is not None and changed.reuse.reused == 1
    assert [t.model for t in changed.rounds[0].trajectories if t.reused] == ["strong"]
