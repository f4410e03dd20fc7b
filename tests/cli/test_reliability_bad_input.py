"""Bad input: invalid schedules, empty problems, unreadable dataset files, rows missing fields, an
unreachable server, a wrong model name, a context overflow. Each gets one clear message naming what is
wrong, before anything is spent where possible, and a run keeps what it had.
"""

from __future__ import annotations

import json

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import ValidationError

from pacore_benchmarks.math.data import DataError, load_problems
from pacore_emulator import Emulator, EmulatorConfig
from pacore_graph import PaCoReConfig, PaCoReContext, PaCoReError, Problem, RoundFailedError, RunFolder
from pacore_graph.cli import main as pacore_main
from pacore_graph.extend import ResultsFile, RetryPolicy, Trajectory
from pacore_graph.graph.builder import build_pacore_graph
from pacore_graph.graph.runner import PaCoReRunner, to_messages
from pacore_graph.models.embedded import free_port
from pacore_graph.models.openai_compatible import OpenAICompatibleChatModel
from pacore_graph.models.preflight import check_server

NO_RETRY = RetryPolicy(max_attempts=1)


def _cli(capsys, *argv: str) -> tuple[int, list[str]]:
    code = pacore_main(list(argv))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    return code, lines


# ------------------------------------------------------------------------------------------- schedules


@pytest.mark.parametrize(
    ("rounds", "named"),
    [
        ("4,x", "--rounds takes comma-separated integers"),
        ("0,3", "round 1 asks for 0 trajectories"),
        ("4,-2", "round 2 asks for -2"),
        ("1000000", "each round takes 1 to 1024"),
        ("2,2,2,2,2,2,2,2,2", "at most 8"),
    ],
)
def test_invalid_schedule_is_one_line_naming_it(capsys, rounds, named):
    closed = f"http://127.0.0.1:{free_port()}/v1"  # never reached: the schedule is checked first
    code, lines = _cli(capsys, "solve", "q", f"--rounds={rounds}", "--base-url", closed, "--model", "m")
    assert code == 2  # a refused input
    assert len(lines) == 1 and lines[0].startswith("pacore: error: ") and named in lines[0]


def test_invalid_config_fails_at_construction_naming_the_field():
    with pytest.raises(ValidationError, match=r"rounds\[1\] is 0"):
        PaCoReConfig(rounds=[4, 0])
    with pytest.raises(ValidationError, match="max_tokens"):
        PaCoReConfig(max_tokens=9000, context_window=8192)
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        PaCoReConfig.preset("huge")


# -------------------------------------------------------------------------------------------- problems


def test_empty_problems_are_refused_before_any_call():
    with pytest.raises(ValueError, match="the problem is empty"):
        to_messages("   ")
    with pytest.raises(ValueError, match="the message list is empty"):
        to_messages([])


class Counting:
    def __init__(self):
        self.calls = 0

    async def explore(self, messages, episode):
        index = episode.index
        self.calls += 1
        return Trajectory(content=f"c{index}", completion_tokens=1)


async def test_a_conversation_without_a_user_message_is_refused_before_round_one_is_spent():
    explorer = Counting()
    with pytest.raises(ValueError, match="user"):
        await PaCoReRunner(explorer, PaCoReConfig(rounds=[3])).arun([("system", "be brief")])
    assert explorer.calls == 0


def test_messages_file_that_is_not_json_is_named(capsys, tmp_path):
    broken = tmp_path / "conversation.json"
    broken.write_text('[{"role": "user", "content": "hi"')
    code, lines = _cli(
        capsys,
        "solve",
        "--messages-file",
        str(broken),
        "--base-url",
        f"http://127.0.0.1:{free_port()}/v1",
        "--model",
        "m",
    )
    assert code == 2 and len(lines) == 1
    assert str(broken) in lines[0] and "JSON" in lines[0]


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ('{"role": "user", "content": "hi"}', "must be a list of messages, not an object"),  # its keys were sent
        ("[1, 2]", "[0] must be a message object"),  # a 23-line traceback before
        ('[{"role": "user", "content": ["hi"]}]', "[0].content[0] must be a content part"),
        ('[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,x"}}]}]', "has no text"),
        ('[{"role": "user", "content": "a \\ud800 b"}]', "lone surrogate"),
        ('[{"role": "user", "content": "hi", "x": NaN}]', "NaN is not a JSON number"),
        ("[]", "is empty"),
    ],
)
def test_a_messages_file_of_anything_but_messages_is_one_line_before_anything_starts(capsys, tmp_path, content, named):
    path = tmp_path / "conversation.json"
    path.write_text(content)
    closed = f"http://127.0.0.1:{free_port()}/v1"  # never reached: the file is checked first
    code, lines = _cli(capsys, "solve", "--messages-file", str(path), "--base-url", closed, "--model", "m")
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"pacore: error: --messages-file {path}")
    assert named in lines[0]


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["serve", "--port", "99999"], "--port 99999 is not a TCP port (1-65535)"),  # it listened elsewhere before
        (["serve", "--port", "0"], "--port 0 is not a TCP port"),
        (["serve-local", "--port", "70000"], "--port 70000 is not a TCP port"),
        (["serve-vllm", "--emulate", "--replicas", "2", "--port", "65535"], "--port 65537 is not a TCP port"),
        (["solve", "q", "--api-key", ""], "--api-key is empty"),
        (["serve", "--upstream-api-key", " "], "--upstream-api-key is empty"),
    ],
)
def test_bad_ports_and_empty_keys_are_one_line_before_anything_starts(capsys, argv, named):
    closed = f"http://127.0.0.1:{free_port()}/v1"  # never reached: refused first
    code, lines = _cli(capsys, *argv, *(["--base-url", closed] if argv[0] in ("solve", "serve") else []))
    assert code == 2 and len(lines) == 1 and lines[0].startswith("pacore: error: ") and named in lines[0]


