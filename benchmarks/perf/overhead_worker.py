"""One measured client run in a process of its own, so its CPU time and peak RSS are its alone.

    python -m pacore_benchmarks.perf.overhead_worker '{"client": "floor", "base_url": ..., "rounds": [32, 4]}'

Imports happen before the clock starts; the measured span covers building the client (session, graph)
and solving every problem concurrently. Wall time ends when the last answer arrives; CPU time also
counts closing the session and whatever the collector does meanwhile. The last stdout line is the
measurement as JSON.

The spec's ``gc`` is the same for every client of a comparison: ``default`` leaves CPython's collector as
the process found it (what a library user gets); ``spaced`` raises the oldest generation's threshold while
the client's runs are in flight, for the operator through ``PaCoReConfig(spaced_gc=True)`` and for the
floor (and, in ``reference_worker``, the reference pipeline) by setting the same thresholds around its run.
Each result says which thresholds were in force at most of its collections.
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import io
import pstats
import resource
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

GcSetting = Literal["default", "spaced"]
SYSTEM = "You are a careful competition mathematician. Reason step by step, then give the answer in \\boxed{}."


# proxy: the operator behind `pacore serve`, called over HTTP; reference: stepfun-ai/PaCoRe's pipeline,
# run by reference_worker.py under reference_python (a venv of its own)
ClientName = Literal["floor", "operator", "proxy", "reference"]


class WorkerSpec(BaseModel):
    client: ClientName
    base_url: str
    model: str
    rounds: list[int]
    problems: int
    concurrency: int = 1024
    stream: bool = False
    seed: int = 42
    checkpoint: str | None = None  # SQLite file: run the operator graph with a checkpointer
    profile: str | None = None  # write cProfile statistics of the run to this file
    reference_python: str | None = None
    # default: CPython's collector as the process found it; spaced: full passes rarer while the client's runs
    # are in flight (the operator: PaCoReConfig.spaced_gc; the floor and the reference: the same thresholds,
    # full_pass_threshold being pacore_graph.extend.SPACED_GC_FULL_PASS_THRESHOLD)
    gc: GcSetting = "default"
    full_pass_threshold: int = 100


class ClientCost(BaseModel):
    """What one client run cost and got done: one worker's result, and the report's view of it."""

    client: str
    wall_s: float
    cpu_s: float
    trajectories: int
    failures: int
    answered: int
    peak_rss_mb: float
    gc_full_passes: int = 0
    gc_longest_pause_ms: float = 0.0
    gc_thresholds: list[int] | None = Field(
        None, description="CPython's GC thresholds in force at most of the run's collections (None: none ran)"
    )
    gc_thresholds_seen: dict[str, int] = Field(
        default_factory=dict, description="collections of the run per thresholds in force ('700,10,100': 412)"
    )
    checkpoint: dict[str, Any] | None = None


class WorkerResult(ClientCost):
    completion_tokens: int


def make_problems(count: int) -> list[list[dict[str, str]]]:
    """Deterministic math-like problems of a realistic length (a system prompt and ~400 characters)."""
    problems = []
    for i in range(count):
        text = (
            f"Problem {i + 1}. Let $a_1 = {i + 2}$ and $a_{{n+1}} = a_n^2 - {i % 7 + 1} a_n + {i % 5 + 2}$ for "
            f"$n \\ge 1$. Find the remainder when $a_{{{i % 40 + 10}}}$ is divided by {1000 + i}. Justify each step "
            "carefully, consider all cases, and check small values before concluding; the answer is an integer "
            "between 0 and 999 inclusive."
        )
        problems.append([{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}])
    return problems


_answered_at: list[float] = []


@contextmanager
def spaced_full_passes(spec: WorkerSpec) -> Iterator[None]:
    """With ``gc="spaced"``, the thresholds ``PaCoReConfig(spaced_gc=True)`` sets around the operator's runs, set
    around another client's run: the oldest generation's raised to ``full_pass_threshold`` (unless the
    collector is off or it is already that high), put back afterwards unless someone changed them meanwhile.

    A copy of ``pacore_graph.graph.gc_policy``'s few lines for one run at a time (the threshold comes in the
    spec): importing ``pacore_graph`` would add its imports to the floor's peak RSS."""
    current = gc.get_threshold()
    applied = (current[0], current[1], spec.full_pass_threshold)
    if spec.gc != "spaced" or current[0] == 0 or current[2] >= spec.full_pass_threshold:
        yield
        return
    gc.set_threshold(*applied)
    try:
        yield
    finally:
        if gc.get_threshold() == applied:
            gc.set_threshold(*current)


def _mark_answered() -> None:
    """When the last answer arrived: the wall clock stops here, before sessions close (CPU runs on to the end)."""
    _answered_at.append(time.perf_counter())


