"""The batch engine (``RunFolder``): folder lock, settings fingerprint, path checks, payloads, records that
survive a restart, bad problems refused before anything runs, one bound on model calls, and
``pacore solve --output`` resuming through it. Real processes hold the locks; real SQLite checkpoints."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from pacore_graph import PaCoReConfig, PaCoReError, Problem, RunFolder
from pacore_graph.batch.fingerprint import ForeignFolder
from pacore_graph.batch.results_file import ResultsFileError
from pacore_graph.cli import main as pacore_main
from pacore_graph.extend import FolderInUse, ResultsFile, RetryPolicy, RunProgress, SettingsMismatch, Trajectory

ROOT = Path(__file__).resolve().parents[2]
QUICK = RetryPolicy(max_attempts=1)


def folder(path: Path, **fingerprint) -> RunFolder:
    return RunFolder(path, fingerprint=fingerprint or {"model": "m"}, progress=False)


class Scripted:
    """Conclusions are a function of (round, index); ``fail_round`` fails every trajectory of that round;
    each episode records what it saw; the most calls in flight at once are counted."""

    def __init__(self, fail_round: int | None = None):
        self.fail_round = fail_round
        self.calls: list[tuple[int, int]] = []
        self.payloads: list[object] = []
        self.in_flight = self.most_in_flight = 0

    async def explore(self, messages, episode) -> Trajectory:
        self.calls.append((episode.round_index, episode.index))
        self.payloads.append(episode.payload)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.01)
            if episode.round_index == self.fail_round:
                raise ConnectionRefusedError("server down")
            episode.record({"round": episode.round_index, "index": episode.index})
            return Trajectory(content=f"conclusion {episode.round_index}.{episode.index}", completion_tokens=2)
        finally:
            self.in_flight -= 1


# ------------------------------------------------------------------------------------------- the lock


def test_a_second_run_into_a_locked_folder_is_refused_at_once_naming_the_holder(tmp_path):
    first = folder(tmp_path / "out").claim()
    with pytest.raises(FolderInUse, match=rf"in use by another run \(pid {os.getpid()}\)") as refused:
        folder(tmp_path / "out").claim()
    assert refused.value.pid == os.getpid()
    first.release()
    folder(tmp_path / "out").claim().release()  # free again


def test_the_lock_of_a_killed_run_is_gone_with_its_process(tmp_path):
    holder = textwrap.dedent(
        f"""
        import sys, time
        from pacore_graph import RunFolder
        RunFolder({str(tmp_path / "out")!r}, fingerprint={{"model": "m"}}, progress=False).claim()
        print("held", flush=True)
        time.sleep(600)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert process.stdout.readline().strip() == "held"
        with pytest.raises(FolderInUse) as refused:
            folder(tmp_path / "out").claim()
        assert refused.value.pid == process.pid and str(process.pid) in str(refused.value)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    folder(tmp_path / "out").claim().release()  # the kernel dropped the dead run's lock


# ------------------------------------------------------------------------------ fingerprint and path


def test_a_folder_made_with_other_settings_is_refused_naming_each_differing_field(tmp_path):
    made = RunFolder(tmp_path, fingerprint={"model": "a", "rounds": [4], "seed": 1}, settings={"limit": 3})
    made.claim().release()
    saved = json.loads((tmp_path / "run.json").read_text())
    assert saved == {"fingerprint": {"model": "a", "rounds": [4], "seed": 1}, "settings": {"limit": 3}}
    RunFolder(tmp_path, fingerprint={"model": "a", "rounds": (4,), "seed": 1}, settings={"limit": 3}).claim().release()
    with pytest.raises(SettingsMismatch) as refused:
        RunFolder(tmp_path, fingerprint={"model": "b", "rounds": [4], "grading": "v2"}).claim()
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{tmp_path} holds results made with other settings")
    assert refused.value.differing == [
        "grading: folder has none, this run 'v2'",
        "model: folder has 'a', this run 'b'",
        "seed: folder has 1, this run none",
    ]
    assert json.loads((tmp_path / "run.json").read_text()) == saved  # the refused run changed nothing
    folder(tmp_path / "other").claim().release()


def test_a_long_nested_setting_that_differs_is_named_by_its_own_key(tmp_path):
    """A panel (or any setting held as a mapping) is compared key by key: the line names the key that changed,
    however long the whole value is."""
    members = {f"member-{i}": {"weight": 1, "context_window": 8192} for i in range(8)}
    panel = {"models": members, "synthesizer": "member-0", "seed": 0}
    RunFolder(tmp_path, fingerprint={"rounds": [4], "panel": panel}).claim().release()
    changed = {**panel, "models": {**members, "member-7": {"weight": 2, "context_window": 8192}}}
    with pytest.raises(SettingsMismatch) as refused:
        RunFolder(tmp_path, fingerprint={"rounds": [4], "panel": changed}).claim()
    assert refused.value.differing == ["panel.models.member-7.weight: folder has 1, this run 2"]


