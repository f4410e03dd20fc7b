"""``pacore bench engine``: what a PaCoRe run costs the engine itself, on real vLLM.

One PaCoRe schedule, three ways, against one vLLM server:

- the operator: ``asolve`` on the project's chat model, as a user runs it;
- a bare aiohttp client sending exactly the requests that operator run sent (the same bodies, round by round,
  the K of a round at once): the baseline for throughput;
- ``n=K`` sampling: one request per round asking for K choices: the baseline for prefill, since vLLM computes
  an ``n=K`` request's prompt once by construction.

vLLM's own counters (``/metrics``) are read before every round and at the end of a run: prompt tokens served,
prompt tokens its prefix cache held, tokens generated, requests finished. Why: PaCoRe sends K separate requests
per round rather than one ``n=K`` request (each trajectory is its own task); vLLM must share their prompt through its
prefix cache for that to cost no more prefill, and the operator must not slow the engine beside a bare client.

Every run gets fresh ``cache_salt`` values (one per problem): no run finds another run's prompts in the cache, and
each problem starts cold whatever ran before, on a server of our own or one that is already running. Each repeat
runs the operator first (its requests are what the baselines send), then the two baselines in alternating order;
problems run one after another, so each round's counters are that round's alone. Wall times leave out the time
spent reading the counters (every side reads them equally often).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp
from pydantic import BaseModel, Field, PrivateAttr

from pacore_benchmarks.perf.bench_settings import BenchSettings
from pacore_benchmarks.perf.engine_server import Counters, root_of, server_facts, settled_counters
from pacore_graph import PaCoReConfig, asolve, chat_model
from pacore_graph.models import OpenAICompatibleChatModel

OPERATOR, BARE, SAMPLED = "operator", "bare client", "n=K"
SIDES = (OPERATOR, BARE, SAMPLED)
THROUGHPUT_TARGET = 0.95  # the operator's generated tokens/s over the bare client's, at least

PROBLEMS = [
    "What is 17*23? Give the number.",
    "Name three prime numbers and add them up.",
    "A train covers 60 km in 45 minutes. What is its speed in km/h?",
    "Is 91 a prime number? Answer yes or no, and say why.",
    "What is the sum of the integers from 1 to 10?",
    "A rectangle is 7 cm by 4 cm. What are its area and its perimeter?",
]


class EngineSettings(BenchSettings):
    rounds: list[int] = Field(default_factory=lambda: [4, 4], description="PaCoRe schedule (then a final round of 1)")
    max_tokens: int = Field(48, ge=1, description="cap on each reply (SmolLM2 rambles to its context's end)")
    problems: int = Field(3, ge=1, le=len(PROBLEMS), description="problems per run, solved one after another")
    repeats: int = Field(3, ge=1, description="runs per side; medians reported")
    block_size: int = Field(32, ge=1, description="vLLM's KV block size, for a server this benchmark starts")
    ignore_eos: bool = Field(
        True,
        description="every reply exactly max_tokens long (vLLM's ignore_eos): the three "
        "sides then generate the same tokens, and a reply that stops early does not leave the "
        "batch smaller for one side by chance",
    )

    @classmethod
    def quick_defaults(cls) -> dict[str, Any]:
        """About a minute on a running server: one problem, one run per side, shorter replies."""
        return {"problems": 1, "repeats": 1, "max_tokens": 32}

    @property
    def schedule(self) -> list[int]:
        return [*self.rounds, 1]


# -- what one run sent and what vLLM counted ---------------------------------------------------------------------
class RoundLog:
    """One round of one problem: the bodies sent, and per reply its prompt length and choices."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.replies: list[tuple[str, int, int]] = []  # (the prompt's key, prompt tokens, choices)


def prompt_key(messages: list[dict[str, Any]]) -> str:
    """A request as vLLM's prefix cache sees it: its messages, exactly (sampling fields aside)."""
    return json.dumps(messages, sort_keys=True, ensure_ascii=False)


