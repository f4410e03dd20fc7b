"""MultiChallenge runner on prompt-function fakes: rows, baseline, errors, and resume without new calls."""

from __future__ import annotations

import hashlib
import json

from fakes import PromptFunctionChatModel as Fake
from langchain_core.messages import AIMessage, BaseMessage

from pacore_benchmarks.multichallenge.data import Conversation
from pacore_benchmarks.multichallenge.runner import MultiChallengeRunner, pacore_config, row_key, run_folder
from pacore_benchmarks.multichallenge.settings import RunSettings
from pacore_graph.extend import ModelRequestError, ResultsFile, RetryPolicy

FAST_RETRY = RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def responder_reply(messages: list[BaseMessage]) -> AIMessage:
    last = str(messages[-1].content)
    if "OVERFLOW" in last:
        raise ModelRequestError("HTTP 400 from fake (the prompt does not fit the model's context)", status=400)
    if "FLAKY" in last:
        raise ModelRequestError("HTTP 503 from fake", status=503, retryable=True)
    if "Reference Responses:" in last:
        content = f"<think>weighing references</think>final-{_digest(last)} GOOD"
    else:
        content = f"<think>first thoughts</think>draft-{_digest(last)}"
    return AIMessage(content=content, usage_metadata={"input_tokens": 5, "output_tokens": 10, "total_tokens": 15})


def judge_reply(messages: list[BaseMessage]) -> str:
    prompt = "\n".join(str(m.content) for m in messages)
    if "UNREADABLE" in prompt:
        return "no idea"
    return json.dumps({"reasoning": "checked", "verdict": "YES" if "GOOD" in prompt else "NO"})


def conversation(qid: str, last: str, axis: str = "SELF_COHERENCE", criteria: str = "YES") -> Conversation:
    return Conversation.model_validate(
        {
            "question_id": qid,
            "axis": axis,
            "conversation": [
                {"role": "user", "content": f"history of {qid}"},
                {"role": "assistant", "content": "an earlier answer"},
                {"role": "user", "content": last},
            ],
            "target_question": f"Is {qid} GOOD?" if "UNREADABLE" not in last else "UNREADABLE question",
            "pass_criteria": criteria,
        }
    )


def make_runner(tmp_path, rounds, *, samples=1, responder=None, judge=None):
    """A runner in the run folder ``tmp_path``; run it inside ``async with runner.folder:``."""
    settings = RunSettings(data="fixture", output=str(tmp_path), rounds=rounds, samples=samples, workers=3)
    responder = responder or Fake(reply=responder_reply)
    judge = judge or Fake(reply=judge_reply)
    config = pacore_config(settings, None).model_copy(update={"retry": FAST_RETRY})
    runner = MultiChallengeRunner(
        settings,
        responder=responder,
        judge_model=judge,
        folder=run_folder(settings, progress=False),
        judge_formats=(None,),
        config=config,
    )
    return runner, responder, judge


async def run(runner, conversations):
    async with runner.folder:
        return await runner.arun(conversations)


def open_results(output):
    return ResultsFile(output / "results.jsonl", key=row_key)


async def test_one_row_per_conversation_and_sample_with_rounds_ttc_and_verdict(tmp_path):
    convs = [conversation("a", "question a"), conversation("b", "question b", criteria="NO")]
    runner, responder, judge = make_runner(tmp_path, [2], samples=2)
    outcome = await run(runner, convs)
    assert outcome.written == 4 and outcome.unfinished == []
    rows = open_results(tmp_path).rows
    assert sorted((r["question_id"], r["sample"]) for r in rows) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    for row in rows:
        assert row["response"].startswith("final-") and "<think>" not in row["response"]
        assert [r["k"] for r in row["rounds"]] == [2, 1]
        assert row["ttc"] == 30  # 3 trajectories x 10 completion tokens
        assert row["verdict"] == "YES" and row["judge_reasoning"] == "checked" and row["judge_format"] == "none"
        assert row["passed"] is (row["pass_criteria"] == "YES")
    assert len(responder.seen) == 4 * 3 and len(judge.seen) == 4
    # The judge sees the final response and the target question only, never the conversation.
    for prompt, _ in zip(judge.seen, range(4), strict=False):
        text = " ".join(str(m.content) for m in prompt)
        assert "history of" not in text and "earlier answer" not in text and "GOOD?" in text


async def test_synthesis_wraps_only_the_last_user_turn(tmp_path):
    runner, responder, _ = make_runner(tmp_path, [2])
    await run(runner, [conversation("a", "question a")])
    synthesis = [call for call in responder.seen if "Reference Responses:" in str(call[-1].content)]
    assert len(synthesis) == 1
    history = [(m.type, m.content) for m in synthesis[0][:-1]]
    assert history == [("human", "history of a"), ("ai", "an earlier answer")]
    assert "question a" in synthesis[0][-1].content and "Reference 2:" in synthesis[0][-1].content