def test_an_empty_pacore_api_key_is_refused_at_start_up(capsys, monkeypatch):
    """PACORE_API_KEY="" used to start a server that refused every request (no client can send an empty key)."""
    monkeypatch.setenv("PACORE_API_KEY", "")
    code, lines = _cli(capsys, "serve", "--base-url", f"http://127.0.0.1:{free_port()}/v1")
    assert code == 2 and len(lines) == 1 and "--api-key or $PACORE_API_KEY is empty" in lines[0]


def test_a_password_in_a_base_url_is_never_printed(capsys):
    url = f"http://alice:s3cr3t@127.0.0.1:{free_port()}/v1"
    for command in ("solve", "serve"):
        code, lines = _cli(capsys, command, *(["q"] if command == "solve" else []), "--base-url", url)
        assert code == 1 and len(lines) == 1 and "s3cr3t" not in lines[0] and "alice:***@" in lines[0]
        assert lines[0].startswith("pacore: error: ")


def test_a_huge_problem_the_server_refuses_keeps_run_json_small_and_says_a_rerun_would_fail_too(
    capsys, tmp_path, mock_server
):
    """Issue 25: a 10 MB problem wrote a 10.5 MB run.json and said "rerun to continue", which failed the same way."""
    problem = tmp_path / "problem.json"
    problem.write_text(json.dumps([{"role": "user", "content": "x " * 500_000}]))  # 1 MB
    refusal = (400, "This model's maximum context length is 8192 tokens. However, you requested 250000 tokens.")
    with mock_server(lambda body, attempt: refusal) as upstream:
        code, lines = _cli(
            capsys,
            "solve",
            "--messages-file",
            str(problem),
            "--base-url",
            upstream.base_url,
            "--model",
            upstream.model,
            "--rounds",
            "2",
            "--output",
            str(tmp_path / "out"),
        )
        sent = len(upstream.requests)
    assert code == 1 and sent == 2  # the two trajectories, each refused once: a 400 is not retried
    assert "a rerun would be refused the same way" in lines[-1] and "rerun the same command" not in lines[-1]
    saved = json.loads((tmp_path / "out" / "run.json").read_text())
    assert (tmp_path / "out" / "run.json").stat().st_size < 4096
    assert set(saved["fingerprint"]["messages"]) == {"sha256", "characters"}


def test_missing_messages_file_is_named(capsys, tmp_path):
    code, lines = _cli(
        capsys,
        "solve",
        "--messages-file",
        str(tmp_path / "nope.json"),
        "--model",
        "m",
        "--base-url",
        f"http://127.0.0.1:{free_port()}/v1",
    )
    missing = tmp_path / "nope.json"
    assert code == 2 and lines == [f"pacore: error: cannot read --messages-file {missing}: No such file or directory"]


async def test_a_thread_that_already_ran_accepts_a_new_input():
    """A user compiling the PaCoRe graph with a checkpointer and invoking one thread twice (a second
    question) gets a fresh PaCoRe run, not an IndexError from the finished one's round counter."""
    explorer = Counting()
    graph = build_pacore_graph(explorer, PaCoReConfig(rounds=[2])).compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    await graph.ainvoke({}, config, context=PaCoReContext(messages=to_messages("first question")))
    second = await graph.ainvoke({}, config, context=PaCoReContext(messages=to_messages("second question")))
    assert [r["k"] for r in second["rounds"]] == [2, 1] and second["answer"].content
    assert explorer.calls == 6


def test_the_graph_without_its_context_says_what_to_pass():
    graph = build_pacore_graph(Counting(), PaCoReConfig(rounds=[2])).compile()
    with pytest.raises(TypeError, match=r"context=PaCoReContext\(messages="):
        graph.invoke({"messages": to_messages("a question")})


# ------------------------------------------------------------------------------------------- datasets