def _raise_file_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def _run_floor(spec: WorkerSpec, problems: list[list[dict[str, str]]]) -> tuple[int, int, int, int]:
    from pacore_benchmarks.perf.floor import run_floor

    with spaced_full_passes(spec):
        result = await run_floor(
            spec.base_url,
            spec.model,
            problems,
            spec.rounds,
            concurrency=spec.concurrency,
            stream=spec.stream,
            seed=spec.seed,
            on_answered=_mark_answered,
        )
    answered = sum(1 for answer in result.answers if answer.strip())
    return result.trajectories, result.failures, result.completion_tokens, answered


def _operator_graph(spec: WorkerSpec, checkpointer: Any = None) -> tuple[Any, Any]:
    from langgraph.graph import END, START, MessagesState, StateGraph

    from pacore_graph import PaCoReConfig, PaCoReNode, chat_model

    llm = chat_model(base_url=spec.base_url, model=spec.model)
    config = PaCoReConfig(
        rounds=spec.rounds,
        max_concurrency=spec.concurrency,
        seed=spec.seed,
        stream=spec.stream,
        spaced_gc=spec.gc == "spaced",
    )
    builder = StateGraph(MessagesState)
    builder.add_node("pacore", PaCoReNode(llm, config=config))
    builder.add_edge(START, "pacore")
    builder.add_edge("pacore", END)
    return builder.compile(checkpointer=checkpointer), llm


async def _run_operator(
    spec: WorkerSpec, problems: list[list[dict[str, str]]], checkpointer: Any = None
) -> tuple[int, int, int, int]:
    app, llm = _operator_graph(spec, checkpointer)

    async def one(number: int, messages: list[dict[str, str]]) -> dict[str, Any]:
        config = {"configurable": {"thread_id": f"problem-{number}"}} if checkpointer is not None else None
        state = await app.ainvoke({"messages": messages}, config)
        answer = state["messages"][-1]
        return {**answer.response_metadata["pacore"], "answer": answer.content}

    try:
        summaries = await asyncio.gather(*(one(n, m) for n, m in enumerate(problems)))
        _mark_answered()
    finally:
        if hasattr(llm, "aclose"):
            await llm.aclose()
    trajectories = sum(r["k"] for s in summaries for r in s["rounds"])
    failures = sum(len(s.get("failures", [])) for s in summaries)
    tokens = sum(s["ttc"] for s in summaries)
    answered = sum(1 for s in summaries if str(s["answer"]).strip())
    return trajectories, failures, tokens, answered


async def _run_proxy(spec: WorkerSpec, problems: list[list[dict[str, str]]]) -> tuple[int, int, int, int]:
    """The operator behind the OpenAI-compatible endpoint (uvicorn in a thread of this process, so its CPU
    counts), each problem one chat-completions request from an aiohttp client in this process."""
    import aiohttp

    from pacore_graph import PaCoReConfig, chat_model
    from pacore_graph.server import BackgroundServer, create_app

    llm = chat_model(base_url=spec.base_url, model=spec.model)
    config = PaCoReConfig(
        rounds=spec.rounds,
        max_concurrency=spec.concurrency,
        seed=spec.seed,
        stream=spec.stream,
        spaced_gc=spec.gc == "spaced",
    )
    with BackgroundServer(create_app(llm, config)) as server:
        url = f"{server.base_url}/chat/completions"
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=None)
        ) as session:

            async def one(messages: list[dict[str, str]]) -> dict[str, Any]:
                async with session.post(url, json={"model": spec.model, "messages": messages}) as response:
                    reply: dict[str, Any] = await response.json()
                    return reply

            replies = await asyncio.gather(*(one(m) for m in problems))
            _mark_answered()
    rounds = [r for reply in replies for r in reply["usage"]["pacore"]["rounds"]]
    trajectories = sum(r["k"] for r in rounds)
    failures = sum(r["failed"] for r in rounds)
    tokens = sum(reply["usage"]["completion_tokens"] for reply in replies)
    answered = sum(1 for reply in replies if str(reply["choices"][0]["message"]["content"] or "").strip())
    return trajectories, failures, tokens, answered


async def _run_operator_checkpointed(
    spec: WorkerSpec, problems: list[list[dict[str, str]]]
) -> tuple[tuple[int, int, int, int], dict[str, Any]]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    assert spec.checkpoint is not None
    async with AsyncSqliteSaver.from_conn_string(spec.checkpoint) as saver:
        counts = await _run_operator(spec, problems, saver)
    return counts, checkpoint_sizes(spec.checkpoint, len(problems))


def checkpoint_sizes(path: str, problems: int) -> dict[str, Any]:
    """Bytes a SQLite checkpointer stored, per problem: the file and the serialized payloads in it."""
    import sqlite3

    files = [Path(path), Path(path + "-wal"), Path(path + "-shm")]
    file_bytes = sum(f.stat().st_size for f in files if f.exists())
    with sqlite3.connect(path) as db:
        checkpoints, checkpoint_bytes = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints"
        ).fetchone()
        writes, write_bytes = db.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(value)), 0) FROM writes").fetchone()
    return {
        "problems": problems,
        "file_bytes": file_bytes,
        "checkpoints": checkpoints,
        "checkpoint_bytes": checkpoint_bytes,
        "writes": writes,
        "write_bytes": write_bytes,
        "file_bytes_per_problem": file_bytes / problems,
        "payload_bytes_per_problem": (checkpoint_bytes + write_bytes) / problems,
    }