class Probe:
    """Reads vLLM's counters at the start of every round (and at the end of a run) and keeps what each round sent.

    The operator's requests reach it through :class:`RecordingModel`: the first request of a round (counted from
    the schedule; rounds end at a barrier) reads the counters, and the rest of the round waits for that reading."""

    def __init__(self, session: aiohttp.ClientSession, root: str, schedule: list[int]):
        self.session, self.root = session, root
        self.starts = set(itertools.accumulate([0, *schedule[:-1]]))  # request indices that open a round
        self.marks: list[Counters] = []
        self.metrics_s = 0.0
        self.finished = 0  # choices received: vLLM counts one finished request per choice
        self.sent = 0  # requests begun in the current problem
        self.problems: list[list[RoundLog]] = []
        self.messages: dict[str, list[dict[str, Any]]] = {}  # each distinct prompt, by its key
        self._gate: asyncio.Future[None] | None = None

    async def mark(self) -> None:
        started = time.monotonic()
        expected = self.marks[0].requests + self.finished if self.marks else 0.0
        self.marks.append(await settled_counters(self.session, self.root, expected))
        self.metrics_s += time.monotonic() - started

    def new_problem(self) -> None:
        self.sent = 0
        self.problems.append([])

    def new_round(self) -> RoundLog:
        log = RoundLog()
        self.problems[-1].append(log)
        return log

    async def before_request(self) -> None:
        index, self.sent = self.sent, self.sent + 1
        if index in self.starts:
            self.new_round()
            self._gate = asyncio.ensure_future(self.mark())
        if self._gate is not None:
            await asyncio.shield(self._gate)

    def record_body(self, body: dict[str, Any]) -> None:
        self.problems[-1][-1].bodies.append(body)

    def record_reply(self, messages: list[dict[str, Any]], prompt_tokens: int, choices: int) -> None:
        key = prompt_key(messages)
        self.messages.setdefault(key, messages)
        self.problems[-1][-1].replies.append((key, prompt_tokens, choices))
        self.finished += choices


