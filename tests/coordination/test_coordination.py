"""Coordination options over real HTTP: budgets, early stop, subset and deduplicated references, selectors.

A scripted OpenAI-compatible server answers each round's n-th request with a chosen conclusion, usage
and delay; a "slow" reply would take a minute, so a test that finishes quickly proves it was cut. The
server records every request and counts the clients that closed their connection before the answer.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from waits import await_until

from pacore_graph import PaCoReConfig, PaCoReContext, asolve, build_pacore_graph, chat_model, solve
from pacore_graph.batch.resume import open_checkpointer, solve_resumable, thread_id
from pacore_graph.coordination import RSA_TEMPLATE, Budget, EarlyStop, boxed_answer
from pacore_graph.coordination.rsa import rsa_config
from pacore_graph.errors import BudgetExhaustedError
from pacore_graph.graph.runner import PaCoReRunner, finished_rounds, to_messages
from pacore_graph.records import RoundRecord
from pacore_graph.synthesis.prompt import render_synthesis_prompt

SLOW = 60.0  # seconds a reply that must be cut would take


def reply(answer: int | str, tokens: int = 100, delay: float = 0.0, text: str | None = None) -> dict:
    content = text if text is not None else f"So the answer is \\boxed{{{answer}}}."
    return {
        "content": content,
        "delay": delay,
        "usage": {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens},
    }


def kind(body: dict) -> str:
    text = body["messages"][-1]["content"]
    if "Candidate Responses:" in text:
        return "verifier"
    if "Reference Responses:" in text or "Candidate solutions" in text or "Candidate solution" in text:
        return "synthesis"
    return "first"


def scripted(first: list[dict], synthesis=None, verifier=None):
    """Round 1's n-th request gets ``first[n-1]`` (cyclically); later rounds get ``synthesis`` (a dict or a function of
    the prompt text), the verifier call gets ``verifier``."""

    def handler(body: dict, attempt: int):
        which = kind(body)
        if which == "first":
            return first[(attempt - 1) % len(first)]  # a second run of the same problem starts over
        chosen = verifier if which == "verifier" else synthesis
        return chosen(body["messages"][-1]["content"]) if callable(chosen) else chosen

    return handler


def references_in(text: str) -> list[str]:
    """The reference texts of a Table-6 synthesis prompt."""
    body = text.split("Reference Responses:\n", 1)[1].rsplit("\n\nNow, based on", 1)[0]
    return [part.strip("\n") for part in re.split(r"\nReference \d+:\n", body)[1:]]


async def disconnects(server, expected: int) -> int:
    """How many clients closed early, once the server has noticed ``expected`` of them."""
    await await_until(lambda: server.disconnected >= expected, 10, what=lambda: f"{server.disconnected} closed")
    return server.disconnected


FAST_SEVENS = [reply(7, delay=0.05 * n) for n in range(1, 4)]


# ------------------------------------------------------------------------------------------- early stop


@pytest.mark.parametrize("stream", [False, True])
async def test_early_stop_cancels_the_rest_of_the_round_and_the_server_sees_the_close(mock_server, stream):
    first = FAST_SEVENS + [reply(n, tokens=5000, delay=SLOW) for n in range(5)]
    with mock_server(scripted(first, synthesis=reply(7))) as server:
        model = chat_model(server.base_url)
        config = PaCoReConfig(rounds=[8], answer_extractor="boxed", early_stop=EarlyStop(agree=3), stream=stream)
        events: list[dict] = []
        result = await asolve(model, "What is 3+4?", config, on_event=events.append)
        assert await disconnects(server, 5) == 5
        await model.aclose()
    first_round = result.rounds[0]
    assert [t.cut for t in first_round.trajectories].count("early_stop") == 5
    assert sorted(t.answer for t in first_round.trajectories if not t.cut) == ["7", "7", "7"]
    assert first_round.completion_tokens == 300  # cut trajectories count nothing: no usage came back
    synthesis = [body for body in server.requests if kind(body) == "synthesis"]
    assert len(synthesis) == 1 and len(references_in(synthesis[0]["messages"][-1]["content"])) == 3
    assert result.answer == "So the answer is \\boxed{7}." and result.outcome.selector == "synthesis"
    assert [c["reason"] for c in result.message.response_metadata["pacore"]["cut"]] == ["early_stop"] * 5
    assert {"event": "round_cut", "round": 0, "reason": "early_stop", "running": 5} in events


async def test_a_context_reused_for_a_second_run_after_an_early_stop_runs_it_afresh(mock_server):
    """What a run keeps on its PaCoReContext (the round's early-stop state, barriers, message lists) is its own:
    a second input on the same context runs its rounds again instead of finding them already cut."""
    first = FAST_SEVENS + [reply(n, tokens=5000, delay=SLOW) for n in range(2)]
    with mock_server(scripted(first, synthesis=reply(7))) as server:
        model = chat_model(server.base_url)
        config = PaCoReConfig(rounds=[5], answer_extractor="boxed", early_stop=EarlyStop(agree=3))
        graph = build_pacore_graph(model, config).compile()
        context = PaCoReContext(messages=to_messages("What is 3+4?"))
        try:
            states = [await graph.ainvoke({}, context=context) for _ in range(2)]
        finally:
            await model.aclose()
    for state in states:
        (round_1, _) = [RoundRecord.model_validate(data) for data in finished_rounds(state)]
        assert [t.cut for t in round_1.trajectories].count("early_stop") == 2
        assert state["answer"].content == "So the answer is \\boxed{7}."
    assert [kind(body) for body in server.requests].count("synthesis") == 2


async def test_early_stop_when_the_leader_cannot_be_caught(mock_server):
    # 7, 3, 7 leave 7 catchable (2 against 1 + 2 running); the fourth, 7, makes it 3 > 1 + 1
    first = [reply(7, delay=0.05), reply(3, delay=0.1), reply(7, delay=0.15), reply(7, delay=0.2), reply(3, delay=SLOW)]
    with mock_server(scripted(first, synthesis=reply(7))) as server:
        model = chat_model(server.base_url)
        config = PaCoReConfig(rounds=[5], answer_extractor="boxed", early_stop=EarlyStop(unbeatable=True))
        result = await asolve(model, "q", config)
        assert await disconnects(server, 1) == 1
        await model.aclose()
    trajectories = result.rounds[0].trajectories
    assert [t.answer for t in trajectories if not t.cut] == ["7", "3", "7", "7"]
    assert [t.cut for t in trajectories if t.cut] == ["early_stop"]


async def test_early_stop_once_the_leader_is_ahead_by_a_margin(mock_server):
    # 7, 3, 7 is a lead of 1; the fourth, 7, makes it 2
    first = [reply(7, delay=0.05), reply(3, delay=0.1), reply(7, delay=0.15), reply(7, delay=0.2)]
    first += [reply(3, delay=SLOW)] * 2
    with mock_server(scripted(first, synthesis=reply(7))) as server:
        model = chat_model(server.base_url)
        config = PaCoReConfig(rounds=[6], answer_extractor="boxed", early_stop=EarlyStop(lead=2))
        result = await asolve(model, "q", config)
        assert await disconnects(server, 2) == 2
        await model.aclose()
    trajectories = result.rounds[0].trajectories
    assert [t.answer for t in trajectories if not t.cut] == ["7", "3", "7", "7"]
    assert [t.cut for t in trajectories if t.cut] == ["early_stop"] * 2


async def test_a_unanimous_round_skips_the_remaining_rounds(mock_server):
    early = EarlyStop(skip_unanimous=True)
    with mock_server(scripted([reply(7)] * 3, synthesis=reply(7))) as server:
        model = chat_model(server.base_url)
        result = await asolve(model, "q", PaCoReConfig(rounds=[3, 2], answer_extractor="boxed", early_stop=early))
        unanimous = len(server.requests)
    with mock_server(scripted([reply(7), reply(7), reply(5)], synthesis=reply(7))) as server:
        model = chat_model(server.base_url)
        split = await asolve(model, "q", PaCoReConfig(rounds=[3, 2], answer_extractor="boxed", early_stop=early))
        await model.aclose()
    assert unanimous == 3 and [r.k for r in result.rounds] == [3]
    assert result.outcome.stop == "unanimous" and result.outcome.votes == [("7", 3)]
    assert result.answer == "So the answer is \\boxed{7}."
    # a split first round goes on; its second round agrees, so the final synthesis is skipped
    assert len(server.requests) == 3 + 2 and [r.k for r in split.rounds] == [3, 2]
    assert (split.outcome.stop, split.outcome.round_index) == ("unanimous", 1)


def test_early_stop_works_from_sync_code_and_closes_the_requests(mock_server):
    first = FAST_SEVENS + [reply(1, delay=SLOW)] * 2
    with mock_server(scripted(first, synthesis=reply(7))) as server:
        model = chat_model(server.base_url)
        config = PaCoReConfig(rounds=[5], answer_extractor="boxed", early_stop=EarlyStop(agree=3))
        result = solve(model, "q", config)
        assert asyncio.run(disconnects(server, 2)) == 2
    assert [t.cut for t in result.rounds[0].trajectories].count("early_stop") == 2


# ---------------------------------------------------------------------------------------------- budgets


async def test_a_token_budget_cuts_what_is_in_flight_and_is_exceeded_by_at_most_that(mock_server):
    first = [reply(7, tokens=100, delay=0.05 * n) for n in range(1, 4)] + [reply(1, tokens=900, delay=SLOW)] * 3
    with mock_server(scripted(first, synthesis=reply(7))) as server:
        model = chat_model(server.base_url)
        result = await asolve(model, "q", PaCoReConfig(rounds=[6], budget=Budget(tokens=250)))
        assert await disconnects(server, 3) == 3
        await model.aclose()
    # it ran out when the third trajectory finished: in flight then were that one (100) and three more
    assert result.ttc == 300 <= 250 + 100
    assert [t.cut for t in result.rounds[0].trajectories].count("budget_tokens") == 3
    assert len(server.requests) == 6  # no synthesis started after the budget ran out
    assert result.outcome.stop == "budget_tokens" and result.outcome.selector == "first"
    assert result.answer == "So the answer is \\boxed{7}."


async def test_a_budget_that_lasts_through_a_round_lets_the_next_one_start_and_stops_the_one_after(mock_server):
    with mock_server(scripted([reply(7, tokens=100)] * 3, synthesis=reply(8, tokens=100))) as server:
        model = chat_model(server.base_url)
        roomy = await asolve(model, "q", PaCoReConfig(rounds=[3], budget=Budget(tokens=301)))
        server.requests.clear()
        exact = await asolve(model, "q2", PaCoReConfig(rounds=[3], budget=Budget(tokens=300)))
        await model.aclose()
    assert roomy.answer.endswith("\\boxed{8}.") and roomy.outcome.stop is None and roomy.ttc == 400
    assert len(server.requests) == 3 and exact.outcome.stop == "budget_tokens" and exact.ttc == 300


async def test_a_deadline_cuts_the_round_and_answers_by_vote_from_what_finished(mock_server):
    first = [reply(7, delay=0.05), reply(5, delay=0.1), reply(7, delay=0.15)] + [reply(5, delay=SLOW)] * 3
    with mock_server(scripted(first, synthesis=reply(9))) as server:
        model = chat_model(server.base_url)
        config = PaCoReConfig(rounds=[6], answer_extractor="boxed", budget=Budget(seconds=1.5))
        result = await asolve(model, "q", config)
        assert await disconnects(server, 3) == 3
        await model.aclose()
    assert [t.cut for t in result.rounds[0].trajectories].count("deadline") == 3
    assert result.outcome.stop == "deadline" and result.outcome.selector == "vote"
    assert result.outcome.votes == [("7", 2), ("5", 1)] and result.answer.endswith("\\boxed{7}.")
    assert all(kind(body) == "first" for body in server.requests)


async def test_a_deadline_before_any_conclusion_is_a_clear_error(mock_server):
    with mock_server(scripted([reply(1, delay=SLOW)] * 3)) as server:
        model = chat_model(server.base_url)
        with pytest.raises(BudgetExhaustedError, match="the deadline ran out in round 1") as caught:
            await asolve(model, "q", PaCoReConfig(rounds=[3], budget=Budget(seconds=0.3)))
        assert await disconnects(server, 3) == 3
        await model.aclose()
    assert caught.value.reason == "deadline" and len(caught.value.round.trajectories) == 3


async def test_a_budget_cut_of_the_final_synthesis_answers_from_the_round_before(mock_server):
    with mock_server(scripted([reply(7, tokens=100)] * 2, synthesis=reply(8, delay=SLOW))) as server:
        model = chat_model(server.base_url)
        config = PaCoReConfig(rounds=[2], answer_extractor="boxed", budget=Budget(seconds=1.0))
        result = await asolve(model, "q", config)
        assert await disconnects(server, 1) == 1
        await model.aclose()
    assert [r.k for r in result.rounds] == [2, 1] and result.rounds[1].trajectories[0].cut == "deadline"
    assert result.outcome.stop == "deadline" and result.outcome.round_index == 0
    assert result.answer.endswith("\\boxed{7}.")


# ------------------------------------------------------------------------------------------- references


def echo_references(text: str) -> dict:
    """A synthesis that repeats which references it saw, so the request and the record can be compared."""
    return reply(0, text=" | ".join(references_in(text)))


async def test_subset_references_are_seeded_recorded_and_what_was_sent(mock_server):
    first = [reply(n, text=f"conclusion {n}") for n in range(6)]
    config = PaCoReConfig(rounds=[6, 3], reference_subset=2, seed=3)
    with mock_server(scripted(first, synthesis=echo_references)) as server:
        model = chat_model(server.base_url)
        result = await asolve(model, "q", config)
        again = await asolve(model, "q", config)
        other = await asolve(model, "q", config.model_copy(update={"seed": 4}))
        await model.aclose()
    by_index = {t.index: t.conclusion for t in result.rounds[0].trajectories}
    for trajectory in result.rounds[1].trajectories:
        assert len(trajectory.reference_indices) == 2
        assert trajectory.conclusion == " | ".join(by_index[i] for i in trajectory.reference_indices)
    final = result.rounds[2].trajectories[0]  # the final round draws 2 of round 2's 3
    second = {t.index: t.conclusion for t in result.rounds[1].trajectories}
    assert len(final.reference_indices) == 2
    assert final.conclusion == " | ".join(second[i] for i in final.reference_indices)
    indices = [t.reference_indices for t in result.rounds[1].trajectories]
    assert indices == [t.reference_indices for t in again.rounds[1].trajectories]
    assert indices != [t.reference_indices for t in other.rounds[1].trajectories]


async def test_distinct_subsets_never_repeat_while_unused_ones_remain(mock_server):
    first = [reply(n, text=f"conclusion {n}") for n in range(6)]
    with mock_server(scripted(first, synthesis=echo_references)) as server:
        model = chat_model(server.base_url)
        config = PaCoReConfig(rounds=[6, 15], reference_subset=2, distinct_subsets=True)
        result = await asolve(model, "q", config)
        await model.aclose()
    subsets = {frozenset(t.reference_indices) for t in result.rounds[1].trajectories}
    assert len(subsets) == 15  # every pair of 6 exactly once


async def test_dedup_shows_identical_references_once_with_their_count(mock_server):
    first = [reply(7), reply(5), reply(7), reply(7, text="Another way: \\boxed{7}."), reply(7)]
    with mock_server(scripted(first, synthesis=echo_references)) as server:
        model = chat_model(server.base_url)
        config = PaCoReConfig(rounds=[5], answer_extractor="boxed", dedup_references=True, reference_order="index")
        result = await asolve(model, "q", config)
        await model.aclose()
    sent = references_in(server.requests[-1]["messages"][-1]["content"])
    assert sent == [
        "So the answer is \\boxed{7}.\n\n[3 references gave this same response.]",
        "So the answer is \\boxed{5}.",
        "Another way: \\boxed{7}.",
    ]
    final = result.rounds[1].trajectories[0]
    assert final.reference_indices == [0, 1, 3] and final.reference_counts == [3, 1, 1]


# -------------------------------------------------------------------------------------------- selectors


async def test_vote_replaces_the_final_synthesis(mock_server):
    first = [reply(7), reply(5), reply(7), reply(5, text="maybe \\boxed{5}"), reply(7, text="$\\boxed{07}$")]
    with mock_server(scripted(first, synthesis=reply(1))) as server:
        model = chat_model(server.base_url)
        result = await asolve(model, "q", PaCoReConfig(rounds=[5], answer_extractor="boxed", final_selector="vote"))
        await model.aclose()
    assert len(server.requests) == 5 and [r.k for r in result.rounds] == [5]
    assert result.outcome.selector == "vote" and dict(result.outcome.votes)["7"] == 3
    assert boxed_answer(result.answer) == "7"
    assert result.message.response_metadata["pacore"]["outcome"]["selector"] == "vote"


async def test_a_verifier_call_chooses_the_candidate(mock_server):
    first = [reply(n, text=f"candidate text {n} \\boxed{{{n}}}") for n in (4, 5, 6)]
    with mock_server(scripted(first, verifier=reply(2, text="Candidate 2 is right: \\boxed{2}"))) as server:
        model = chat_model(server.base_url)
        config = PaCoReConfig(rounds=[3], final_selector="verifier", reference_order="index")
        result = await asolve(model, "q", config)
        await model.aclose()
    prompt = server.requests[-1]["messages"][-1]["content"]
    assert prompt.startswith("You are given a problem and a list of candidate responses.")
    assert "Candidate 2:\ncandidate text 5" in prompt
    assert result.answer == "candidate text 5 \\boxed{5}"
    assert (result.outcome.selector, result.outcome.verifier_choice, result.outcome.index) == ("verifier", 2, 1)


async def test_a_verifier_reply_without_a_choice_falls_back_to_the_vote(mock_server):
    first = [reply(4), reply(6), reply(6)]
    with mock_server(scripted(first, verifier=reply(0, text="They all look fine."))) as server:
        model = chat_model(server.base_url)
        config = PaCoReConfig(rounds=[3], final_selector="verifier", answer_extractor="boxed")
        result = await asolve(model, "q", config)
        await model.aclose()
    assert result.outcome.selector == "vote" and result.outcome.verifier_choice is None
    assert result.answer.endswith("\\boxed{6}.")


# --------------------------------------------------------------------------------------- RSA's setting


def rsa_prompt(problem: str, candidates: list[str]) -> str:
    """RSA's math aggregation prompt (HyperPotatoNeo/RSA eval_loop.py, aggregate_prompt), written out."""
    if len(candidates) == 1:
        return (
            "You are given a math problem and a candidate solution. The candidate may be incomplete or contain "
            "errors. Refine this trajectory and produce an improved, higher-quality solution. If it is entirely "
            "wrong, attempt a new strategy. End with the final result in \\boxed{}.\n\nProblem:\n\n"
            f"{problem.strip()}\n\nCandidate solution (may contain mistakes):\n\n---- Candidate ----\n"
            f"{candidates[0].strip()}\n\nNow refine the candidate into an improved solution. Provide clear "
            "reasoning and end with the final answer in \\boxed{}."
        )
    solutions = "\n".join(f"---- Solution {i} ----\n{c.strip()}\n" for i, c in enumerate(candidates, 1))
    return (
        "You are given a math problem and several candidate solutions. Some candidates may be incorrect or "
        "contain errors. Aggregate the useful ideas and produce a single, high-quality solution. Reason "
        "carefully; if candidates disagree, choose the correct path. If all are incorrect, then attempt a "
        "different strategy.End with the final result in \\boxed{}.\n\nProblem:\n\n"
        f"{problem.strip()}\n\nCandidate solutions (may contain mistakes):\n\n{solutions}\nNow write a single "
        "improved solution. Provide clear reasoning and end with the final answer in \\boxed{}."
    )


@pytest.mark.parametrize("candidates", [[" one \\boxed{1} \n"], ["a", "b\n\n", "  c"]])
def test_the_rsa_template_renders_rsas_aggregation_prompt(candidates):
    assert render_synthesis_prompt(" Find x. \n", candidates, RSA_TEMPLATE) == rsa_prompt(" Find x. \n", candidates)


async def test_rsa_config_runs_population_subset_and_loops_then_votes(mock_server):
    first = [reply(n % 2, text=f"solution {n}: \\boxed{{{n % 2}}}") for n in range(4)]
    with mock_server(scripted(first, synthesis=reply(1))) as server:
        model = chat_model(server.base_url)
        result = await asolve(model, "Find x.", rsa_config(population=4, subset=2, loops=3))
        await model.aclose()
    assert [r.k for r in result.rounds] == [4, 4, 4] and len(server.requests) == 12  # no final synthesis
    second = result.rounds[1].trajectories[0]
    candidates = [result.rounds[0].trajectories[i].conclusion for i in second.reference_indices]
    sent = [body for body in server.requests if kind(body) == "synthesis"]
    assert rsa_prompt("Find x.", candidates) in [body["messages"][-1]["content"] for body in sent]
    assert result.outcome.selector == "vote" and boxed_answer(result.answer) == "1"


# --------------------------------------------------------------------------------- configuration, state


def module_level_extractor(conclusion: str) -> str | None:
    return conclusion.strip()[-1:] or None


def test_extractors_are_kept_by_name_so_configs_stay_checkpoint_friendly():
    assert PaCoReConfig(answer_extractor=boxed_answer).answer_extractor == "boxed"
    named = PaCoReConfig(answer_extractor=module_level_extractor)
    assert named.answer_extractor == f"{__name__}:module_level_extractor"
    assert PaCoReConfig.model_validate_json(named.model_dump_json()) == named
    thread_id("p", to_messages("q"), named)  # the resume digest dumps the config as JSON
    with pytest.raises(ValueError, match="no importable name"):
        PaCoReConfig(answer_extractor=lambda text: text)
    with pytest.raises(ValueError, match="unknown answer_extractor"):
        PaCoReConfig(answer_extractor="boxd")


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"early_stop": {"agree": 3}}, "set answer_extractor"),
        ({"final_selector": "vote"}, "set answer_extractor"),
        ({"rounds": [], "final_selector": "verifier", "answer_extractor": "boxed"}, "rounds is empty"),
        ({"distinct_subsets": True}, "needs reference_subset"),
        ({"early_stop": {"agree": 1}, "answer_extractor": "boxed"}, "agree"),
    ],
)
def test_incomplete_coordination_settings_fail_at_construction(fields, named):
    with pytest.raises(ValueError, match=named):
        PaCoReConfig(**fields)


def test_every_option_is_off_by_default():
    config = PaCoReConfig()
    assert not config.budget.active and not config.early_stop.active and config.answer_extractor is None
    assert (config.reference_subset, config.dedup_references, config.final_selector) == (None, False, "synthesis")


async def test_coordinated_runs_checkpoint_plain_data_and_read_back(mock_server, tmp_path):
    first = FAST_SEVENS + [reply(1, delay=SLOW)] * 2
    config = PaCoReConfig(rounds=[5], answer_extractor="boxed", early_stop=EarlyStop(agree=3), final_selector="vote")
    messages = to_messages("q")
    with mock_server(scripted(first)) as server:
        model = chat_model(server.base_url)
        async with open_checkpointer(tmp_path) as saver:  # the strict serializer: plain data only
            runner = PaCoReRunner(model, config, checkpointer=saver)
            fresh, status = await solve_resumable(runner, messages, thread_id("p", messages, config))
            again, finished = await solve_resumable(runner, messages, thread_id("p", messages, config))
        await model.aclose()
    assert (status, finished) == ("fresh", "finished")
    assert again.outcome == fresh.outcome and again.outcome.selector == "vote"
    assert json.dumps(again.summary())  # the account is JSON-ready
