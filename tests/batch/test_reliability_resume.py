"""Resume: a run killed with SIGKILL and started again redoes neither finished problems nor finished
trajectories, and ends with the same rows as a clean run.

The kills are real (a subprocess, SIGKILL); requests are counted at the emulator or by the explorer.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from waits import still_running, wait_until

from pacore_benchmarks.perf.faults import (
    FaultSettings,
    run_resume_scenario,
    saved_trajectories,
    trajectories_on_disk,
)
from pacore_graph import PaCoReConfig, Problem, RoundFailedError, RunFolder
from pacore_graph.batch.resume import solve_resumable
from pacore_graph.extend import ResultsFile, RetryPolicy, Trajectory, open_checkpointer, thread_id
from pacore_graph.graph.runner import PaCoReRunner, to_messages

ROOT = Path(__file__).resolve().parents[2]


def test_benchmark_run_killed_mid_problem_resumes_without_redoing_work(tmp_path):
    settings = FaultSettings(problems=1, resume_problems=3, resume_rounds=[8])
    report = run_resume_scenario(settings, tmp_path)
    assert report.saved_in_flight > 0, "the kill must land while a problem is partly done"
    assert report.resume_requests == report.expected_resume_requests, report
    assert report.redone == 0
    assert report.rows == 3 and report.ids_equal_clean and report.duplicates == 0 and report.torn_lines == 0
    assert report.resume_summary["resumed"] >= 1
    assert report.resumed_ok


class CountingExplorer:
    """Conclusions are a function of (round, index); every call is logged; ``down`` makes calls fail."""

    def __init__(self, down_rounds: set[int] | None = None):
        self.calls: list[tuple[int, int]] = []
        self.down_rounds = down_rounds or set()

    async def explore(self, messages, episode) -> Trajectory:
        round_index, index = episode.round_index, episode.index
        self.calls.append((round_index, index))
        if round_index in self.down_rounds:
            raise ConnectionRefusedError("server down")
        return Trajectory(content=f"conclusion {round_index}.{index}", completion_tokens=3, prompt_tokens=2)


QUICK = RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0)


async def test_a_finished_thread_is_read_back_not_run_again(tmp_path):
    config = PaCoReConfig(rounds=[3], retry=QUICK)
    explorer = CountingExplorer()
    messages = to_messages("what is 2+2?")
    thread = thread_id("p1", messages, config)
    async with open_checkpointer(tmp_path) as saver:
        runner = PaCoReRunner(explorer, config, checkpointer=saver)
        first, status1 = await solve_resumable(runner, messages, thread)
        second, status2 = await solve_resumable(runner, messages, thread)
    assert (status1, status2) == ("fresh", "finished")
    assert len(explorer.calls) == 4
    assert second.answer == first.answer and second.ttc == first.ttc


async def test_a_round_that_failed_entirely_is_tried_again_keeping_earlier_rounds(tmp_path):
    config = PaCoReConfig(rounds=[3, 2], retry=QUICK)
    messages = to_messages("what is 2+2?")
    thread = thread_id("p1", messages, config)
    outage = CountingExplorer(down_rounds={1})
    async with open_checkpointer(tmp_path) as saver:
        with pytest.raises(RoundFailedError, match="none of its 2 trajectories"):
            await solve_resumable(PaCoReRunner(outage, config, checkpointer=saver), messages, thread)
    assert sorted(set(outage.calls)) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]

    healthy = CountingExplorer()
    async with open_checkpointer(tmp_path) as saver:  # a new process would reopen the same file
        result, status = await solve_resumable(PaCoReRunner(healthy, config, checkpointer=saver), messages, thread)
    assert status == "retried"
    assert sorted(healthy.calls) == [(1, 0), (1, 1), (2, 0)]  # round 1 was not redone
    assert [r.k for r in result.rounds] == [3, 2, 1]
    assert not result.failures


async def test_a_first_round_that_failed_entirely_is_tried_again(tmp_path):
    config = PaCoReConfig(rounds=[2], retry=QUICK)
    messages = to_messages("what is 2+2?")
    thread = thread_id("p1", messages, config)
    async with open_checkpointer(tmp_path) as saver:
        with pytest.raises(RoundFailedError, match="none of its 2 trajectories"):
            await solve_resumable(
                PaCoReRunner(CountingExplorer(down_rounds={0}), config, checkpointer=saver), messages, thread
            )
        healthy = CountingExplorer()
        result, status = await solve_resumable(PaCoReRunner(healthy, config, checkpointer=saver), messages, thread)
    assert status == "retried"
    assert sorted(healthy.calls) == [(0, 0), (0, 1), (1, 0)]
    assert [r.k for r in result.rounds] == [2, 1] and not result.failures


def test_thread_ids_separate_what_is_sent():
    messages = to_messages("q")
    base = thread_id("p1", messages, PaCoReConfig(rounds=[4]), "model-a")
    assert base.startswith("p1:")
    assert thread_id("p1", messages, PaCoReConfig(rounds=[4], max_concurrency=3), "model-a") == base
    assert thread_id("p1", messages, PaCoReConfig(rounds=[8]), "model-a") != base
    assert thread_id("p1", to_messages("q2"), PaCoReConfig(rounds=[4]), "model-a") != base
    assert thread_id("p1", messages, PaCoReConfig(rounds=[4]), "model-b") != base


async def test_failed_problems_are_not_written_and_a_rerun_completes_them(tmp_path):
    config = PaCoReConfig(rounds=[2], retry=QUICK)
    problems = [Problem(id=f"p{i}", messages=f"problem {i}") for i in range(3)]

    class DownFor:
        def __init__(self, bad: str):
            self.bad = bad

        async def explore(self, messages, episode):
            if self.bad in messages[-1].content:
                raise ConnectionRefusedError("cannot connect")
            return Trajectory(content="fine", completion_tokens=1)

    def row(outcome):
        return None if outcome.result is None else {"id": outcome.problem.id, "answer": outcome.result.answer}

    async with RunFolder(tmp_path, fingerprint={"rounds": [2]}, progress=False) as folder:
        first = await folder.run(DownFor("problem 1"), config, problems, row)
    assert first.fresh == 2 and list(first.failed) == ["p1"]
    assert "ConnectionRefusedError" in first.failed["p1"]
    assert sorted(r["id"] for r in ResultsFile(tmp_path / "results.jsonl", key=lambda r: r["id"]).rows) == ["p0", "p2"]

    async with RunFolder(tmp_path, fingerprint={"rounds": [2]}, progress=False) as folder:
        second = await folder.run(DownFor("nothing"), config, problems, row)
    assert second.skipped == 2 and second.retried == 1 and not second.failed
    assert sorted(json.loads(x)["id"] for x in (tmp_path / "results.jsonl").read_text().splitlines()) == [
        "p0",
        "p1",
        "p2",
    ]


NODE_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from langgraph.graph import END, START, MessagesState, StateGraph
    from pacore_graph import PaCoReConfig, PaCoReNode
    from pacore_graph.extend import Trajectory, open_checkpointer

    LOG = sys.argv[2]

    class Slow:
        async def explore(self, messages, episode):
            round_index, index = episode.round_index, episode.index
            await asyncio.sleep(0.1 + 0.4 * index if round_index == 0 else 0.05)
            with open(LOG, "a") as log:
                log.write(json.dumps([round_index, index]) + "\\n")
            return Trajectory(content=f"conclusion {round_index}.{index}", completion_tokens=1)

    async def main():
        async with open_checkpointer(sys.argv[1]) as saver:
            builder = StateGraph(MessagesState)
            builder.add_node("pacore", PaCoReNode(Slow(), PaCoReConfig(rounds=[6])))
            builder.add_edge(START, "pacore")
            builder.add_edge("pacore", END)
            graph = builder.compile(checkpointer=saver)
            config = {"configurable": {"thread_id": "chat-1"}}
            pending = (await graph.aget_state(config)).next
            out = await graph.ainvoke(None if pending else {"messages": [("user", "hi")]}, config)
            print(out["messages"][-1].content)

    asyncio.run(main())
    """
)