class RecordingModel(OpenAICompatibleChatModel):
    """The project's chat model, unchanged, with a :class:`Probe` told of each request and its reply."""

    _probe: Probe | None = PrivateAttr(default=None)

    def watch(self, probe: Probe | None) -> None:
        self._probe = probe

    def payload(self, messages: list[dict[str, Any]], **overrides: Any) -> dict[str, Any]:
        body = super().payload(messages, **overrides)
        if self._probe is not None:
            self._probe.record_body(body)
        return body

    async def acomplete(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        probe = self._probe
        if probe is None:
            return await super().acomplete(messages, **kwargs)
        await probe.before_request()
        reply = await super().acomplete(messages, **kwargs)
        probe.record_reply(messages, int((reply.get("usage") or {}).get("prompt_tokens") or 0), 1)
        return reply


# -- figures ---------------------------------------------------------------------------------------------------
class RoundFigures(BaseModel):
    """One round of a run, summed over its problems, as vLLM counted it."""

    round: int = Field(description="1-based; the last one is the final round of 1")
    k: int
    requests: int = Field(description="requests vLLM finished (one per choice)")
    prompt: int
    hits: int
    generated: int
    cache_bound: int = Field(description="the most prompt tokens a prefix cache of whole blocks could serve here")
    distinct_prompts: int = Field(description="different prompts the round sent, over all problems")

    @property
    def computed(self) -> int:
        return self.prompt - self.hits


class SideRun(BaseModel):
    side: str
    repeat: int
    problems: int
    wall_s: float = Field(description="first request to last reply, less the time spent reading vLLM's counters")
    metrics_s: float
    rounds: list[RoundFigures]
    prompt_lengths_match: bool = Field(description="vLLM's /tokenize agrees with the prompt lengths it reported")

    def total(self, name: str, first_round: int = 1) -> int:
        return sum(getattr(r, name) for r in self.rounds if r.round >= first_round)

    @property
    def tokens_per_s(self) -> float:
        return self.total("generated") / self.wall_s if self.wall_s else 0.0


def cache_bound(problem: list[RoundLog], tokens: dict[str, list[int]], block: int) -> list[int]:
    """Per round of one problem, the prompt tokens a prefix cache of ``block``-token blocks, never evicting, could
    serve: the leading whole blocks some earlier request of the problem (earlier in the round included) already
    sent, as vLLM caches a block once it is allocated; vLLM always computes a prompt's last token itself."""
    cached: set[tuple[int, ...]] = set()
    bounds = []
    for log in problem:
        hits = 0
        for key, _, choices in log.replies:
            ids = tokens[key]
            usable = (len(ids) - 1) // block
            for _ in range(choices):
                held = 0
                while held < usable and tuple(ids[: (held + 1) * block]) in cached:
                    held += 1
                hits += held * block
                cached.update(tuple(ids[: (index + 1) * block]) for index in range(len(ids) // block))
        bounds.append(hits)
    return bounds


async def prompt_tokens(session: aiohttp.ClientSession, root: str, model: str, probe: Probe) -> dict[str, list[int]]:
    """Each distinct prompt of the run as vLLM tokenizes it (``/tokenize``, the chat template applied)."""

    async def one(key: str) -> tuple[str, list[int]]:
        body = {"model": model, "messages": probe.messages[key]}
        async with session.post(f"{root}/tokenize", json=body) as response:
            response.raise_for_status()
            return key, list((await response.json())["tokens"])

    return dict(await asyncio.gather(*(one(key) for key in probe.messages)))


def figures(
    side: str, repeat: int, probe: Probe, wall_s: float, schedule: list[int], block: int, tokens: dict[str, list[int]]
) -> SideRun:
    """The run's rounds from the probe's readings: one interval per round of each problem, in order."""
    per_round = len(schedule)
    deltas = [later - earlier for earlier, later in itertools.pairwise(probe.marks)]
    bounds = [cache_bound(problem, tokens, block) for problem in probe.problems]
    rounds = []
    for index, k in enumerate(schedule):
        total = sum((deltas[p * per_round + index] for p in range(len(probe.problems))), Counters())
        logs = [problem[index] for problem in probe.problems if index < len(problem)]
        rounds.append(
            RoundFigures(
                round=index + 1,
                k=k,
                requests=round(total.requests),
                prompt=round(total.prompt),
                hits=round(total.hits),
                generated=round(total.generated),
                cache_bound=sum(bound[index] for bound in bounds if index < len(bound)),
                distinct_prompts=sum(len({key for key, _, _ in log.replies}) for log in logs),
            )
        )
    return SideRun(
        side=side,
        repeat=repeat,
        problems=len(probe.problems),
        wall_s=round(wall_s, 3),
        metrics_s=round(probe.metrics_s, 3),
        rounds=rounds,
        prompt_lengths_match=all(
            len(tokens[key]) == length
            for problem in probe.problems
            for log in problem
            for key, length, _ in log.replies
        ),
    )


# -- the three sides -------------------------------------------------------------------------------------------
Recorded = list[list[list[dict[str, Any]]]]  # problem -> round -> request bodies


def salt() -> str:
    return f"bench-engine-{uuid.uuid4().hex[:16]}"


async def run_operator(model: RecordingModel, probe: Probe, problems: list[str], settings: EngineSettings) -> Recorded:
    """Each problem through ``asolve``, one after another; returns the bodies the operator sent."""
    run_salt = salt()
    extra = {"ignore_eos": True} if settings.ignore_eos else {}
    model.watch(probe)
    try:
        for index, problem in enumerate(problems):
            probe.new_problem()
            config = PaCoReConfig(rounds=settings.rounds, model_kwargs={"cache_salt": f"{run_salt}-{index}", **extra})
            await asolve(model, problem, config)
    finally:
        model.watch(None)
    return [[[dict(body) for body in log.bodies] for log in problem_logs] for problem_logs in probe.problems]


async def run_replay(session: aiohttp.ClientSession, url: str, probe: Probe, recorded: Recorded, n_k: bool) -> None:
    """The recorded bodies again, round by round, each round's requests at once; ``n_k``: the identical bodies of
    a round as one request with ``n`` choices."""
    run_salt = salt()
    for index, problem_rounds in enumerate(recorded):
        probe.new_problem()
        for bodies in problem_rounds:
            probe.new_round()
            await probe.mark()
            sends = [{**body, "cache_salt": f"{run_salt}-{index}"} for body in bodies]
            if n_k:
                groups: dict[str, list[dict[str, Any]]] = {}
                for body in sends:
                    groups.setdefault(json.dumps(body, sort_keys=True), []).append(body)
                sends = [{**group[0], "n": len(group)} if len(group) > 1 else group[0] for group in groups.values()]
            for body in sends:
                probe.record_body(body)
            await asyncio.gather(*(_post(session, url, probe, body) for body in sends))


async def _post(session: aiohttp.ClientSession, url: str, probe: Probe, body: dict[str, Any]) -> None:
    async with session.post(url, json=body) as response:
        data = await response.json(content_type=None)
        if response.status != 200:
            raise RuntimeError(f"vLLM answered {response.status}: {str(data)[:300]}")
    probe.record_reply(body["messages"], int(data["usage"]["prompt_tokens"]), len(data["choices"]))


# -- the benchmark ---------------------------------------------------------------------------------------------
class EngineReport(BaseModel):
    settings: EngineSettings
    model: str
    server: dict[str, Any]
    runs: list[SideRun]
    identical_prompts: bool = Field(description="every round of the operator sent its K prompts byte-identical")

    def of(self, side: str) -> list[SideRun]:
        return [run for run in self.runs if run.side == side]


async def run_benchmark(
    settings: EngineSettings,
    base_url: str,
    model_name: str | None = None,
    on_run: Callable[[SideRun], None] | None = None,
) -> EngineReport:
    """A warm-up (one problem, operator then bare client, not counted), then ``repeats`` times: the operator,
    then the bare client and ``n=K`` on its requests, their order alternating."""
    base = chat_model(base_url, model_name, max_tokens=settings.max_tokens)  # the server's first model if none
    model = RecordingModel(
        base_url=base.base_url,
        model=base.model,
        api_key=base.api_key,
        max_tokens=settings.max_tokens,
        profile=base.profile,
    )
    url = f"{base.base_url}/chat/completions"
    root = root_of(base.base_url)
    problems = PROBLEMS[: settings.problems]
    schedule = settings.schedule
    # uvicorn closes a connection idle for 5 s: ours are closed first, never reused as the server closes them
    unlimited = aiohttp.ClientTimeout(total=None)
    sessions = [
        aiohttp.ClientSession(timeout=unlimited, connector=aiohttp.TCPConnector(keepalive_timeout=2)) for _ in range(2)
    ]
    metrics, bare = sessions
    runs: list[SideRun] = []
    identical = True

    async def one(side: str, repeat: int, recorded: Recorded | None, subset: list[str]) -> tuple[SideRun, Recorded]:
        probe = Probe(metrics, root, schedule)
        started = time.monotonic()
        if side == OPERATOR:
            recorded = await run_operator(model, probe, subset, settings)
        else:
            assert recorded is not None
            await run_replay(bare, url, probe, recorded, n_k=side == SAMPLED)
        wall = time.monotonic() - started - probe.metrics_s
        await probe.mark()
        tokens = await prompt_tokens(metrics, root, model.model, probe)
        run = figures(side, repeat, probe, wall, schedule, block, tokens)
        if repeat >= 0:
            runs.append(run)
            if on_run:
                on_run(run)
        return run, recorded

    try:
        server = await server_facts(metrics, root)
        if not server["prefix_caching"]:
            raise RuntimeError(f"the vLLM at {base_url} runs without prefix caching (--enable-prefix-caching)")
        block = server["block_size"] or settings.block_size
        _, recorded = await one(OPERATOR, -1, None, problems[:1])  # connections, caches, the engine's steps
        await one(BARE, -1, recorded, problems[:1])
        for repeat in range(settings.repeats):
            _, recorded = await one(OPERATOR, repeat, None, problems)
            identical &= all(
                len({prompt_key(body["messages"]) for body in bodies}) == 1 for rounds in recorded for bodies in rounds
            )
            for side in (BARE, SAMPLED) if repeat % 2 == 0 else (SAMPLED, BARE):
                await one(side, repeat, recorded, problems)
    except aiohttp.ClientError as exc:
        raise RuntimeError(f"vLLM at {root}: {type(exc).__name__}: {exc}") from exc
    finally:
        for session in sessions:
            await session.close()
        await model.aclose()
        await base.aclose()
    return EngineReport(settings=settings, model=base.model, server=server, runs=runs, identical_prompts=identical)


# -- the summary -----------------------------------------------------------------------------------------------
def _ratio(part: float, whole: float) -> float | None:
    return round(part / whole, 3) if whole else None


def side_figures(runs: list[SideRun]) -> dict[str, Any]:
    """A side's medians (times) and sums over its runs (tokens), overall and per round."""
    later = [r for run in runs for r in run.rounds if r.round >= 2]
    prompt_2, hits_2 = sum(r.prompt for r in later), sum(r.hits for r in later)
    return {
        "runs": len(runs),
        "wall_s": round(statistics.median(run.wall_s for run in runs), 3),
        "generated_tokens_per_s": round(statistics.median(run.tokens_per_s for run in runs), 2),
        "generated_tokens": round(statistics.median(run.total("generated") for run in runs)),
        "prompt_tokens": round(statistics.median(run.total("prompt") for run in runs)),
        "computed_tokens": round(statistics.median(run.total("computed") for run in runs)),
        "cached_tokens": round(statistics.median(run.total("hits") for run in runs)),
        "requests_per_problem": round(statistics.median(run.total("requests") / run.problems for run in runs), 2),
        "cached_fraction_round2plus": _ratio(hits_2, prompt_2),
        "computed_tokens_round2plus": sum(r.computed for r in later),
        "rounds": [
            {
                "round": index + 1,
                "k": group[0].k,
                "prompt": sum(r.prompt for r in group),
                "computed": sum(r.computed for r in group),
                "cached": sum(r.hits for r in group),
                "cached_fraction": _ratio(sum(r.hits for r in group), sum(r.prompt for r in group)),
                "cache_bound": sum(r.cache_bound for r in group),
                "requests": sum(r.requests for r in group),
                "distinct_prompts": sum(r.distinct_prompts for r in group),
            }
            for index, group in enumerate(zip(*(run.rounds for run in runs), strict=True))
        ],
    }


def summarise(report: EngineReport) -> dict[str, Any]:
    """The JSON summary: settings, each side's figures, the ratios and, per target, whether it is met."""
    settings = report.settings
    sides = {side: side_figures(report.of(side)) for side in SIDES}
    op, bare, nk = sides[OPERATOR], sides[BARE], sides[SAMPLED]
    later = [r for run in report.of(OPERATOR) for r in run.rounds if 2 <= r.round <= len(settings.rounds)]
    k_rounds = [r for r in later if r.k > 1]
    share = [(r.k - 1) / r.k * r.prompt for r in k_rounds]
    wanted = _ratio(sum(share), sum(r.prompt for r in k_rounds))  # (K-1)/K, weighted by each round's prompt
    hits_2 = _ratio(sum(r.hits for r in k_rounds), sum(r.prompt for r in k_rounds))
    expected_requests = sum(settings.rounds) + 1
    throughput = _ratio(op["generated_tokens_per_s"], bare["generated_tokens_per_s"])
    prefill = _ratio(op["computed_tokens_round2plus"], nk["computed_tokens_round2plus"])
    over_bound = _ratio(sum(r.hits for r in k_rounds), sum(r.cache_bound for r in k_rounds))
    bound_2 = _ratio(sum(r.cache_bound for r in k_rounds), sum(r.prompt for r in k_rounds))
    targets = {
        "prefill_no_more_than_n_k": prefill is not None and prefill <= 1.0,
        "cached_at_least_k_minus_1_over_k": hits_2 is not None and wanted is not None and hits_2 >= wanted,
        "throughput_within_5_percent": throughput is not None and throughput >= THROUGHPUT_TARGET,
        "requests_per_problem": op["requests_per_problem"] == expected_requests,
        "identical_prompts": report.identical_prompts,
    }
    return {
        "model": report.model,
        "vllm_version": report.server.get("vllm_version"),
        "block_size": report.server.get("block_size"),
        "rounds": settings.rounds,
        "max_tokens": settings.max_tokens,
        "ignore_eos": settings.ignore_eos,
        "problems": settings.problems,
        "repeats": settings.repeats,
        "requests_per_problem_expected": expected_requests,
        "throughput_ratio_operator_vs_bare": throughput,
        "throughput_target": THROUGHPUT_TARGET,
        "wall_ratio_operator_vs_bare": _ratio(op["wall_s"], bare["wall_s"]),
        "prefill_ratio_round2plus_operator_vs_n_k": prefill,
        "prefill_ratio_round2plus_bare_vs_n_k": _ratio(
            bare["computed_tokens_round2plus"], nk["computed_tokens_round2plus"]
        ),
        "cached_fraction_round2plus": hits_2,
        "cached_fraction_target": wanted,
        "cache_bound_fraction_round2plus": bound_2,
        "cached_over_cache_bound_round2plus": over_bound,
        "prompt_lengths_match": all(run.prompt_lengths_match for run in report.runs),
        "throughput_ratio_n_k_vs_bare": _ratio(nk["generated_tokens_per_s"], bare["generated_tokens_per_s"]),
        "identical_prompts": report.identical_prompts,
        "targets": targets,
        "sides": sides,
    }