def test_a_run_json_without_a_fingerprint_is_refused(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"rounds": [4]}))
    with pytest.raises(SettingsMismatch, match="no settings fingerprint"):
        folder(tmp_path).claim()


def snapshot(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (hidden ones included) with its bytes: to show a refused run wrote nothing."""
    return {str(file.relative_to(path)): file.read_bytes() for file in sorted(path.rglob("*")) if file.is_file()}


def test_a_folder_this_project_did_not_make_is_refused_and_nothing_is_written(tmp_path):
    """Issue 25: a results.jsonl from elsewhere was taken as this run's own (its answer printed, exit 0)."""
    (tmp_path / "results.jsonl").write_text('{"id": "problem", "answer": "not yours"}\n')
    (tmp_path / "notes.txt").write_text("mine")
    before = snapshot(tmp_path)
    with pytest.raises(ForeignFolder) as refused:
        folder(tmp_path).claim()
    message = str(refused.value)
    assert "\n" not in message and "no run of pacore-graph made (notes.txt, results.jsonl)" in message
    assert snapshot(tmp_path) == before  # no run.json, no .lock
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "results.jsonl"]


def test_an_empty_folder_or_one_a_killed_claim_left_is_taken(tmp_path):
    (tmp_path / "empty").mkdir()
    folder(tmp_path / "empty").claim().release()
    left = tmp_path / "left"
    left.mkdir()
    (left / ".lock").write_text("123\n")
    (left / ".run.json.123.tmp").write_text("{")  # killed while writing run.json
    folder(left).claim().release()
    assert json.loads((left / "run.json").read_text())["fingerprint"] == {"model": "m"}


def test_a_results_line_no_kill_explains_is_refused_and_the_file_left_as_it_is(tmp_path):
    """Issue 25: every undecodable line was dropped and the file rewritten, then a KeyError traceback."""
    folder(tmp_path).claim().release()
    results = tmp_path / "results.jsonl"
    for text, why in [
        ('{"id": "a"}\nnot json\n{"id": "b"}\n', "line 2 is not JSON (Expecting value at column 1)"),
        ('{"id": "a"}\n{"id": "b", "x": \n', "line 2 is not JSON"),  # whole (newline-ended), so no kill tore it
        ('{"id": "a"}\n{"name": "b"}\n', "line 2 is not a row of this run (KeyError"),
        ('{"id": "a"}\n[1, 2]\n', "line 2 is not a row of this run"),
    ]:
        results.write_text(text)
        before = snapshot(tmp_path)
        with pytest.raises(ResultsFileError, match=re.escape(why)) as refused:
            folder(tmp_path).claim()
        assert "\n" not in str(refused.value) and "left as it is" in str(refused.value)
        assert snapshot(tmp_path) == before
        drop = str(refused.value).rsplit(": ", 1)[1]  # the one command the error gives: it drops that line
        subprocess.run(drop, shell=True, check=True)
        assert results.read_text().splitlines() == text.splitlines()[:1] + text.splitlines()[2:]


def test_a_torn_last_line_is_cut_off_the_end_and_nothing_else_changes(tmp_path):
    path = tmp_path / "rows.jsonl"
    whole = '{"id": 0}\n{"id": 1, "text": "caf\u00e9"}\n'
    path.write_text(whole + '{"id": 2, "te')
    inode = path.stat().st_ino
    results = ResultsFile(path, key=lambda row: row["id"])
    assert results.torn_lines == 1 and path.read_text() == whole and path.stat().st_ino == inode  # cut, not rewritten
    path.write_text(whole + '{"id": 2}')  # a whole row that lost only its newline is kept, and the next row
    results = ResultsFile(path, key=lambda row: row["id"])  # starts on a line of its own
    assert results.torn_lines == 0 and [row["id"] for row in results.rows] == [0, 1, 2]
    results.append({"id": 3})
    assert path.read_text() == whole + '{"id": 2}\n{"id": 3}\n'


def test_the_output_path_is_checked_before_anything_runs(tmp_path):
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(PaCoReError, match="a-file is a file: the output must be a folder"):
        folder(tmp_path / "a-file").claim()
    with pytest.raises(PaCoReError, match="cannot create the output folder"):
        folder(tmp_path / "a-file" / "below").claim()
    made = folder(tmp_path / "new" / "parents" / "too").claim()  # missing parents are made
    made.release()
    assert (tmp_path / "new/parents/too/run.json").exists()


