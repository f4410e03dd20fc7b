"""`pacore swe run --protocol episodes|per-call`: the same scripted model, both protocols, the same outputs.

A scripted tool-calling model served over loopback HTTP (tests/mock_openai.py) drives the agent through
`bash` and `submit`; its reply is a function of the conversation, plus the mock's attempt counter for
identical requests (so the K proposals of one round differ). Per-call: ONE episode, each step a PaCoRe
run (K proposals, then a synthesis whose tool call the episode executes). Episodes: K whole episodes, then
a synthesis episode. The fast test runs both on a local task with `--runtime local`; the docker test runs
both on a real SWE-bench Verified row (tests/fixtures/swe) and grades the predictions with `swe eval`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp import web
from langchain_core.callbacks import BaseCallbackHandler
from mock_openai import MockOpenAIServer
from scripted_chat import tool_call
from test_swe_pacore import pacore, sandbox_containers

from pacore_agents.swe.per_call import per_call_solver
from pacore_agents.swe.repair_settings import RepairSettings
from pacore_agents.swe.run import PREDICTIONS_FILE, trajectory_path
from pacore_agents.swe.tasks import listed_tests, load_tasks
from pacore_graph import PaCoReConfig, chat_model

ROMAN = "pacore__roman-1"
REAL_ROW = "pytest-dev__pytest-5262"
ROWS = Path(__file__).parents[1] / "fixtures" / "swe" / "verified_rows.jsonl"
PROPOSAL_TOKENS, SYNTHESIS_TOKENS = 7, 13


def proposals_in(prompt: str) -> list[str]:
    """The step-0 proposals a synthesis prompt shows, as `Tool call: bash(...)` reference lines."""
    return sorted(set(re.findall(r'Tool call: bash\(\{"command": "echo (step0-p\d+)"\}\)', prompt)))


def scripted(gold_patch: str):
    """Step 0 looks around (each proposal its own `echo step0-pN`; a synthesis echoes the proposals it was
    shown), step 1 applies the fix, step 2 submits. Usage: proposals 7 completion tokens, syntheses 13."""

    def handler(body: dict, attempt: int) -> dict:
        messages = body["messages"]
        synthesis = "Reference Responses" in messages[1]["content"]
        step = sum(1 for m in messages if m["role"] == "tool")
        if step == 0 and synthesis:
            call = tool_call(
                "bash", {"command": "echo synthesised " + " ".join(proposals_in(messages[1]["content"]))}, "c0"
            )
        elif step == 0:
            call = tool_call("bash", {"command": f"echo step0-p{attempt}"}, "c0")
        elif step == 1:
            call = tool_call("bash", {"command": f"git apply <<'PATCH'\n{gold_patch}PATCH\ngit status --short"}, "c1")
        else:
            call = tool_call("submit", {"note": "fixed"}, "c2")
        completion = SYNTHESIS_TOKENS if synthesis else PROPOSAL_TOKENS
        prompt_tokens = len(json.dumps(messages)) // 10
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
        }
        return {"content": f"step {step}", "tool_calls": [call], "usage": usage}

    return handler


def usage_of(requests: list[dict]) -> tuple[int, int]:
    """(prompt, completion) tokens the scripted server reported over ``requests``."""
    prompt = sum(len(json.dumps(r["messages"])) // 10 for r in requests)
    completion = sum(
        SYNTHESIS_TOKENS if "Reference Responses" in r["messages"][1]["content"] else PROPOSAL_TOKENS for r in requests
    )
    return prompt, completion


def run_protocol(mock_server, row: dict, dataset: str, protocol: str, out: Path, runtime: str):
    with mock_server(scripted(row["patch"])) as server:
        done = pacore(
            "swe",
            "run",
            "--dataset",
            dataset,
            "--instances",
            row["instance_id"],
            "--base-url",
            server.base_url,
            "--model",
            "scripted",
            "--rounds",
            "2",
            "--runtime",
            runtime,
            "--protocol",
            protocol,
            "--output",
            str(out),
        )
    assert done.returncode == 0, done.stderr[-3000:]
    (prediction,) = [json.loads(line) for line in (out / PREDICTIONS_FILE).read_text().splitlines()]
    trajectory = json.loads(trajectory_path(out, row["instance_id"]).read_text())
    return server.requests, prediction, trajectory, done.stderr


def assert_per_call_protocol(requests: list[dict], trajectory: dict) -> None:
    """Three steps, each 2 proposals then 1 synthesis; the episode ran the synthesised calls."""
    assert len(requests) == 9
    assert all([t["function"]["name"] for t in r["tools"]] == ["bash", "submit"] for r in requests)
    is_synthesis = ["Reference Responses" in r["messages"][1]["content"] for r in requests]
    assert is_synthesis == [False, False, True] * 3
    first_synthesis = requests[2]["messages"][1]["content"]
    assert proposals_in(first_synthesis) == ["step0-p1", "step0-p2"], "the synthesis saw both proposals"
    assert "Reference 1:" in first_synthesis and "Reference 2:" in first_synthesis
    for step in range(3):  # each step's requests carry the same history: the synthesised actions, run
        step_requests = requests[3 * step : 3 * step + 3]
        assert len({json.dumps(r["messages"][2:]) for r in step_requests}) == 1
    history = requests[-1]["messages"]
    assert [m["role"] for m in history] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    rules = history[0]["content"]  # the references are proposals for the next step, not finished patches
    assert "other proposals for your next step" in rules and "patches from other attempts" not in rules
    assert history[2]["tool_calls"][0]["function"]["arguments"] == json.dumps(
        {"command": "echo synthesised step0-p1 step0-p2"}
    )
    assert history[3]["content"].endswith("synthesised step0-p1 step0-p2\n"), "the synthesised call ran"
    (episode,) = trajectory["episodes"]
    assert episode["stop_reason"] == "submitted" and episode["steps"] == 3
    steps = [m for m in episode["messages"] if m["role"] == "ai"]
    assert [[(r["k"], r["completion_tokens"]) for r in m["pacore"]] for m in steps] == [
        [(2, 2 * PROPOSAL_TOKENS), (1, SYNTHESIS_TOKENS)]
    ] * 3


def assert_episodes_protocol(requests: list[dict], trajectory: dict) -> None:
    assert len(requests) == 9  # 2 episodes of 3 steps, then the synthesis episode of 3
    assert all([t["function"]["name"] for t in r["tools"]] == ["bash", "submit"] for r in requests)
    assert [(e["round_index"], e["stop_reason"]) for e in trajectory["episodes"]] == [
        (0, "submitted"),
        (0, "submitted"),
        (1, "submitted"),
    ]
    assert "Patch:\n```diff\n" in trajectory["episodes"][2]["messages"][1]["content"]
    rules = requests[-1]["messages"][0]["content"]
    assert "patches from other attempts" in rules and "next step" not in rules


def assert_tokens_add_up(requests: list[dict], trajectory: dict) -> None:
    prompt, completion = usage_of(requests)
    episodes = trajectory["episodes"]
    assert sum(e["completion_tokens"] for e in episodes) == completion == trajectory["ttc"]
    assert sum(e["prompt_tokens"] for e in episodes) == prompt


def shape(value):
    """The keys of a JSON document, recursively (lists by their first item): what both protocols share."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items() if key != "pacore"}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def assert_same_outputs(runs: dict[str, tuple], row: dict) -> None:
    (_, prediction_e, trajectory_e, _), (_, prediction_p, trajectory_p, _) = runs["episodes"], runs["per-call"]
    assert prediction_e == prediction_p, "the same fix, the same prediction line"
    assert prediction_p["instance_id"] == row["instance_id"] and prediction_p["model_name_or_path"] == "scripted"
    assert shape(trajectory_e["episodes"][0]) == shape(trajectory_p["episodes"][0])
    assert shape({**trajectory_e, "settings": {}}) == shape({**trajectory_p, "settings": {}})
    # The instance's rounds: K episodes then the synthesis episode; per-call, the one episode.
    assert [r["k"] for r in trajectory_e["rounds"]] == [2, 1] and [r["k"] for r in trajectory_p["rounds"]] == [1]
    assert (trajectory_e["settings"]["protocol"], trajectory_p["settings"]["protocol"]) == ("episodes", "per-call")


