"""Past one server: vllm-router (the real PyPI package) in front of emulator replicas, a replica killed
mid-run, the session key the client sends, the benchmark's workloads and its client-side spreading baseline,
and ``pacore serve-vllm`` as a whole (emulated) cluster and without GPUs."""

from __future__ import annotations

import contextlib
import json
import random
import signal
import socket
import subprocess
import sys
import urllib.request
from collections import defaultdict
from pathlib import Path

import pytest

from pacore_benchmarks.perf.replicas import ReplicasSettings, prefill_floor, run_benchmark
from pacore_benchmarks.perf.replicas_spread import SpreadChatModel
from pacore_emulator import Emulator, EmulatorConfig
from pacore_emulator.replies import estimate_prompt_tokens
from pacore_graph.config import PaCoReConfig
from pacore_graph.graph.runner import asolve
from pacore_graph.models import chat_model
from pacore_graph.models.embedded import free_port
from pacore_graph.models.routing import SHORT_PROMPT_CHARS, prefix_key, session_key
from pacore_graph.models.vllm_server import ROUTER_POLICY, Cluster, ServerProcess, router_command

# Small and quick replies; prompts long enough (over a thousand tokens) to be kept on one replica.
SMALL_REPLICA = {
    "ttft": 0.01,
    "token_delay": 0.0005,
    "output_tokens": (60, 120),
    "answer_tokens": (20, 40),
    "prefill_token_time": 1e-6,
}
PROBLEM = "Problem {n}: count the pairs (a, b) of positive integers with a + b = {m}. " + "Think it through. " * 240


def free_port_block(size: int) -> int:
    """A port with ``size - 1`` free ones after it, below the ephemeral range: a client's outgoing socket may hold
    any ephemeral port, so a cluster's port + 1 ... port + N picked there could already be taken. The scan starts
    at a random block, so two suites on one host do not race for the same one."""
    blocks = list(range(20000, 32000 - size, size))
    start = random.randrange(len(blocks))
    for base in blocks[start:] + blocks[:start]:
        with contextlib.ExitStack() as held:
            try:
                for port in range(base, base + size):
                    held.enter_context(socket.socket()).bind(("127.0.0.1", port))
            except OSError:
                continue
        return base
    raise RuntimeError("no block of free ports below 32000")


def pacore(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "pacore"), *args]


def test_session_key_names_the_prefix_a_request_shares():
    system = {"role": "system", "content": "be brief. " * 500}
    task = {"role": "user", "content": "fix the bug"}
    turn = [system, task, {"role": "assistant", "content": "ls"}, {"role": "tool", "content": "a.py"}]
    assert session_key([system, task]) == session_key(turn)  # an agent's later turns stay with their prefix
    assert session_key([system, task]) != session_key([system, {"role": "user", "content": "synthesis..."}])
    assert session_key([system]) == session_key([dict(system)])
    history = [system, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    last_turns = ({"role": "user", "content": "and 17*23?"}, {"role": "user", "content": "Reference 1: ..."})
    assert len({session_key([*history, last]) for last in last_turns}) == 1  # every round keeps the history
    assert session_key([*history, last_turns[0]]) != session_key([system, history[1], last_turns[0]])
    long = "x" * 50_000  # a long message counts by its length and both ends
    ends = ([long + "a", long + "b"], ["a" + long, "b" + long], [long, long + "x"])
    assert all(
        session_key([{"role": "user", "content": a}]) != session_key([{"role": "user", "content": b}]) for a, b in ends
    )


def test_a_short_prompt_gets_a_fresh_key_per_request_so_its_round_spreads_over_replicas():
    short = [{"role": "user", "content": "x" * (SHORT_PROMPT_CHARS - 1)}]
    assert prefix_key(short) is None and len({session_key(short) for _ in range(8)}) == 8
    long = [{"role": "user", "content": "x" * SHORT_PROMPT_CHARS}]
    assert prefix_key(long) is not None and len({session_key(long) for _ in range(8)}) == 1
    call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "y" * SHORT_PROMPT_CHARS}}
    assert prefix_key([short[0], {"role": "assistant", "content": None, "tool_calls": [call]}]) is not None


