"""The batch engine: many problems through PaCoRe into one output folder, resumable after any stop.

    FOLDER/run.json            settings fingerprint (a run with other settings is refused) and settings;
                               a folder with other files and no run.json is not taken over
    FOLDER/.lock               held while a run writes here (a second run is refused at once, naming it)
    FOLDER/results.jsonl       one row per finished problem (a row a kill tore is dropped on load)
    FOLDER/checkpoints.sqlite  LangGraph checkpoints of the problems in flight, one thread each
    FOLDER/records/*.jsonl     episode records of the problems in flight (``EpisodeContext.record``)

A problem whose row is in the results is skipped. Any other runs on its checkpoint thread (its id plus a
digest of its messages, of what the config sends and of ``salt``): a thread cut by a kill continues
without redoing finished trajectories, a finished thread whose row was not written yet is read back, a
thread whose round failed runs that round's failed trajectories again (:mod:`pacore_graph.batch.resume`).
``row(outcome)`` turns what came of the problem (result or error, records) into the row to append, or
None to leave the problem to the next run; once its row is on disk, its thread and records are deleted.

One use::

    async with RunFolder("runs/x", fingerprint={"model": name, "rounds": [4]}) as folder:
        summary = await folder.run(model, PaCoReConfig(rounds=[4]), [Problem("p1", "What is 17*23?")])
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import os
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import convert_to_openai_messages
from langgraph.checkpoint.base import BaseCheckpointSaver
from pydantic import BaseModel, Field

from pacore_graph.batch.escalation import earlier_rows, keep_earlier_results
from pacore_graph.batch.fingerprint import check_fingerprint, refuse_foreign, save_settings
from pacore_graph.batch.folder_lock import FolderLock
from pacore_graph.batch.progress import RunProgress
from pacore_graph.batch.results_file import RESULTS_FILE, ResultsFile
from pacore_graph.batch.resume import Status, open_checkpointer, thread_id, thread_status
from pacore_graph.concurrency.limiter import ConcurrencyLimiter
from pacore_graph.config import PaCoReConfig
from pacore_graph.errors import (
    ModelRequestError,
    PaCoReError,
    RoundFailedError,
    UsageError,
    is_disk_full,
    stop_if_disk_full,
)
from pacore_graph.explorers.panel import Models
from pacore_graph.graph.reuse_pool import reuse_pool
from pacore_graph.graph.runner import MessagesInput, PaCoReRunner, to_messages
from pacore_graph.records import PaCoReResult

RECORDS_DIR = "records"


@dataclass(frozen=True)
class Problem:
    """One item of a run: an ``id`` unique in the folder, the ``messages`` PaCoRe answers (a problem
    string or a conversation), and a ``payload`` that every explorer of it receives as
    ``EpisodeContext.payload`` (a SWE task row, a pool of first-round trajectories ...)."""

    id: str
    messages: MessagesInput
    payload: Any = None


@dataclass
class ProblemOutcome:
    """What came of one problem: its ``result``, or the ``error`` that stopped it (a
    :class:`~pacore_graph.errors.RoundFailedError` carries the failed round); how its thread started
    (``status``); and the records its explorers made, those of earlier runs of the thread included (an
    episode cut by a kill after its record runs again: its record may then appear twice, later last)."""

    problem: Problem
    result: PaCoReResult | None = None
    error: Exception | None = None
    status: Status = "fresh"
    records: list[Any] = field(default_factory=list)


class RunSummary(BaseModel):
    """What one call of :meth:`RunFolder.run` did."""

    total: int
    skipped: int = Field(0, description="already in the results file: not run again")
    fresh: int = 0
    resumed: int = Field(0, description="continued from a checkpoint (finished trajectories kept)")
    finished_from_checkpoint: int = Field(0, description="graph had finished, only the row was missing")
    retried: int = Field(0, description="a round that had failed entirely was tried again")
    failed: dict[str, str] = Field(default_factory=dict, description="problem id -> reason; rerun to retry")
    refused: list[str] = Field(
        default_factory=list,
        description="failed problems the server refused outright (an HTTP 4xx on every "
        "trajectory, such as a prompt beyond the model's context): a rerun would fail the same way",
    )

    @property
    def written(self) -> int:
        return self.fresh + self.resumed + self.finished_from_checkpoint + self.retried


Row = Callable[[ProblemOutcome], "dict[str, Any] | None | Awaitable[dict[str, Any] | None]"]
_COUNTERS = {"fresh": "fresh", "resumed": "resumed", "finished": "finished_from_checkpoint", "retried": "retried"}


def answer_row(outcome: ProblemOutcome) -> dict[str, Any] | None:
    """The default row: the problem's id, answer, rounds, usage, TTC and failures, and the conversation it
    answered (OpenAI-style ``messages``: what ``pacore view`` shows and rebuilds later rounds' prompts over);
    nothing for an error."""
    if outcome.result is None:
        return None
    return {"id": outcome.problem.id, **outcome.result.summary(), "messages": openai_messages(outcome.problem.messages)}


def openai_messages(messages: MessagesInput) -> list[dict[str, Any]]:
    """A problem's messages as OpenAI-style dicts (role, content, tool calls): plain JSON for a results row."""
    converted: list[dict[str, Any]] = convert_to_openai_messages(to_messages(messages))
    return converted


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:1000]