async def warm_up(spec: WorkerSpec) -> None:
    """One tiny unmeasured run ([1], one problem) so lazy imports and first-call setup are not counted."""
    tiny = spec.model_copy(update={"rounds": [1], "problems": 1, "checkpoint": None})
    problem = make_problems(1)
    await _RUNS[spec.client](tiny, problem)


_RUNS = {"floor": _run_floor, "operator": _run_operator, "proxy": _run_proxy}


class FullPassClock:
    """Counts CPython's full (oldest-generation) collections and their longest stop-the-world pause, and which
    thresholds were in force at each collection (so a report can show the GC settings a run really had)."""

    def __init__(self) -> None:
        self.passes = 0
        self.longest = 0.0
        self._started = 0.0
        self.thresholds: Counter[tuple[int, ...]] = Counter()

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.thresholds[gc.get_threshold()] += 1
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.passes += 1
            self.longest = max(self.longest, time.perf_counter() - self._started)

    def usual_thresholds(self) -> list[int] | None:
        return list(self.thresholds.most_common(1)[0][0]) if self.thresholds else None

    def seen(self) -> dict[str, int]:
        return {",".join(map(str, thresholds)): count for thresholds, count in self.thresholds.most_common()}


async def measure(spec: WorkerSpec) -> WorkerResult:
    problems = make_problems(spec.problems)
    await warm_up(spec)
    clock = FullPassClock()
    gc.callbacks.append(clock)
    # CPU-time timer: on a busy machine a wall-clock profile blames whatever ran when the process was descheduled
    profiler = cProfile.Profile(time.process_time) if spec.profile else None
    checkpoint = None
    _answered_at.clear()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.enable()
    if spec.checkpoint:
        counts, checkpoint = await _run_operator_checkpointed(spec, problems)
    else:
        counts = await _RUNS[spec.client](spec, problems)
    if profiler is not None:
        profiler.disable()
    end, cpu = time.perf_counter(), time.process_time() - cpu0
    wall = (_answered_at[-1] if _answered_at else end) - wall0
    gc.callbacks.remove(clock)
    if profiler is not None and spec.profile:
        _write_profile(profiler, spec.profile)
    trajectories, failures, tokens, answered = counts
    return WorkerResult(
        client=spec.client,
        wall_s=wall,
        cpu_s=cpu,
        trajectories=trajectories,
        failures=failures,
        completion_tokens=tokens,
        answered=answered,
        peak_rss_mb=peak_rss_mb(),
        gc_full_passes=clock.passes,
        gc_longest_pause_ms=1000 * clock.longest,
        gc_thresholds=clock.usual_thresholds(),
        gc_thresholds_seen=clock.seen(),
        checkpoint=checkpoint,
    )


def peak_rss_mb() -> float:
    """This process's own peak RSS. ru_maxrss is not: Linux carries the parent's peak across fork and exec."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _write_profile(profiler: cProfile.Profile, path: str) -> None:
    """Binary stats, plus a text file: CPU by package first (where the time goes), then the top functions."""
    profiler.dump_stats(path)
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    by_package: dict[str, float] = {}
    total = 0.0
    for (filename, _line, _name), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        by_package[package_of(filename)] = by_package.get(package_of(filename), 0.0) + tottime
        total += tottime
    text.write(f"CPU seconds by package (own time), total {total:.3f} s\n")
    for package, seconds in sorted(by_package.items(), key=lambda item: -item[1]):
        text.write(f"  {package:<28} {seconds:8.3f} s  {100 * seconds / max(total, 1e-9):5.1f}%\n")
    text.write("\n")
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(60)
    Path(path).with_suffix(".txt").write_text(text.getvalue())


def package_of(filename: str) -> str:
    """A profile entry's package: site-packages/<name>, pacore_graph, the stdlib module, or built-ins."""
    if filename.startswith("~") or filename.startswith("<"):
        return "(built-in / C)"
    parts = Path(filename).parts
    if "site-packages" in parts:
        return parts[parts.index("site-packages") + 1]
    for own in ("pacore_graph", "benchmarks", "agents"):
        if own in parts:
            return own
    if "asyncio" in parts:
        return "asyncio"
    return "stdlib:" + Path(filename).stem


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m pacore_benchmarks.perf.overhead_worker '<WorkerSpec JSON>'", file=sys.stderr)
        return 2
    spec = WorkerSpec.model_validate_json(argv[0])
    _raise_file_limit()
    result = asyncio.run(measure(spec))
    print(result.model_dump_json(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
