"""How a run ends when a coordination option changes the paper's ending (one synthesis after the last round).

After each round the collector asks :func:`ending` whether the run ends here and with which conclusion:

- a budget ran out (or cut the round): no further round starts; the answer is chosen from this round
  (or, when the cut left this round without a conclusion, from the previous one);
- ``early_stop.skip_unanimous`` and every conclusion of the round gives one answer: that one;
- ``final_selector="vote"``: instead of the final synthesis, a majority vote over the last round's extracted
  answers (ties: the answer met first in template order);
- ``final_selector="verifier"``: the final round's one call chose a candidate (``\\boxed{i}``); its
  conclusion is the answer (an unreadable choice falls back to the vote).

Choosing from a round is a vote when an extractor gave answers, else the first conclusion in template order.
The result says which (:class:`~pacore_graph.records.Outcome`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from pacore_graph.coordination.answers import answer_key, extract_answer
from pacore_graph.coordination.control import RunControl
from pacore_graph.coordination.vote import majority_vote
from pacore_graph.errors import BudgetExhaustedError
from pacore_graph.records import OutcomeData, RoundData, RoundRecord, TrajectoryData, usable

if TYPE_CHECKING:
    from pacore_graph.config import PaCoReConfig

BUDGET_REASONS = ("budget_tokens", "deadline")


class Ending(NamedTuple):
    record: TrajectoryData  # the trajectory whose conclusion (and tool calls) is the answer
    outcome: OutcomeData


def ending(
    rounds: list[RoundData],
    round_data: RoundData,
    chosen: list[TrajectoryData],
    control: RunControl,
    config: PaCoReConfig,
    final_round: int,
) -> Ending | None:
    """The run's ending after ``round_data`` (``chosen``: its usable records, template order), or None to go on
    as the paper does (next round, or the final synthesis as the answer). ``rounds``: the rounds before."""
    round_index = round_data["round_index"]
    if not chosen:
        return _rescue(rounds, round_data)
    if round_index == final_round:
        return _verified(rounds[-1], chosen[0]) if config.final_selector == "verifier" else None
    stop = _cut_by_budget(round_data)
    if stop is None and config.budget.active:
        stop = control.exhausted(sum(_tokens(data) for data in (*rounds, round_data)))
    if stop is not None:
        return choose(round_data, chosen, stop=stop)
    if config.early_stop.skip_unanimous and _unanimous(chosen):
        return choose(round_data, chosen, stop="unanimous")
    if config.final_selector == "vote" and round_index == final_round - 1:
        return choose(round_data, chosen)
    return None


def choose(round_data: RoundData, chosen: list[TrajectoryData], stop: str | None = None) -> Ending:
    """A vote over the extracted answers of ``chosen`` (template order), else its first conclusion."""
    answers = [record.get("answer") for record in chosen]
    outcome = OutcomeData(selector="first", stop=stop)
    record = chosen[0]
    if any(answer_key(answer) is not None for answer in answers):
        vote = majority_vote(answers, lambda a, b: answer_key(a) == answer_key(b))
        winner = answer_key(vote.answer)
        record = next(r for r, answer in zip(chosen, answers, strict=True) if answer_key(answer) == winner)
        outcome["selector"] = "vote"
        outcome["votes"] = [[answer, count] for answer, count in vote.clusters]
    outcome["round_index"], outcome["index"] = round_data["round_index"], record["index"]
    return Ending(record, outcome)


def _verified(previous: RoundData, verifier: TrajectoryData) -> Ending:
    """The candidate the verifier named, or the vote when its reply names none."""
    candidates = verifier.get("reference_indices") or previous["reference_order"]
    by_index = {record["index"]: record for record in previous["trajectories"]}
    answer = extract_answer(verifier.get("conclusion", ""))[0]
    choice = answer_key(answer)
    if choice is not None and choice.isdigit() and 1 <= int(choice) <= len(candidates):
        record = by_index[candidates[int(choice) - 1]]
        outcome = OutcomeData(
            selector="verifier", verifier_choice=int(choice), round_index=previous["round_index"], index=record["index"]
        )
        return Ending(record, outcome)
    fallback = choose(previous, [by_index[i] for i in previous["reference_order"] if usable(by_index[i])])
    fallback.outcome["verifier_choice"] = None
    return fallback


def _rescue(rounds: list[RoundData], round_data: RoundData) -> Ending | None:
    """A round a budget left without a conclusion: answer from the round before; None when none was cut."""
    stop = _cut_by_budget(round_data)
    if stop is None:
        return None
    previous = rounds[-1] if rounds else None
    chosen = [] if previous is None else [record for record in _in_template_order(previous) if usable(record)]
    if previous is None or not chosen:
        raise BudgetExhaustedError(stop, RoundRecord.model_validate(round_data))
    return choose(previous, chosen, stop=stop)


def _in_template_order(round_data: RoundData) -> list[TrajectoryData]:
    by_index = {record["index"]: record for record in round_data["trajectories"]}
    return [by_index[index] for index in round_data["reference_order"]]


def _cut_by_budget(round_data: RoundData) -> str | None:
    return next((r["cut"] for r in round_data["trajectories"] if r.get("cut") in BUDGET_REASONS), None)


def _unanimous(chosen: list[TrajectoryData]) -> bool:
    keys = {answer_key(record.get("answer")) for record in chosen}
    return len(chosen) >= 2 and len(keys) == 1 and None not in keys


def _tokens(round_data: RoundData) -> int:
    return sum(record.get("completion_tokens", 0) for record in round_data["trajectories"])