def resolves(row: dict, patch: str, tmp_path: Path) -> bool:
    """Apply the patch and the hidden tests to a fresh copy of the local task; its FAIL_TO_PASS tests pass."""
    repo = tmp_path / "check"
    subprocess.run(["cp", "-r", str(Path(row["pacore_task_dir"]) / "repo"), str(repo)], check=True)
    for diff in (patch, row["test_patch"]):
        subprocess.run(["git", "apply", "-"], cwd=repo, input=diff, text=True, check=True)
    tests = listed_tests(row, "FAIL_TO_PASS")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    return done.returncode == 0


def test_both_protocols_on_a_local_task_write_the_same_outputs(mock_server, tmp_path):
    row = load_tasks("local", instances=[ROMAN])[0]
    runs = {p: run_protocol(mock_server, row, "local", p, tmp_path / p, "local") for p in ("episodes", "per-call")}
    assert_per_call_protocol(runs["per-call"][0], runs["per-call"][2])
    assert_episodes_protocol(runs["episodes"][0], runs["episodes"][2])
    for requests, _, trajectory, _ in runs.values():
        assert_tokens_add_up(requests, trajectory)
    assert_same_outputs(runs, row)
    assert resolves(row, runs["per-call"][1]["model_patch"], tmp_path)
    assert f"{ROMAN}: patch of" in runs["per-call"][3]
    # Per-call shows the model calls of its steps (every proposal and synthesis), finished of started.
    assert re.search(r"model calls .* 9/9", runs["per-call"][3])