async def test_rounds_0_is_one_plain_call_per_conversation(tmp_path):
    convs = [conversation(q, f"question {q}") for q in "abc"]
    runner, responder, _ = make_runner(tmp_path, [])
    await run(runner, convs)
    assert len(responder.seen) == 3
    assert all(call[-1].content.startswith("question") for call in responder.seen)
    rows = open_results(tmp_path).rows
    assert all(r["rounds"][0]["k"] == 1 and len(r["rounds"]) == 1 and r["ttc"] == 10 for r in rows)


async def test_permanent_errors_are_recorded_and_transient_ones_left_for_a_rerun(tmp_path):
    convs = [
        conversation("ok", "question ok"),
        conversation("too-long", "OVERFLOW question"),
        conversation("flaky", "FLAKY question"),
        conversation("judge-garbage", "UNREADABLE question"),
    ]
    runner, _, _ = make_runner(tmp_path, [2])
    outcome = await run(runner, convs)
    rows = {r["question_id"]: r for r in open_results(tmp_path).rows}
    assert set(rows) == {"ok", "too-long", "judge-garbage"}
    assert "HTTP 400" in rows["too-long"]["error"] and rows["too-long"]["passed"] is False
    assert rows["too-long"]["verdict"] is None
    assert rows["judge-garbage"]["judge_error"].startswith("unreadable judge reply")
    assert rows["judge-garbage"]["verdict"] is None and rows["judge-garbage"]["passed"] is False
    assert rows["judge-garbage"]["judge_raw"] == "no idea"
    assert len(outcome.unfinished) == 1 and outcome.unfinished[0].startswith("flaky#0")

    # The server recovers: a rerun does only the unfinished row: its failed round's two trajectories
    # (resumed from the checkpoint) and the synthesis.
    def recovered(messages):
        last = AIMessage(content=str(messages[-1].content).replace("FLAKY", ""))
        return responder_reply([*messages[:-1], last])

    runner2, responder2, judge2 = make_runner(tmp_path, [2], responder=Fake(reply=recovered))
    outcome2 = await run(runner2, convs)
    assert outcome2.written == 1 and len(responder2.seen) == 3 and len(judge2.seen) == 1
    rows = {r["question_id"]: r for r in open_results(tmp_path).rows}
    assert set(rows) == {"ok", "too-long", "judge-garbage", "flaky"}
    assert rows["flaky"]["error"] is None and rows["flaky"]["passed"]


async def test_rerun_of_a_finished_run_makes_no_model_calls(tmp_path):
    convs = [conversation(q, f"question {q}") for q in "ab"]
    runner, _, _ = make_runner(tmp_path, [2], samples=2)
    await run(runner, convs)
    before = (tmp_path / "results.jsonl").read_bytes()
    runner2, responder2, judge2 = make_runner(tmp_path, [2], samples=2)
    async with runner2.folder:
        assert runner2.pending(convs) == []
        outcome = await runner2.arun(convs)
    assert outcome.written == 0 and responder2.seen == [] and judge2.seen == []
    assert (tmp_path / "results.jsonl").read_bytes() == before


async def test_answered_but_unjudged_row_resumes_from_its_checkpoint(tmp_path):
    """The judge is down after the response was made: the rerun judges it without responding again."""

    def judge_down(messages):
        raise ModelRequestError("HTTP 503 judge overloaded", status=503, retryable=True)

    convs = [conversation("a", "question a")]
    runner, responder, _ = make_runner(tmp_path, [2], judge=Fake(reply=judge_down))
    import pacore_benchmarks.multichallenge.runner as runner_module

    runner_module._JUDGE_CALL_ATTEMPTS, saved = 1, runner_module._JUDGE_CALL_ATTEMPTS
    try:
        outcome = await run(runner, convs)
    finally:
        runner_module._JUDGE_CALL_ATTEMPTS = saved
    assert outcome.written == 0 and "judge call failed" in outcome.unfinished[0]
    assert len(responder.seen) == 3

    runner2, responder2, judge2 = make_runner(tmp_path, [2])
    async with runner2.folder:
        outcome2 = await runner2.arun(convs)
        assert outcome2.written == 1
        assert responder2.seen == [] and len(judge2.seen) == 1
        (row,) = open_results(tmp_path).rows
        assert row["response"].startswith("final-") and row["ttc"] == 30 and row["passed"]
        # A finished row's checkpoint is dropped.
        assert [item async for item in runner2.folder.checkpointer.alist(None)] == []