# ------------------------------------------------------------------------------------------ running


async def test_rows_payloads_and_a_rerun_that_skips_what_is_written(tmp_path):
    explorer = Scripted()
    problems = [Problem(f"p{i}", f"problem {i}", payload={"row": i}) for i in range(3)]
    async with folder(tmp_path) as run:
        summary = await run.run(explorer, PaCoReConfig(rounds=[2], retry=QUICK), problems)
    assert summary.fresh == 3 and summary.written == 3 and not summary.failed
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert sorted(row["id"] for row in rows) == ["p0", "p1", "p2"]
    assert all(row["answer"] == "conclusion 1.0" and row["ttc"] == 6 for row in rows)
    assert sorted(p["row"] for p in explorer.payloads) == [0, 0, 0, 1, 1, 1, 2, 2, 2]  # every episode of each
    assert not (tmp_path / "records").exists() or not list((tmp_path / "records").iterdir())

    again = Scripted()
    async with folder(tmp_path) as run:
        summary = await run.run(again, PaCoReConfig(rounds=[2], retry=QUICK), problems)
        assert [item async for item in run.checkpointer.alist(None)] == []  # written rows leave no thread
    assert summary.skipped == 3 and again.calls == []


async def test_records_of_finished_episodes_survive_a_failed_round_and_reach_the_row(tmp_path):
    config = PaCoReConfig(rounds=[3], retry=QUICK)
    seen = []

    def row(outcome):
        seen.append(outcome)
        if outcome.result is None:
            return None
        return {"id": outcome.problem.id, "records": sorted((r["round"], r["index"]) for r in outcome.records)}

    down = Scripted(fail_round=1)  # round 1 (the final one) fails after round 0 recorded three episodes
    async with folder(tmp_path) as run:
        summary = await run.run(down, config, [Problem("p", "q")], row)
    assert "RoundFailedError" in summary.failed["p"] and seen[0].status == "fresh"
    assert seen[0].error.round.round_index == 1  # the error carries its round
    assert len(list((tmp_path / "records").iterdir())) == 1

    healthy = Scripted()
    async with folder(tmp_path) as run:
        summary = await run.run(healthy, config, [Problem("p", "q")], row)
    assert summary.retried == 1 and healthy.calls == [(1, 0)]  # round 0 was not run again
    (written,) = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert written["records"] == [[0, 0], [0, 1], [0, 2], [1, 0]]  # the first run's records came back
    assert not list((tmp_path / "records").iterdir())


async def test_bad_problems_are_refused_before_any_call(tmp_path):
    explorer = Scripted()
    async with folder(tmp_path) as run:
        with pytest.raises(ValueError, match="problem 'b': the problem is empty"):
            await run.run(explorer, PaCoReConfig(), [Problem("a", "fine"), Problem("b", "  ")])
        with pytest.raises(ValueError, match="problem id 'a' appears twice"):
            await run.run(explorer, PaCoReConfig(), [Problem("a", "x"), Problem("a", "y")])
    assert explorer.calls == []
    with pytest.raises(PaCoReError, match="async with RunFolder"):
        await folder(tmp_path).run(explorer, PaCoReConfig(), [Problem("a", "fine")])


async def test_a_row_under_another_key_stops_the_run(tmp_path):
    async with folder(tmp_path) as run:
        with pytest.raises(PaCoReError, match="the row made for problem 'a' has the key 'b'"):
            await run.run(Scripted(), PaCoReConfig(rounds=[]), [Problem("a", "x")], lambda outcome: {"id": "b"})


async def test_problems_in_flight_and_model_calls_are_bounded(tmp_path):
    one_at_a_time = Scripted()
    async with folder(tmp_path / "a") as run:
        problems = [Problem(f"p{i}", f"q{i}") for i in range(4)]
        await run.run(one_at_a_time, PaCoReConfig(rounds=[], retry=QUICK), problems, concurrency=1)
    assert one_at_a_time.most_in_flight == 1

    shared = Scripted()
    bounded = RunFolder(tmp_path / "b", fingerprint={}, progress=False, max_concurrency=3)
    async with bounded as run:  # two runs at once, each allowed 256 by its config: 3 calls in flight at most
        problems = [Problem(f"p{i}", f"q{i}") for i in range(3)]
        await asyncio.gather(
            run.run(shared, PaCoReConfig(rounds=[4], retry=QUICK), problems),
            run.run(shared, PaCoReConfig(rounds=[4], seed=7, retry=QUICK), [Problem("x", "other")]),
        )
    assert shared.most_in_flight == 3 and len(shared.calls) == 4 * 5