@pytest.mark.docker
def test_both_protocols_on_a_real_row_in_docker_resolve(mock_server, tmp_path, client):
    built = pacore(
        "swe", "images", "build", "--dataset", str(ROWS), "--instances", REAL_ROW, "--repos", str(ROWS.parent / "repos")
    )
    assert built.returncode == 0, built.stderr[-3000:]
    [row] = load_tasks(str(ROWS), instances=[REAL_ROW])
    runs = {p: run_protocol(mock_server, row, str(ROWS), p, tmp_path / p, "docker") for p in ("episodes", "per-call")}
    assert_per_call_protocol(runs["per-call"][0], runs["per-call"][2])
    assert_episodes_protocol(runs["episodes"][0], runs["episodes"][2])
    for requests, _, trajectory, _ in runs.values():
        assert_tokens_add_up(requests, trajectory)
    assert_same_outputs(runs, row)
    (episode,) = runs["per-call"][2]["episodes"]
    assert episode["sandbox"]["runtime"] == "docker" and episode["sandbox"]["id"]
    assert not {episode["sandbox"]["id"]} & set(sandbox_containers(full=True)), "the container was left behind"
    for protocol in ("episodes", "per-call"):
        graded = pacore(
            "swe",
            "eval",
            "--dataset",
            str(ROWS),
            "--instances",
            REAL_ROW,
            "--predictions",
            str(tmp_path / protocol / PREDICTIONS_FILE),
            "--run-id",
            protocol,
            "--output",
            str(tmp_path / "eval"),
        )
        assert graded.returncode == 0, graded.stderr[-3000:]
        summary = json.loads((tmp_path / "eval" / protocol / "summary.json").read_text())
        assert summary["resolved_ids"] == [REAL_ROW]


class ChatRuns(BaseCallbackHandler):
    """Counts the chat-model runs callbacks see, with the PaCoRe round each was tagged with, and the runs
    above each one."""

    def __init__(self):
        self.rounds: list[int] = []
        self.ended = 0
        self.parents: dict = {}  # run id -> parent run id
        self.names: dict = {}  # chain run id -> name
        self.chat_runs: list = []

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, name=None, **kwargs) -> None:
        self.parents[run_id], self.names[run_id] = parent_run_id, name

    def on_chat_model_start(self, serialized, messages, *, run_id, parent_run_id=None, metadata=None, **kwargs) -> None:
        self.rounds.append((metadata or {}).get("pacore_round"))
        self.parents[run_id] = parent_run_id
        self.chat_runs.append(run_id)

    def step_of(self, run_id) -> object:
        """The ``pacore_model_call`` run a run sits under, or None."""
        while run_id is not None and self.names.get(run_id) != "pacore_model_call":
            run_id = self.parents.get(run_id)
        return run_id

    def on_llm_end(self, response, **kwargs) -> None:
        self.ended += 1


def test_every_proposal_of_every_step_is_a_chat_model_run_the_callers_callbacks_see(mock_server):
    row = load_tasks("local", instances=[ROMAN])[0]
    seen = ChatRuns()
    with mock_server(scripted(row["patch"])) as server:
        model = chat_model(base_url=server.base_url, model="scripted")
        solver = per_call_solver(model, PaCoReConfig(rounds=[2]), RepairSettings(runtime="local"))

        async def go():
            try:
                return await solver.episode.ainvoke(
                    {"messages": solver.episode.messages_for(row), "task": row}, {"callbacks": [seen]}
                )
            finally:
                await model.aclose()

        with pytest.warns(UserWarning, match="no isolation"):
            state = asyncio.run(go())
        solver.close()
    assert state["stop_reason"] == "submitted" and state["patch"] == row["patch"]
    assert len(server.requests) == 9 and seen.ended == 9
    assert seen.rounds == [0, 0, 1] * 3
    steps = [seen.step_of(run) for run in seen.chat_runs]  # each step's proposals and synthesis under one run
    assert None not in steps and [steps.count(step) for step in dict.fromkeys(steps)] == [3, 3, 3]


