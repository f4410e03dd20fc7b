"""The repair agent: action parsing, the episode loop and its sandbox lifecycle, and a real episode.

Fast tests drive the graph with a fake model (reply = function of the conversation) and an in-memory
sandbox. The integration tests run the real client against a scripted OpenAI server on loopback that
answers with tool calls, in a local copy and in a real Docker container, and grade the result with
swebench's graders.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading

import pytest
from fakes import PromptFunctionChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from mock_openai import MockOpenAIServer
from scripted_chat import tool_call

from pacore_agents.swe.actions import parse_actions
from pacore_agents.swe.repair_episode import RepairEpisode
from pacore_agents.swe.repair_settings import RepairSettings
from pacore_agents.swe.sandbox import CommandResult
from pacore_agents.swe.tasks import load_tasks
from pacore_graph.extend import cut_middle
from pacore_graph.models import OpenAICompatibleChatModel
from pacore_graph.synthesis.prompt import message_text

ROW = {"instance_id": "fake__task-1", "repo": "fake/task", "problem_statement": "add() subtracts", "base_commit": "0"}


class FakeSandbox:
    """In memory: `echo X` prints X, `fix` marks the repo changed, `crash` raises, `flood` prints a lot."""

    def __init__(self):
        self.workdir = "/fake"
        self.commands: list[tuple[str, float]] = []
        self.fixed = False
        self.closed = False

    def run(self, command: str, timeout: float = 120) -> CommandResult:
        assert not self.closed, "command after close"
        self.commands.append((command, timeout))
        if command == "crash":
            raise RuntimeError("the sandbox fell over")
        if command == "flood":
            return CommandResult(exit_code=0, output="H" * 5000 + "M" * 50000 + "T" * 5000, timed_out=False)
        if command == "torrent":  # what a sandbox hands back of 9 MB of output: its head and tail, and the size
            return CommandResult(
                exit_code=0, output="H" * 5000 + "[... cut ...]" + "T" * 5000, timed_out=False, output_bytes=9_000_000
            )
        if command == "fix":
            self.fixed = True
            return CommandResult(exit_code=0, output="", timed_out=False)
        if command.startswith("echo "):
            return CommandResult(exit_code=0, output=command[5:] + "\n", timed_out=False)
        return CommandResult(exit_code=127, output=f"bash: {command}: command not found\n", timed_out=False)

    def diff(self) -> str:
        return "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-a - b\n+a + b\n" if self.fixed else ""

    def close(self) -> None:
        self.closed = True


class Sandboxes:
    """An `open_sandbox` that remembers every sandbox it opened."""

    def __init__(self):
        self.opened: list[FakeSandbox] = []
        self.lock = threading.Lock()

    def __call__(self, row: dict) -> FakeSandbox:
        sandbox = FakeSandbox()
        with self.lock:
            self.opened.append(sandbox)
        return sandbox


def observations(messages: list[BaseMessage]) -> list[str]:
    """Texts of the messages after the task (the observations the agent got so far)."""
    return [message_text(m) for m in messages[2:] if not isinstance(m, AIMessage)]


def block(command: str, thought: str = "") -> AIMessage:
    return AIMessage(content=f"{thought}\n```bash\n{command}\n```")


def scripted_block_reply(messages: list[BaseMessage]) -> AIMessage:
    """A fenced-block model: look, fix, check, submit, each step chosen by what it has seen so far."""
    seen = observations(messages)
    if not seen:
        return block("echo hello", "Let me look around.")
    if len(seen) == 1:
        return block("fix", "The operator is wrong.")
    if len(seen) == 2:
        return block("echo checked")
    return block("submit", "Replaced the minus with a plus in add().")


def run_episode(model, settings=None, *, sandboxes=None, row=ROW):
    sandboxes = sandboxes or Sandboxes()
    episode = RepairEpisode(model, settings or RepairSettings(command_timeout=7), open_sandbox=sandboxes)
    state = asyncio.run(episode.ainvoke({"messages": episode.messages_for(row), "task": row}))
    episode.shutdown()
    return state, sandboxes, [state["record"]]


# ------------------------------------------------------------------------------------------- parsing


def test_parse_actions_reads_tool_calls_blocks_and_submission():
    calls = AIMessage(
        content="",
        tool_calls=[
            {"name": "bash", "args": {"command": "ls"}, "id": "a"},
            {"name": "submit", "args": {"note": "done"}, "id": "b"},
            {"name": "python", "args": {}, "id": "c"},
        ],
    )
    kinds = [(a.kind, a.command, a.note, a.call_id) for a in parse_actions(calls)]
    assert kinds[:2] == [("bash", "ls", "", "a"), ("submit", "", "done", "b")]
    assert kinds[2][0] == "invalid" and "python" in parse_actions(calls)[2].error

    as_bash = AIMessage(content="All done.", tool_calls=[{"name": "bash", "args": {"command": "submit"}, "id": "d"}])
    assert [(a.kind, a.note) for a in parse_actions(as_bash)] == [("submit", "All done.")]
    assert [(a.kind, a.command) for a in parse_actions(block("grep -n x a.py"))] == [("bash", "grep -n x a.py")]
    submitted = parse_actions(block("submit", "Fixed the off-by-one."))
    assert [(a.kind, a.note) for a in submitted] == [("submit", "Fixed the off-by-one.")]
    assert parse_actions(AIMessage(content="I think I am done.")) == []
    assert parse_actions(AIMessage(content="```bash\nls\n```\n```bash\npwd\n```")) == []  # one block per reply


def test_command_output_is_cut_to_head_and_tail_with_a_marker():
    text = "H" * 100 + "M" * 1000 + "T" * 100
    cut = cut_middle(text, 100, 100)
    assert cut.startswith("H" * 100) and cut.endswith("T" * 100)
    assert "[... 1000 characters cut ...]" in cut and "M" not in cut
    assert cut_middle("short", 100, 100) == "short"


# ------------------------------------------------------------------------------------------- episode loop


def test_fenced_block_model_fixes_submits_and_the_sandbox_is_closed():
    model = PromptFunctionChatModel(reply=scripted_block_reply)  # no bind_tools: the fenced-block fallback
    state, sandboxes, records = run_episode(model)
    (sandbox,) = sandboxes.opened
    assert [c for c, _ in sandbox.commands] == ["echo hello", "fix", "echo checked"]
    assert all(timeout == 7 for _, timeout in sandbox.commands)
    assert state["stop_reason"] == "submitted" and state["steps"] == 4
    assert (
        state["patch"].startswith("diff --git a/m.py") and state["note"] == "Replaced the minus with a plus in add()."
    )
    assert sandbox.closed
    # the system prompt taught the block format, and outputs came back as observations with exit codes
    assert "```bash" in message_text(state["messages"][0])
    assert "[exit code 0]\nhello" in message_text(state["messages"][3])
    (record,) = records
    assert record["stop_reason"] == "submitted" and record["patch"] == state["patch"]
    assert [m["role"] for m in record["messages"]][:4] == ["system", "human", "ai", "human"]


def test_step_limit_ends_the_episode_with_the_work_so_far():
    def never_submits(messages):
        return block("fix") if not observations(messages) else block("echo still looking")

    state, sandboxes, _ = run_episode(PromptFunctionChatModel(reply=never_submits), RepairSettings(step_limit=3))
    assert state["stop_reason"] == "step_limit" and state["steps"] == 3
    assert state["patch"]  # the changes made before the limit still count
    assert sandboxes.opened[0].closed


def test_a_reply_without_action_gets_a_reminder_not_a_crash():
    def chatty(messages):
        return AIMessage(content="Hmm.") if not observations(messages) else block("submit", "nothing to do")

    state, _, _ = run_episode(PromptFunctionChatModel(reply=chatty))
    assert "No action found" in message_text(state["messages"][3])
    assert state["stop_reason"] == "submitted" and state["patch"] == ""


def test_a_crash_is_recorded_with_the_messages_so_far_and_the_sandbox_is_closed():
    def crashes(messages):
        return block("echo one") if not observations(messages) else block("crash")

    state, sandboxes, records = run_episode(PromptFunctionChatModel(reply=crashes))
    assert state["stop_reason"] == "error" and "the sandbox fell over" in state["error"]
    assert state["patch"] == ""
    assert sandboxes.opened[0].closed
    assert records[0]["stop_reason"] == "error" and len(records[0]["messages"]) >= 4


def test_a_failing_model_ends_the_episode_and_closes_the_sandbox():
    def broken(messages):
        raise ValueError("model exploded")

    state, sandboxes, _ = run_episode(PromptFunctionChatModel(reply=broken))
    assert state["stop_reason"] == "error" and "model exploded" in state["error"]
    assert sandboxes.opened[0].closed


def test_long_outputs_reach_the_model_cut_to_head_and_tail():
    def floods(messages):
        return block("flood") if not observations(messages) else block("submit", "ok")

    state, _, _ = run_episode(PromptFunctionChatModel(reply=floods), RepairSettings(output_head=300, output_tail=200))
    shown = message_text(state["messages"][3])
    assert "[... 59500 characters cut ...]" in shown and len(shown) < 700


def test_the_cut_marker_counts_what_the_command_really_printed():
    """The sandbox already cut a 9 MB output to its head and tail: the model is told 9 MB, not the remainder."""

    def torrents(messages):
        return block("torrent") if not observations(messages) else block("submit", "ok")

    state, _, _ = run_episode(PromptFunctionChatModel(reply=torrents), RepairSettings(output_head=300, output_tail=200))
    shown = message_text(state["messages"][3])
    assert "[... 9513 characters cut here; the command printed 9000000 bytes in all ...]" in shown


def test_cancelling_an_episode_closes_its_sandbox():
    started = threading.Event()

    def slow(messages):
        started.set()
        threading.Event().wait(0.2)
        return block("echo slow")

    async def scenario():
        sandboxes = Sandboxes()
        episode = RepairEpisode(
            PromptFunctionChatModel(reply=slow), RepairSettings(step_limit=1000), open_sandbox=sandboxes
        )
        task = asyncio.ensure_future(episode.ainvoke({"messages": episode.messages_for(ROW), "task": ROW}))
        while not sandboxes.opened or len(sandboxes.opened[0].commands) < 2:
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        episode.shutdown()
        return sandboxes

    sandboxes = asyncio.run(scenario())
    assert started.is_set() and sandboxes.opened[0].closed


# ------------------------------------------------------------------------------------------- real episodes

ROMAN = "pacore__roman-1"


def tool_script(gold_patch: str):
    """A scripted OpenAI model that fixes a task through bash tool calls.

    Its reply is a function of the conversation: how many tool results it has seen. It looks at the
    repository, applies the fix with `git apply` from a here-document, runs the tests, then submits.
    """

    def handler(body: dict, attempt: int) -> dict:
        results = [m for m in body["messages"] if m["role"] == "tool"]
        step = len(results)
        if step == 0:
            return {
                "content": "Looking at the code.",
                "tool_calls": [tool_call("bash", {"command": "git ls-files"}, "c0")],
            }
        if step == 1:
            command = f"git apply <<'PATCH'\n{gold_patch}PATCH\ngit diff --stat"
            return {"content": "", "tool_calls": [tool_call("bash", {"command": command}, "c1")]}
        if step == 2:
            return {"content": "", "tool_calls": [tool_call("bash", {"command": "python3 -m pytest -q"}, "c2")]}
        return {"content": "", "tool_calls": [tool_call("submit", {"note": "Added the subtractive pairs."}, "c3")]}

    return handler


def roman_row() -> dict:
    return load_tasks("local", instances=[ROMAN])[0]


def hidden_parts(row: dict) -> list[str]:
    """Strings only the hidden tests contain: the agent must never see them."""
    return ["test_subtractive", 'MCMXCIV"', row["test_patch"][-60:]]


def assert_never_saw_hidden_tests(requests: list[dict], row: dict) -> None:
    everything = json.dumps(requests)
    for part in hidden_parts(row):
        assert json.dumps(part)[1:-1] not in everything


def test_tool_calling_episode_over_http_in_a_local_copy(mock_server):
    row = roman_row()
    with mock_server(tool_script(row["patch"])) as server:
        model = OpenAICompatibleChatModel(base_url=server.base_url, model="scripted")
        episode = RepairEpisode(model, RepairSettings(runtime="local"))

        async def go():
            try:
                return await episode.ainvoke({"messages": episode.messages_for(row), "task": row})
            finally:
                await model.aclose()

        with pytest.warns(UserWarning, match="no isolation"):
            state = asyncio.run(go())
        episode.shutdown()
    assert state["stop_reason"] == "submitted", state.get("error")
    assert state["patch"] == row["patch"] and state["note"] == "Added the subtractive pairs."
    assert len(server.requests) == 4 and all(r["tools"][0]["function"]["name"] == "bash" for r in server.requests)
    last = server.requests[-1]["messages"]
    assert [m["role"] for m in last] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert "roman/numerals.py" in last[3]["content"] and "passed" in last[7]["content"]
    assert_never_saw_hidden_tests(server.requests, row)


def docker_ready() -> bool:
    return (
        shutil.which("docker") is not None and subprocess.run(["docker", "info"], capture_output=True).returncode == 0
    )


def container_exists(container_id: str) -> bool:
    return subprocess.run(["docker", "inspect", container_id], capture_output=True).returncode == 0


def docker_episode(handler, row: dict) -> tuple[dict, dict, list[dict]]:
    """One real episode in Docker against a scripted server: final state, episode record, request bodies."""
    assert docker_ready(), "the docker tests need a daemon: run scripts/docker-setup.sh"
    with MockOpenAIServer(handler) as server:
        model = OpenAICompatibleChatModel(base_url=server.base_url, model="scripted")
        episode = RepairEpisode(model, RepairSettings(runtime="docker"))

        async def go():
            try:
                return await episode.ainvoke({"messages": episode.messages_for(row), "task": row})
            finally:
                await model.aclose()

        state = asyncio.run(go())
        episode.shutdown()
    return state, state["record"], server.requests


@pytest.mark.docker
def test_scripted_model_fixes_a_task_in_docker_and_swebench_grades_it_resolved(tmp_path):
    from pacore_agents.swe.evaluation import evaluate

    row = roman_row()
    state, record, requests = docker_episode(tool_script(row["patch"]), row)
    assert state["stop_reason"] == "submitted", state.get("error")
    assert state["patch"] == row["patch"]
    assert "passed" in requests[-1]["messages"][-1]["content"]
    assert_never_saw_hidden_tests(requests, row)
    assert record["sandbox"]["id"] and not container_exists(record["sandbox"]["id"]), "container left behind"

    prediction = {"instance_id": row["instance_id"], "model_name_or_path": "scripted", "model_patch": state["patch"]}
    summary = evaluate([row], {row["instance_id"]: prediction}, run_id="agent", output_dir=tmp_path, progress=False)
    assert summary.resolved_ids == [row["instance_id"]]


@pytest.mark.docker
def test_the_container_is_removed_after_a_failing_episode():
    """The model server breaks mid-episode (HTTP 400, not retried): the episode fails, its container goes."""
    row = roman_row()
    hostnames: list[str] = []

    def handler(body: dict, attempt: int):
        if not any(m["role"] == "tool" for m in body["messages"]):
            return {"content": "", "tool_calls": [tool_call("bash", {"command": "hostname"}, "h")]}
        hostnames.append(body["messages"][-1]["content"].split("\n", 1)[1].strip())
        return 400

    state, record, _ = docker_episode(handler, row)
    assert state["stop_reason"] == "error" and "HTTP 400" in state["error"]
    container = record["sandbox"]["id"]
    assert hostnames and container.startswith(hostnames[0]), "the command ran in the episode's container"
    assert not container_exists(container), f"container {container} was left behind"


def test_episode_messages_carry_only_the_public_task():
    row = roman_row()
    episode = RepairEpisode(PromptFunctionChatModel(reply=scripted_block_reply), open_sandbox=Sandboxes())
    text = "\n".join(message_text(m) for m in episode.messages_for(row))
    episode.shutdown()
    assert row["problem_statement"].strip() in text
    for part in hidden_parts(row) + [row["patch"][-80:]]:
        assert part not in text
    assert isinstance(episode.messages_for(row)[1], HumanMessage)