def test_pacore_node_in_a_checkpointed_user_graph_resumes_after_sigkill(tmp_path):
    """A PaCoReNode runs as a subgraph of the user's graph and so shares its checkpointer: resuming the
    user's thread with input None continues the PaCoRe round where it died."""
    script = tmp_path / "node_run.py"
    script.write_text(NODE_SCRIPT)
    first_log, second_log = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, str(script), str(tmp_path), str(first_log)], cwd=ROOT, env=env)

    def three_in_the_checkpoint() -> bool:  # three finished, and every finished one is in the checkpoint
        logged = _lines(first_log)
        saved = logged >= 3 and asyncio.run(saved_trajectories(tmp_path, set())) >= logged == _lines(first_log)
        return still_running(process, "the run") and saved

    wait_until(three_in_the_checkpoint, 60, what="three trajectories finished and reached the checkpoint")
    process.send_signal(signal.SIGKILL)
    process.wait()
    finished = {tuple(json.loads(line)) for line in first_log.read_text().splitlines()}
    assert 3 <= len(finished) < 6

    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path), str(second_log)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    again = [tuple(json.loads(line)) for line in second_log.read_text().splitlines()]
    assert not finished & set(again), "finished trajectories were run again"
    assert sorted(again) == sorted({(0, i) for i in range(6)} - finished) + [(1, 0)]
    assert done.stdout.strip() == "conclusion 1.0"