def test_an_instance_without_a_patch_says_how_its_episodes_ended(mock_server, tmp_path):
    def gives_up(body: dict, attempt: int) -> dict:
        return {"content": "", "tool_calls": [tool_call("submit", {"note": "cannot fix"}, "c0")]}

    for protocol, endings in (("per-call", "1 by submitted"), ("episodes", "2 by submitted")):
        with mock_server(gives_up) as server:
            done = pacore(
                "swe",
                "run",
                "--dataset",
                "local",
                "--instances",
                ROMAN,
                "--base-url",
                server.base_url,
                "--model",
                "scripted",
                "--rounds",
                "2",
                "--runtime",
                "local",
                "--protocol",
                protocol,
                "--output",
                str(tmp_path / protocol),
            )
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"{ROMAN}: no patch (episodes ended: {endings})" in done.stderr
        (prediction,) = [json.loads(line) for line in (tmp_path / protocol / PREDICTIONS_FILE).read_text().splitlines()]
        assert prediction["model_patch"] == ""


class InFlightServer(MockOpenAIServer):
    """Counts the requests in flight and holds every proposal (a request without references) until all
    ``expected`` proposals of the run have arrived or ``patience`` seconds passed: so every proposal the client
    lets overlap does overlap, however slowly each instance starts."""

    def __init__(self, handler, expected: int, patience: float = 3.0):
        super().__init__(handler)
        self.expected, self.patience = expected, patience
        self.in_flight = self.peak = self.proposals = 0
        self.arrived = asyncio.Event()

    async def _chat(self, request):
        body = await request.json()  # aiohttp caches the body: the parent reads it again
        self.in_flight += 1  # every handler runs on the server's one loop: no lock needed
        self.peak = max(self.peak, self.in_flight)
        try:
            if "Reference Responses" not in body["messages"][1]["content"]:
                self.proposals += 1
                self.arrived.set()
                self.arrived = asyncio.Event()
                deadline = asyncio.get_running_loop().time() + self.patience
                while self.proposals < self.expected:
                    left = deadline - asyncio.get_running_loop().time()
                    if left <= 0:
                        break
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.arrived.wait(), left)
            return await super()._chat(request)
        finally:
            self.in_flight -= 1


def test_per_call_max_concurrency_bounds_the_whole_run_and_a_step_may_use_all_of_it(tmp_path):
    """Two instances at once, each step K=4 proposals, --max-concurrency 4: one limiter for the run, so at
    most 4 model calls are in flight however many instances run, and one step alone fills the bound."""

    def submits(body: dict, attempt: int) -> dict:
        return {"content": "", "tool_calls": [tool_call("submit", {"note": "cannot fix"}, "c0")]}

    instances = [ROMAN, "pacore__intervals-1"]
    with InFlightServer(submits, expected=4 * len(instances)) as server:
        done = pacore(
            "swe",
            "run",
            "--dataset",
            "local",
            "--instances",
            ",".join(instances),
            "--base-url",
            server.base_url,
            "--model",
            "scripted",
            "--rounds",
            "4",
            "--max-concurrency",
            "4",
            "--workers",
            "2",
            "--runtime",
            "local",
            "--protocol",
            "per-call",
            "--output",
            str(tmp_path / "run"),
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(server.requests) == 2 * (4 + 1)  # per instance: one step of 4 proposals and its synthesis
    assert server.peak == 4, f"{server.peak} model calls were in flight at once under --max-concurrency 4"


class KeyedServer(MockOpenAIServer):
    """Lists its models only to a client that sends its API key, as a hosted OpenAI-compatible API does."""

    KEY = "sk-test-key"

    async def _models(self, request):
        if request.headers.get("Authorization") != f"Bearer {self.KEY}":
            return web.json_response({"error": {"message": "missing or wrong API key"}}, status=401)
        return await super()._models(request)


def test_swe_run_without_model_discovers_it_with_the_key_from_the_environment(tmp_path):
    def submits(body: dict, attempt: int) -> dict:
        return {"content": "", "tool_calls": [tool_call("submit", {"note": "cannot fix"}, "c0")]}

    with KeyedServer(submits) as server:
        done = pacore(
            "swe",
            "run",
            "--dataset",
            "local",
            "--instances",
            ROMAN,
            "--base-url",
            server.base_url,
            "--rounds",
            "0",
            "--runtime",
            "local",
            "--output",
            str(tmp_path / "run"),
            env={"OPENAI_API_KEY": KeyedServer.KEY},
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert server.requests and {body["model"] for body in server.requests} == {server.model}
    assert set(server.keys) == {KeyedServer.KEY}
