"""A big run folder in the real format, made without a model: what ``pacore bench viewer`` opens.

Each problem's row is what ``RunFolder`` writes (its id, ``PaCoReResult.summary()`` over records, and the
conversation as OpenAI-style messages; tests/viewer checks the keys against a row of a real run), so the
viewer reads it exactly as it reads a real run. The contents imitate a math run at scale: per problem a kind
(easy: most trajectories agree; split: two answers; hard: scattered), conclusions of a few hundred characters
ending in ``\\boxed{}``, completion tokens of a reasoning model (thousands per trajectory), and a few failed,
truncated and cut (early stop) trajectories. Seeded: the same arguments make the same folder.
"""

from __future__ import annotations

import random
from pathlib import Path

from langchain_core.messages import AIMessage

from pacore_graph import PaCoReResult, RunFolder
from pacore_graph.extend import RoundRecord, TrajectoryRecord

FILLER = (
    "We set up the quantities, check the boundary cases and simplify. The computation reduces to a short count "
    "once the symmetry is used, and a second route gives the same value. "
)


def _answer(rng: random.Random, kind: str, right: int) -> int:
    shares = {"easy": 0.85, "split": 0.5, "hard": 0.3}[kind]
    if rng.random() < shares:
        return right
    if kind == "split" and rng.random() < 0.7:
        return right + 1
    return rng.randrange(1000)


def _trajectory(rng: random.Random, round_index: int, index: int, answer: int, last: bool) -> TrajectoryRecord:
    roll = rng.random()
    if roll < 0.01 and not last:
        return TrajectoryRecord(
            round_index=round_index, index=index, error="ModelRequestError: HTTP 503 from the server", attempts=5
        )
    if 0.97 < roll <= 0.98 and round_index == 0:  # cancelled by an early stop: its tokens until then
        return TrajectoryRecord(
            round_index=round_index, index=index, completion_tokens=rng.randint(500, 5000), cut="early_stop"
        )
    text = FILLER * rng.randint(2, 6) + f"Therefore the answer is $\\boxed{{{answer}}}$."
    truncated = roll > 0.98 and not last
    return TrajectoryRecord(
        round_index=round_index,
        index=index,
        conclusion="" if truncated else text,
        content_length=len(text),
        prompt_tokens=rng.randint(200, 400) if round_index == 0 else rng.randint(8000, 30000),
        completion_tokens=rng.randint(2000, 30000),
        finish_reason="length" if truncated else "stop",
        model_name="generated",
        truncated=truncated,
    )


def _round(rng: random.Random, round_index: int, k: int, kind: str, right: int, last: bool) -> RoundRecord:
    trajectories = [_trajectory(rng, round_index, i, _answer(rng, kind, right), last) for i in range(k)]
    usable = [t.index for t in trajectories if t.usable]
    order = sorted(usable, key=lambda i: trajectories[i].content_length)
    rng.shuffle(order)
    return RoundRecord(round_index=round_index, k=k, reference_order=order, trajectories=trajectories)


def make_folder(path: str | Path, problems: int, rounds: list[int], seed: int = 0) -> Path:
    """Write ``problems`` finished problems of schedule ``rounds`` (plus the final round of 1) into ``path``."""
    rng = random.Random(seed)
    folder = RunFolder(path, fingerprint={"model": "generated", "rounds": rounds, "seed": seed}, progress=False)
    folder.claim()
    try:
        done = folder.results.done()
        for number in range(problems):
            problem_id = f"gen-{number:05d}"
            if problem_id in done:
                continue
            kind = rng.choice(["easy", "easy", "split", "hard"])
            right = rng.randrange(1000)
            schedule = [*rounds, 1]
            records = [_round(rng, r, k, kind, right, last=r == len(schedule) - 1) for r, k in enumerate(schedule)]
            answer = records[-1].trajectories[0].conclusion
            result = PaCoReResult(answer=answer, rounds=records, message=AIMessage(content=answer))
            question = f"Problem {number}: find the number of lattice points described in the statement."
            messages = [{"role": "user", "content": question}]
            folder.results.append({"id": problem_id, **result.summary(), "messages": messages})
    finally:
        folder.release()
    return Path(path)