def test_the_prefill_floor_counts_each_distinct_prefix_block_once():
    system = {"role": "system", "content": "You are an agent with these tools. " * 200}
    shared = {"messages": [system, {"role": "user", "content": "Task 1: fix the parser. " * 50}]}
    other = {"messages": [system, {"role": "user", "content": "Task 2: fix the lexer. " * 50}]}
    alone = {"messages": [{"role": "user", "content": "Problem 3: how many pairs? " * 300}]}
    tokens = {
        name: estimate_prompt_tokens(body["messages"])
        for name, body in (("shared", shared), ("other", other), ("alone", alone))
    }
    system_tokens = estimate_prompt_tokens([system])
    once = prefill_floor([shared], block_size=16)
    assert once == tokens["shared"]  # nothing cached yet: every token computed
    assert once < prefill_floor([shared, shared], block_size=16) <= once + 16  # the repeat: its last block only
    floor = prefill_floor([shared, other, alone, alone, other], block_size=16)
    # the system prompt's blocks once, each task and problem once, plus at most a block per repeat and shared tail
    distinct = tokens["shared"] + tokens["other"] - system_tokens + tokens["alone"]
    assert distinct <= floor <= distinct + 4 * 16


@pytest.fixture
def replicas(tmp_path):
    configs = [
        EmulatorConfig.gpu_replica(index, request_log=str(tmp_path / f"replica-{index}.jsonl"), **SMALL_REPLICA)
        for index in range(3)
    ]
    emulators = []
    try:
        for config in configs:
            emulators.append(Emulator(config).start())
        yield emulators
    finally:
        for emulator in emulators:
            emulator.stop()


@pytest.fixture
def router(replicas, tmp_path, request):
    """vllm-router over the replicas, with the policy a test parametrizes ``router`` with (else the default)."""
    port = free_port()
    policy = getattr(request, "param", ROUTER_POLICY)
    command = router_command([e.root_url for e in replicas], port=port, policy=policy)
    server = ServerProcess("vllm-router", command, f"http://127.0.0.1:{port}", tmp_path / "router.log").start()
    try:
        server.wait_ready(60)
        yield server
    finally:
        server.stop()
    assert not server.alive()


KEYED = [ROUTER_POLICY, "consistent_hash"]  # follow the X-Session-ID key our client sends
KEYLESS = ["cache_aware", "round_robin"]  # see no text: a round's copies of one prompt land on several replicas


@pytest.mark.parametrize("router", KEYED, indirect=True)
async def test_router_keeps_each_prompt_on_one_replica_where_its_prefix_is_cached(replicas, router, tmp_path):
    model = chat_model(router.url + "/v1", replicas[0].config.model)  # as any user runs it: the key is a header
    problems = [PROBLEM.format(n=n, m=n + 5) for n in range(4)]
    try:
        results = [await asolve(model, problem, PaCoReConfig(rounds=[4])) for problem in problems]
    finally:
        await model.aclose()
    assert all(result.answer.strip() and not result.failures for result in results)

    where: dict[str, set[int]] = defaultdict(set)  # prompt -> replicas that served it
    for index in range(len(replicas)):
        for line in (tmp_path / f"replica-{index}.jsonl").read_text().splitlines():
            where[json.dumps(json.loads(line)["body"]["messages"])].add(index)
    assert len(where) == 2 * len(problems)  # each problem: one round-1 prompt (4 times), one synthesis
    assert all(len(served_by) == 1 for served_by in where.values())
    assert len(set().union(*where.values())) > 1  # and the prompts were spread over the replicas
    stats = [replica.stats() for replica in replicas]
    first_round = sum(result.rounds[0].trajectories[0].prompt_tokens for result in results)
    assert sum(s["cached_tokens"] for s in stats) >= 3 * first_round * 0.9  # 3 of each 4 repeats from the cache