def test_a_torn_trailing_row_is_dropped_on_load_and_the_next_append_starts_a_clean_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"id": 0}\n{"id": 1}\n{"id": 2, "payl')  # a writer killed mid-write of row 2
    results = ResultsFile(path, key=lambda row: row["id"])
    assert results.torn_lines == 1 and [row["id"] for row in results.rows] == [0, 1]
    results.append({"id": 2})
    assert path.read_text() == '{"id": 0}\n{"id": 1}\n{"id": 2}\n'


def test_a_sigkilled_writer_loses_at_most_the_row_it_was_writing(tmp_path):
    path = tmp_path / "rows.jsonl"
    writer = textwrap.dedent(
        f"""
        from pacore_graph.extend import ResultsFile
        results = ResultsFile({str(path)!r}, key=lambda row: row["id"])
        start = len(results.rows)
        for i in range(start, start + 100000):
            results.append({{"id": i, "payload": "x" * 5000}})
        """
    )
    for _ in range(4):
        before = _lines(path)
        process = subprocess.Popen([sys.executable, "-c", writer])
        # killed mid-stream of appends
        wait_until(lambda start=before: _lines(path) >= start + 20, 60, what="20 rows appended", every=0.005)
        process.send_signal(signal.SIGKILL)
        process.wait()
        reread = ResultsFile(path, key=lambda row: row["id"])
        assert reread.torn_lines <= 1  # Linux may cut the write in flight at a page boundary: that row only
        assert ResultsFile(path, key=lambda row: row["id"]).torn_lines == 0  # the first load dropped it
    rows = [json.loads(line) for line in path.read_text().splitlines()]  # every line whole
    assert [row["id"] for row in rows] == list(range(len(rows))) and len(rows) >= 80
    assert all(row["payload"] == "x" * 5000 for row in rows)


def test_resume_checkpoint_file_lives_in_the_output_folder(tmp_path):
    async def touch():
        async with open_checkpointer(tmp_path / "out"):
            pass

    asyncio.run(touch())
    assert (tmp_path / "out" / "checkpoints.sqlite").exists()


def _lines(path: Path) -> int:
    return path.read_text().count("\n") if path.exists() else 0


@pytest.mark.embedded
def test_embedded_model_run_killed_mid_problem_resumes_without_redoing_work(embedded_server, tmp_path):
    """The same kill-and-resume on the real embedded model; calls are counted by the worker itself."""
    out, calls = tmp_path / "run", tmp_path / "calls.jsonl"
    command = [
        sys.executable,
        "-m",
        "pacore_benchmarks.perf.faults_worker",
        "--base-url",
        embedded_server.base_url,
        "--model",
        embedded_server.model,
        "--output",
        str(out),
        "--problems",
        "2",
        "--rounds",
        "3",
        "--max-tokens",
        "24",
        "--request-timeout",
        "120",
        "--call-log",
        str(calls),
    ]
    per_problem = 3 + 1
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL)

    def one_written_one_partly_done() -> bool:  # and every finished call on disk (none finished meanwhile)
        answered = _lines(calls)
        partly = _lines(out / "results.jsonl") == 1 and answered > per_problem
        done = partly and trajectories_on_disk(out, per_problem) >= answered == _lines(calls)
        return still_running(process, "the run") and done

    wait_until(one_written_one_partly_done, 300, what="a problem written and the next partly done", every=0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    finished_before = _lines(calls)
    saved = trajectories_on_disk(out, per_problem)
    assert saved == finished_before, "every finished call was on disk at the kill"
    assert finished_before > per_problem

    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["skipped"] == 1 and summary["resumed"] == 1
    assert _lines(calls) - finished_before == 2 * per_problem - saved  # nothing finished was redone
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(row["id"] for row in rows) == ["p000", "p001"]
    assert all(row["answer"].strip() for row in rows)