def test_dataset_problems_are_named_with_file_and_line(tmp_path):
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(DataError, match="does not exist"):
        load_problems(missing)
    no_answer = tmp_path / "no_answer.jsonl"
    no_answer.write_text('{"id": "a", "problem": "1+1", "answer": "2"}\n{"id": "b", "problem": "2+2"}\n')
    with pytest.raises(DataError, match=r"no_answer.jsonl:2: row is missing field\(s\) answer"):
        load_problems(no_answer)
    torn = tmp_path / "torn.jsonl"
    torn.write_text('{"id": "a", "problem": "1+1", "answer": "2"}\n{"id": "b", "probl')
    with pytest.raises(DataError, match=r"torn.jsonl:2: not valid JSON"):
        load_problems(torn)
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(DataError, match="cannot read dataset .*binary.jsonl"):
        load_problems(binary)


def test_math_cli_reports_a_bad_dataset_in_one_line(capsys, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "a", "problem": "1+1"}) + "\n")
    code, lines = _cli(
        capsys,
        "bench",
        "math",
        "--data",
        str(rows),
        "--output",
        str(tmp_path / "out"),
        "--base-url",
        f"http://127.0.0.1:{free_port()}/v1",
        "--model",
        "m",
    )
    assert code == 2
    assert lines[-1].startswith("pacore: error: ") and "rows.jsonl:1" in lines[-1] and "answer" in lines[-1]


# -------------------------------------------------------------------------------------------- servers


@pytest.mark.parametrize(
    ("command", "code", "prefix"),
    [
        (["solve", "q"], 2, "pacore: error: "),
        (["bench", "math", "--data", "rows.jsonl"], 2, "pacore: error: "),
        (["bench", "multichallenge", "--data", "rows.jsonl"], 2, "pacore: error: "),
    ],
)
def test_several_base_urls_are_one_line_pointing_at_the_router(capsys, command, code, prefix):
    closed = [f"http://127.0.0.1:{free_port()}/v1" for _ in range(2)]  # never reached: refused first
    got, lines = _cli(capsys, *command, "--base-url", closed[0], "--base-url", closed[1], "--model", "m")
    assert got == code and len(lines) == 1
    assert lines[0].startswith(f"{prefix}2 base URLs given; one server URL per model") and "--replicas N" in lines[0]


def test_unreachable_server_is_one_clear_message(capsys):
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(PaCoReError, match=f"cannot reach the model server at {url}"):
        check_server(OpenAICompatibleChatModel(base_url=url, model="m"))
    code, lines = _cli(capsys, "solve", "q", "--base-url", url)
    assert code == 1 and len(lines) == 1 and f"cannot reach the model server at {url}" in lines[0]


async def test_unreachable_server_mid_run_fails_the_problem_with_the_reason_and_keeps_the_rest(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    model = OpenAICompatibleChatModel(base_url=url, model="m")
    RunFolder(tmp_path, fingerprint={}, progress=False).claim().release()  # an earlier run made the folder
    results = ResultsFile(tmp_path / "results.jsonl", key=lambda row: row["id"])
    results.append({"id": "done-before", "answer": "42"})
    config = PaCoReConfig(rounds=[2], retry=RetryPolicy(max_attempts=2, initial_delay=0))
    try:
        async with RunFolder(tmp_path, fingerprint={}, progress=False) as folder:
            summary = await folder.run(
                model, config, [Problem(id="done-before", messages="a"), Problem(id="new", messages="b")]
            )
    finally:
        await model.aclose()
    assert summary.skipped == 1 and list(summary.failed) == ["new"]
    assert "Cannot connect" in summary.failed["new"] or "Connect" in summary.failed["new"]
    assert [row["id"] for row in ResultsFile(tmp_path / "results.jsonl", key=lambda r: r["id"]).rows] == ["done-before"]


def test_wrong_model_name_is_caught_before_the_run():
    with Emulator(EmulatorConfig()) as emu:
        check_server(OpenAICompatibleChatModel(base_url=emu.base_url, model=emu.config.model))
        with pytest.raises(PaCoReError, match=r"does not serve model 'gpt-9'; it serves emulated-model"):
            check_server(OpenAICompatibleChatModel(base_url=emu.base_url, model="gpt-9"))


def test_wrong_model_name_in_a_run_is_one_line_and_not_retried(capsys):
    with Emulator(EmulatorConfig(ttft=0.01)) as emu:
        code, lines = _cli(capsys, "solve", "q", "--rounds", "3", "--base-url", emu.base_url, "--model", "gpt-9")
        requests = emu.stats()["requests"]
    assert code == 1 and requests == 3  # a 404 is never retried, and the final round is never sent
    assert lines[-1].startswith("pacore: ") and "HTTP 404" in lines[-1] and "wrong model name" in lines[-1]


async def test_context_overflow_is_named_and_not_retried():
    with Emulator(EmulatorConfig(ttft=0.01, max_model_len=64)) as emu:
        model = OpenAICompatibleChatModel(base_url=emu.base_url, model=emu.config.model)
        try:
            with pytest.raises(RoundFailedError) as caught:
                await PaCoReRunner(model, PaCoReConfig(rounds=[2])).arun("word " * 400)
        finally:
            await model.aclose()
        assert emu.stats()["requests"] == 2
    message = str(caught.value)
    assert "HTTP 400" in message and "does not fit the model's context" in message
    assert "maximum context length is 64 tokens" in message