def test_the_progress_display_counts_rounds_over_problems_and_the_runs_own_units():
    out = io.StringIO()
    progress = RunProgress(Console(file=out, force_terminal=False, width=120))
    with progress:
        progress.add("problems", 2)
        for _problem in range(2):
            progress({"event": "round_started", "round": 0, "k": 2, "rounds": 2})
            progress({"event": "trajectory_finished", "round": 0, "index": 0, "completion_tokens": 5})
            progress({"event": "trajectory_failed", "round": 0, "index": 1, "error": "x"})
            progress({"event": "round_started", "round": 1, "k": 1, "rounds": 2})
            progress({"event": "trajectory_finished", "round": 1, "index": 0, "completion_tokens": 3})
            progress.advance("problems", note="0 failed")
    tasks = {task.description: task for task in progress.progress.tasks}
    assert set(tasks) == {"problems", "round 1", "final round"}
    assert (tasks["round 1"].completed, tasks["round 1"].total) == (4, 4)
    assert tasks["round 1"].fields["note"] == "10 tokens, 2 failed"
    assert (tasks["final round"].completed, tasks["final round"].total) == (2, 2)
    assert (tasks["problems"].completed, tasks["problems"].total) == (2, 2)


# -------------------------------------------------------------------------------- pacore solve --output


def _cli(capsys, *argv: str) -> tuple[int, list[str], str]:
    code = pacore_main(list(argv))
    captured = capsys.readouterr()
    return code, [line for line in captured.err.splitlines() if line.strip()], captured.out


def test_solve_output_resumes_reads_back_and_refuses_another_problem(capsys, tmp_path, mock_server):
    def reply(body, attempt):
        last = body["messages"][-1]["content"]
        return {"content": "final 391" if "Reference Responses" in last else "draft"}

    out = str(tmp_path / "runs" / "solve")
    with mock_server(reply) as server:
        args = ["--rounds", "2", "--base-url", server.base_url, "--model", "mock-model", "--output", out]
        code, _, printed = _cli(capsys, "solve", "What is 17*23?", *args)
        answer, last = printed.splitlines()
        assert code == 0 and answer == "final 391" and len(server.requests) == 3
        summary = json.loads(last)
        assert summary == {
            "command": "solve",
            "exit_code": 0,
            "output": out,
            "counts": {"total": 1, "done": 1, "failed": 0, "trajectories": 3, "failed_trajectories": 0},
            "answer": "final 391",
            "ttc": summary["ttc"],
            "ttc_approximate": False,
        }
        (row,) = [json.loads(line) for line in Path(out, "results.jsonl").read_text().splitlines()]
        assert row["answer"] == "final 391" and [r["k"] for r in row["rounds"]] == [2, 1]

        code, lines, again = _cli(capsys, "solve", "What is 17*23?", *args)
        assert code == 0 and again == printed and len(server.requests) == 3  # nothing sent
        assert any("answered before" in line for line in lines)

        code, lines, printed = _cli(capsys, "solve", "What is 18*23?", *args)
        assert code == 2 and len(lines) == 1 and "holds results made with other settings (messages:" in lines[0]
        assert lines[0].startswith("pacore: error: ") and printed == ""  # refused: nothing ran, no summary
        assert len(server.requests) == 3


@pytest.mark.parametrize(
    ("output", "named"),
    [
        ("a-file", "is a file: the output must be a folder"),
        ("a-file/below", "cannot create the output folder"),
        ("run.json", "--output names a folder now"),
    ],
)
def test_solve_output_path_is_checked_before_any_server_or_call(capsys, tmp_path, output, named):
    (tmp_path / "a-file").write_text("x")
    closed = "http://127.0.0.1:9/v1"  # never reached: the path is checked first
    code, lines, _ = _cli(capsys, "solve", "q", "--base-url", closed, "--output", str(tmp_path / output))
    assert code == 2 and len(lines) == 1 and named in lines[0]


def test_solve_into_a_folder_in_use_is_refused(capsys, tmp_path):
    held = folder(tmp_path / "out").claim()
    try:
        code, lines, printed = _cli(
            capsys, "solve", "q", "--base-url", "http://127.0.0.1:9/v1", "--output", str(tmp_path / "out")
        )
    finally:
        held.release()
    assert code == 1 and len(lines) == 1 and f"in use by another run (pid {os.getpid()})" in lines[0]
    summary = json.loads(printed)  # a run that could not go on (the folder is busy): its summary says why
    assert summary["exit_code"] == 1 and "in use by another run" in summary["error"]