@pytest.mark.parametrize("router", KEYLESS, indirect=True)
async def test_a_keyless_policy_spreads_a_long_prompts_round_over_replicas_each_prefilling_it(
    replicas, router, tmp_path
):
    """What the README says of cache_aware and round_robin: they see no text, so a round's K copies of one long
    prompt land on several replicas (its decoding spread, for one problem at a time) and each prefills it."""
    model = chat_model(router.url + "/v1", replicas[0].config.model)
    try:
        result = await asolve(model, PROBLEM.format(n=0, m=5), PaCoReConfig(rounds=[6]))
    finally:
        await model.aclose()
    assert result.answer.strip() and not result.failures
    served = [
        sum(
            "Reference Responses" not in line for line in (tmp_path / f"replica-{index}.jsonl").read_text().splitlines()
        )
        for index in range(len(replicas))
    ]  # round 1's requests per replica
    assert sum(served) == 6 and sum(1 for n in served if n) >= 2, served
    stats = [replica.stats() for replica in replicas]
    prompt = result.rounds[0].trajectories[0].prompt_tokens
    assert sum(s["cached_tokens"] for s in stats) <= (6 - 2) * prompt  # at least two replicas prefilled it


async def test_router_spreads_a_short_problems_round_over_every_replica(replicas, router, tmp_path):
    """One problem in flight with a short prompt: its trajectories decode on every replica, not on one."""
    model = chat_model(router.url + "/v1", replicas[0].config.model)
    try:
        result = await asolve(
            model, "How many pairs (a, b) of positive integers have a + b = 10?", PaCoReConfig(rounds=[9])
        )
    finally:
        await model.aclose()
    assert result.answer.strip() and not result.failures
    served = [len((tmp_path / f"replica-{index}.jsonl").read_text().splitlines()) for index in range(len(replicas))]
    assert sum(served) == 10 and min(served) >= 2  # 9 trajectories and the synthesis, on all 3 replicas


async def test_a_replica_killed_mid_run_loses_nothing_through_the_router(tmp_path):
    emulator = EmulatorConfig.gpu_replica(**{**SMALL_REPLICA, "token_delay": 0.002, "output_tokens": (150, 300)})
    settings = ReplicasSettings(
        replicas=2,
        problems=3,
        schedules=[[8]],
        chat_problems=0,
        one_at_a_time=0,
        policies=[ROUTER_POLICY],
        kill_spread=False,
        emulator=emulator,
    )
    report = await run_benchmark(settings, str(tmp_path))
    clean, killed = report.runs[-1], report.kills[0]
    assert clean.policy == killed.policy == ROUTER_POLICY and clean.lost == 0
    assert killed.killed is not None and killed.cut > 0  # it died serving requests
    assert killed.answered == killed.problems == 3 and killed.lost == 0
    summary = report.summary()
    assert summary["lost"] == 0 and set(summary["runs"]) == {"spread", ROUTER_POLICY}