def refused_outright(error: BaseException) -> bool:
    """Every trajectory of the failed round got an HTTP 4xx that is not worth a retry: the request itself is
    what the server refuses (too long for its context, malformed), so running it again changes nothing."""
    if isinstance(error, ModelRequestError):
        return error.status is not None and 400 <= error.status < 500 and not error.retryable
    if not isinstance(error, RoundFailedError):
        return False
    records = error.round.trajectories
    return bool(records) and all(
        t.failed and t.error_status is not None and 400 <= t.error_status < 500 and not t.error_transient
        for t in records
    )


class RecordLog:
    """The records of one problem in flight, each appended to a JSONL file the moment it arrives.

    Why: after a kill, finished episodes are not run again (their checkpoint writes are kept), so their
    records exist only here. Lines of another thread (the same id run with other settings) are ignored.
    """

    def __init__(self, path: Path, thread: str):
        self.path, self.thread = path, thread
        self._file: ResultsFile | None = None
        self.items: list[Any] = []
        if path.exists():
            self._file = ResultsFile(path, key=lambda line: line["seq"])
            self.items = [line["record"] for line in self._file.rows if line.get("thread") == thread]

    def append(self, record: Any) -> None:
        if self._file is None:
            self._file = ResultsFile(self.path, key=lambda line: line["seq"])
        self._file.append({"seq": len(self._file.rows), "thread": self.thread, "record": record})
        self.items.append(record)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