async def test_the_readmes_routing_advice_holds_for_each_policy_on_every_workload(tmp_path):
    """The keyed policies against cache_aware and round_robin (and the client spreading) on the three workloads:
    a keyed policy prefills each shared prompt about once (near the floor) and is the one the benchmark picks
    for chat runs; a keyless one prefills it again on each replica a round's copies reach. (The batch workload
    at this size, one [2] problem, computes the same under every routing: its choice is left to the bench.)"""
    settings = ReplicasSettings(
        replicas=2,
        problems=1,
        schedules=[[2]],
        chat_problems=2,
        one_at_a_time=1,
        policies=[*KEYED, *KEYLESS],
        kill=False,
        emulator=EmulatorConfig.gpu_replica(**SMALL_REPLICA),
    )
    report = await run_benchmark(settings, str(tmp_path))
    runs = {(run.workload, run.policy): run for run in report.runs}
    assert len(runs) == 3 * 5 and all(run.lost == 0 and run.answered == run.problems for run in report.runs)
    assert [sum(r.requests for r in runs["one", policy].replicas) for policy in ["spread", *KEYED, *KEYLESS]] == [
        37
    ] * 5  # [32, 4] alone: 32 + 4 + 1 requests, whatever the routing
    for run in report.runs:  # no routing computes less than the floor (each distinct prefix once)
        assert 0 < run.floor_tokens <= run.prefill_tokens, run
    # One problem alone: a keyless routing must send its 32 copies to both replicas (about 1.85x the floor).
    # The chat workload runs four problems at once, and round_robin may by chance alternate two problems'
    # copies in lockstep, each problem then on one replica (1.34x once under load, 1.6x usually): there
    # every keyless routing must only compute more than every keyed one.
    for workload, keyless_above in (("one", 1.4), ("chat", 1.15)):
        keyed = [runs[workload, policy] for policy in KEYED]
        keyless = [runs[workload, policy] for policy in [*KEYLESS, "spread"]]
        assert all(run.over_floor < 1.15 <= keyless_above < other.over_floor for run in keyed for other in keyless), [
            (workload, run.policy, round(run.over_floor, 3)) for run in keyed + keyless
        ]
    summary = report.summary()
    assert summary["chat_best_policy"] in KEYED  # chosen by prefill among all four
    assert summary["chat_problems"] == 4
    assert set(summary["chat_runs"]) == set(summary["one_at_a_time_runs"]) == {"spread", *KEYED, *KEYLESS}


async def test_the_spreading_baseline_sends_each_request_to_the_replica_with_the_fewest_in_flight(mock_server):
    handler = lambda body, attempt: {"content": "r", "delay": 0.05}  # noqa: E731
    with mock_server(handler) as first, mock_server(handler) as second:
        model = SpreadChatModel.over([first.base_url, second.base_url], "mock-model")
        try:
            result = await asolve(model, "spread", PaCoReConfig(rounds=[8]))
        finally:
            await model.aclose()
    assert result.answer == "r" and (len(first.requests), len(second.requests)) in ((5, 4), (4, 5))


def _refused(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def test_serve_vllm_emulate_runs_a_cluster_that_pacore_solve_uses_and_stops_on_ctrl_c(tmp_path):
    port = free_port_block(3)
    serve = subprocess.Popen(
        pacore("serve-vllm", "--emulate", "--replicas", "2", "--port", str(port), "--log-dir", str(tmp_path)),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        banner = serve.stderr.readline()
        assert f"http://127.0.0.1:{port}/v1 over 2 emulated replicas" in banner, banner
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as response:
            assert json.load(response)["data"][0]["id"] == "emulated-model"
        solved = subprocess.run(
            pacore("solve", "What is 17*23?", "--rounds", "3", "--base-url", f"http://127.0.0.1:{port}/v1"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert solved.returncode == 0, solved.stderr
        assert "\\boxed{" in solved.stdout and "failed trajectories: 0" in solved.stderr
        serve.send_signal(signal.SIGINT)
        assert serve.wait(timeout=60) == 0
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
    assert all(_refused(p) for p in (port, port + 1, port + 2))  # router and replicas gone
    assert {p.name for p in tmp_path.iterdir()} == {"router.log", "replica-0.log", "replica-1.log"}


def test_an_emulated_cluster_removes_the_temporary_log_folder_it_made():
    """Without --log-dir, ``serve-vllm --emulate`` logs to a new temporary folder, gone when it stops (a folder
    the user named stays: the test above)."""
    with Cluster(None, replicas=1, emulate=True, port=free_port_block(2)) as cluster:
        folder = cluster.log_dir
        assert {p.name for p in folder.iterdir()} == {"router.log", "replica-0.log"}
    assert not folder.exists()


def test_serve_vllm_says_what_is_missing_without_vllm_or_gpus():
    done = subprocess.run(
        pacore("serve-vllm", "stepfun-ai/PaCoRe-8B", "--replicas", "999"), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    message = done.stderr.strip()
    assert message.startswith("pacore: error: ") and "\n" not in message
    assert "vLLM is not installed" in message or "no NVIDIA GPU" in message or "999 GPUs" in message, message