class RunFolder:
    """An output folder for resumable runs of many problems; use it as ``async with RunFolder(...)``.

    - ``fingerprint``: what the results depend on (model, schedule, sampling, scoring rules ...); a folder
      made with another one is refused with one line naming the differing fields. ``settings``: the whole
      configuration, kept in ``run.json`` for the reader.
    - ``key(row)``: the id of the problem a results row belongs to (default ``row["id"]``).
    - ``progress``: the display (a :class:`RunProgress`), True for one on stderr, False for none.
    - ``max_concurrency``: one bound on the model calls of every run in this folder together
      (:attr:`limiter`); None leaves each run to its config's ``max_concurrency``.
    - ``escalation``: a folder whose fingerprint differs only in a larger ``rounds`` continues at the new
      schedule, each problem reusing its earlier row's trajectories where they are draws of the new requests
      (:mod:`pacore_graph.batch.escalation`); False refuses it like any other change (a folder whose other files
      follow its rows).

    :meth:`claim` (also done on entry) checks the path, takes the folder's lock and checks the fingerprint,
    synchronously: call it first to refuse before a server starts or anything is spent.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fingerprint: Mapping[str, Any],
        settings: Mapping[str, Any] | None = None,
        key: Callable[[dict[str, Any]], str] | None = None,
        progress: RunProgress | bool = True,
        max_concurrency: int | None = None,
        escalation: bool = True,
    ):
        self.path = Path(path)
        self.fingerprint = dict(fingerprint)
        self.settings = dict(settings or {})
        self.key = key or (lambda row: row["id"])
        self.progress = progress if isinstance(progress, RunProgress) else RunProgress(enabled=progress)
        self.limiter = ConcurrencyLimiter(max_concurrency) if max_concurrency else None
        self._results: ResultsFile | None = None
        self.escalation = escalation
        self.earlier: dict[str, dict[str, Any]] = {}  # problem id -> its row at a smaller schedule (escalation)
        self.checkpointer: BaseCheckpointSaver[str] | None = None  # while the folder is entered
        self._lock = FolderLock(self.path)
        self._stack: AsyncExitStack | None = None

    # -- the folder ----------------------------------------------------------------------------------
    def claim(self) -> RunFolder:
        """Make sure the folder can be used (a folder, writable, empty or made by a run with this fingerprint:
        refused before anything is written), lock it, read its results, save the fingerprint."""
        if self._lock.held:
            return self
        prepare_folder(self.path)
        refuse_foreign(self.path)
        try:
            self._lock.acquire()
        except OSError as exc:
            stop_if_disk_full(exc, self.path)
            raise
        try:
            earlier_rounds = check_fingerprint(self.path, self.fingerprint, escalation=self.escalation)
            if earlier_rounds is not None:
                self._escalate(earlier_rounds)
            self.earlier = earlier_rows(self.path, self.key) if self.escalation else {}
            self._results = self.results_file(RESULTS_FILE, self.key)  # a file this run did not write is refused
            save_settings(self.path, self.fingerprint, self.settings)
        except BaseException as exc:
            self._lock.release()
            stop_if_disk_full(exc, self.path)
            raise
        return self

    def release(self) -> None:
        self._lock.release()

    def check_earlier(self, problems: Iterable[Problem], config: PaCoReConfig) -> None:
        """Refuse in one line, before anything is sent, an earlier row (escalation) that a problem would continue
        from and that is no PaCoRe result or ran a larger schedule than ``config``."""
        for problem in problems:
            row = self.earlier.get(problem.id)
            if row is not None:
                try:
                    reuse_pool(row, config)
                except (TypeError, ValueError) as exc:
                    raise UsageError(f"problem {problem.id!r} of {self.path}: its earlier row: {exc}") from None

    def _escalate(self, earlier_rounds: list[int]) -> None:
        kept = keep_earlier_results(self.path, earlier_rounds)
        where = f"; its rows, now {kept.name}, are what it reuses" if kept is not None else ""
        self.progress.print(
            f"{self.path} ran rounds {earlier_rounds}: continuing at rounds {self.fingerprint.get('rounds')}, "
            f"reusing the trajectories that are draws of the new requests{where}"
        )

    @property
    def results(self) -> ResultsFile:
        """The folder's results file (``results.jsonl``), read when the folder was claimed."""
        if self._results is None:
            raise PaCoReError("claim the RunFolder first (`folder.claim()`, or `async with folder:`)")
        return self._results

    def results_file(self, name: str, key: Callable[[dict[str, Any]], Any]) -> ResultsFile:
        """Another append-only JSONL file in the folder (a pool, say); a torn last line is reported."""
        results = ResultsFile(self.path / name, key=key)
        if results.torn_lines:
            self.progress.print(f"dropped {results.torn_lines} torn line(s) from {results.path}")
        return results

    async def __aenter__(self) -> RunFolder:
        self.claim()
        self._stack = AsyncExitStack()
        try:
            self.checkpointer = await self._stack.enter_async_context(open_checkpointer(self.path))
            self._stack.enter_context(self.progress)
        except BaseException as exc:
            await self._stack.aclose()
            self.release()
            stop_if_disk_full(exc, self.path)
            raise
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            if self._stack is not None:
                await self._stack.aclose()
        finally:
            self._stack, self.checkpointer = None, None
            self.release()

    # -- running problems ----------------------------------------------------------------------------
    async def run(
        self,
        model_or_explorer: Models,
        config: PaCoReConfig,
        problems: Iterable[Problem],
        row: Row = answer_row,
        *,
        concurrency: int | None = None,
        label: str | None = "problems",
        trace: bool = False,
        salt: Iterable[str] = (),
    ) -> RunSummary:
        """Solve every problem whose row is not in the results yet, ``concurrency`` at a time (None: all).

        A problem that fails, or whose ``row`` returns None or raises, is reported in the summary and left
        for the next run; the others go on. ``label`` names the display's bar of these problems (None: no
        bar). ``trace`` keeps full trajectories on the results (``result.trajectories``, this process's
        only). ``salt`` (a model name, an agent's settings) separates the threads of runs that send
        different things under one config.
        """
        checkpointer = self.checkpointer
        if checkpointer is None:
            raise PaCoReError("use the RunFolder as `async with RunFolder(...) as folder:` before running")
        problems = list(problems)
        messages = _checked_messages(problems)
        done = self.results.done()
        todo = [problem for problem in problems if problem.id not in done]
        self.check_earlier(todo, config)
        summary = RunSummary(total=len(problems), skipped=len(problems) - len(todo))
        runner = PaCoReRunner(model_or_explorer, config, checkpointer=checkpointer, limiter=self.limiter)
        gate = asyncio.Semaphore(concurrency) if concurrency else contextlib.nullcontext()
        if label:
            self.progress.add(label, len(todo))

        async def one(problem: Problem) -> None:
            async with gate:
                thread = thread_id(problem.id, messages[problem.id], config, *salt)
                records = RecordLog(self._records_path(problem.id), thread)
                outcome = await self._solve(runner, problem, messages[problem.id], thread, records, trace)
                await self._write(outcome, row, thread, records, summary, checkpointer)
            if label:
                self.progress.advance(label, note=f"{len(summary.failed)} failed" if summary.failed else None)

        try:
            async with asyncio.TaskGroup() as group:
                for problem in todo:
                    group.create_task(one(problem))
        except BaseExceptionGroup as failed:  # a broken row or folder stops the run: say why, plainly
            raise failed.exceptions[0] from None
        return summary

    async def _solve(
        self, runner: PaCoReRunner, problem: Problem, messages: Any, thread: str, records: RecordLog, trace: bool
    ) -> ProblemOutcome:
        outcome = ProblemOutcome(problem, records=records.items)
        try:
            outcome.status, outcome.result = await thread_status(runner, thread)
            if outcome.result is None:
                outcome.result = await runner.arun(
                    messages,
                    {"configurable": {"thread_id": thread}},
                    resume=outcome.status != "fresh",
                    durability="sync",
                    payload=problem.payload,
                    on_record=records.append,
                    on_event=self.progress,
                    trace=trace,
                    reuse=self.earlier.get(problem.id),
                )
        except Exception as exc:  # one problem's failure must not cost the others, unless it is the disk's
            stop_if_disk_full(exc, self.path)  # every other problem would fail the same way
            outcome.error = exc
        return outcome

    async def _write(
        self,
        outcome: ProblemOutcome,
        row: Row,
        thread: str,
        records: RecordLog,
        summary: RunSummary,
        checkpointer: BaseCheckpointSaver[str],
    ) -> None:
        problem_id = outcome.problem.id
        try:
            made = row(outcome)
            if inspect.isawaitable(made):
                made = await made
        except Exception as exc:  # noqa: BLE001 - the row is left to the next run, with why
            summary.failed[problem_id] = describe(exc)
            return
        if made is None:
            summary.failed[problem_id] = describe(outcome.error) if outcome.error else "no row was made"
            if outcome.error is not None and refused_outright(outcome.error):
                summary.refused.append(problem_id)
            return
        if self.key(made) != problem_id:
            raise PaCoReError(f"the row made for problem {problem_id!r} has the key {self.key(made)!r}")
        try:
            self.results.append(made)
        except OSError as exc:
            stop_if_disk_full(exc, self.path)
            raise
        try:
            await checkpointer.adelete_thread(thread)  # the row is on disk: the rest is spare
        except Exception as exc:
            if not is_disk_full(exc, self.path):  # a full disk keeps the spare thread: the row is what counts
                raise
        records.remove()
        counter = _COUNTERS[outcome.status]
        setattr(summary, counter, getattr(summary, counter) + 1)

    def _records_path(self, problem_id: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", problem_id)[:80]
        return self.path / RECORDS_DIR / f"{safe}-{hashlib.sha256(problem_id.encode()).hexdigest()[:8]}.jsonl"


def prepare_folder(path: Path) -> None:
    """Create the output folder (and its parents); one clear line when it cannot be one, before anything runs."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path} is a file: the output must be a folder (a run keeps results and checkpoints there)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the output folder {path}: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write in the output folder {path}")


def _checked_messages(problems: list[Problem]) -> dict[str, Any]:
    """Every problem's messages, converted now: a bad problem is one clear error before anything is spent."""
    converted: dict[str, Any] = {}
    for problem in problems:
        if problem.id in converted:
            raise ValueError(f"problem id {problem.id!r} appears twice: ids must be unique in a run")
        try:
            converted[problem.id] = to_messages(problem.messages)
        except ValueError as exc:
            raise ValueError(f"problem {problem.id!r}: {exc}") from None
    return converted
