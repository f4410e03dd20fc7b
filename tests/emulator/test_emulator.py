"""The serving emulator over real HTTP on loopback: answers, streams, reasoning fields, usage, faults, log."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import aiohttp
import pytest
from waits import await_until

from pacore_emulator import Emulator, EmulatorConfig, FaultRates
from pacore_emulator.gpu import GpuClock, PrefixCache
from pacore_emulator.process import build_parser, config_from_args

MODEL = "emulated-model"
FAST = {"ttft": 0.0, "token_delay": 0.0, "output_tokens": 40}


def body(text: str = "What is 6 times 7?", **extra) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], **extra}


async def post(url: str, payload: dict, timeout: float = 10) -> tuple[int, bytes]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        async with session.post(url + "/chat/completions", json=payload) as response:
            return response.status, await response.read()


def sse_events(raw: bytes) -> list[str]:
    return [line[len("data: ") :] for line in raw.decode().split("\n") if line.startswith("data: ")]


def assemble(events: list[str]) -> dict:
    """Concatenate a stream's deltas the way a client would."""
    out = {"content": "", "reasoning": "", "finish_reason": None, "usage": None, "chunks": 0}
    for event in events:
        if event == "[DONE]":
            break
        piece = json.loads(event)
        out["usage"] = piece.get("usage") or out["usage"]
        for choice in piece["choices"]:
            out["chunks"] += 1
            delta = choice["delta"]
            out["content"] += delta.get("content") or ""
            out["reasoning"] += delta.get("reasoning") or ""
            out["finish_reason"] = choice.get("finish_reason") or out["finish_reason"]
    return out


@pytest.fixture(scope="module")
def emu():
    with Emulator(EmulatorConfig(**FAST)) as server:
        yield server


async def test_plain_completion_has_reasoning_usage_and_an_answer(emu):
    status, raw = await post(emu.base_url, body())
    assert status == 200
    data = json.loads(raw)
    message = data["choices"][0]["message"]
    assert data["choices"][0]["finish_reason"] == "stop"
    assert message["reasoning"] and "<think>" not in message["content"]
    assert "\\boxed{" in message["content"]
    usage = data["usage"]
    assert usage["completion_tokens"] == 40
    assert usage["prompt_tokens"] > 0 and usage["total_tokens"] == usage["prompt_tokens"] + 40


async def test_models_endpoint_lists_the_model(emu):
    async with aiohttp.ClientSession() as session:
        async with session.get(emu.base_url + "/models") as response:
            listed = await response.json()
    assert [m["id"] for m in listed["data"]] == [MODEL]


async def test_same_prompt_differs_between_repeats_and_repeats_after_reset(emu):
    emu.reset()
    first = json.loads((await post(emu.base_url, body("repeat me")))[1])["choices"][0]["message"]
    second = json.loads((await post(emu.base_url, body("repeat me")))[1])["choices"][0]["message"]
    emu.reset()
    again = json.loads((await post(emu.base_url, body("repeat me")))[1])["choices"][0]["message"]
    assert first["reasoning"] != second["reasoning"]  # K parallel trajectories must not be clones
    assert again == first


async def test_stream_matches_plain_reply_and_reports_usage_only_when_asked(emu):
    emu.reset()
    plain = json.loads((await post(emu.base_url, body("stream me")))[1])["choices"][0]["message"]
    emu.reset()
    status, raw = await post(emu.base_url, body("stream me", stream=True, stream_options={"include_usage": True}))
    assert status == 200
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    streamed = assemble(events)
    assert streamed["content"] == plain["content"]
    assert streamed["reasoning"] == plain["reasoning"]
    assert streamed["finish_reason"] == "stop"
    assert streamed["usage"]["completion_tokens"] == 40
    emu.reset()
    _, raw = await post(emu.base_url, body("stream me", stream=True))
    assert assemble(sse_events(raw))["usage"] is None


async def test_streams_are_sent_token_by_token_over_time():
    config = EmulatorConfig(ttft=0.0, token_delay=0.01, output_tokens=30, stream_tick=0.01)
    with Emulator(config) as server:
        async with aiohttp.ClientSession() as session:
            async with session.post(server.base_url + "/chat/completions", json=body(stream=True)) as response:
                reads = [chunk async for chunk in response.content.iter_any()]
    assert len(reads) > 3  # several network writes, not one buffered blob
    events = sse_events(b"".join(reads))
    assert assemble(events)["chunks"] == 30 + 2  # role chunk, 30 tokens, finish chunk


async def test_max_tokens_cuts_with_finish_reason_length(emu):
    _, raw = await post(emu.base_url, body(max_tokens=7))
    data = json.loads(raw)
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["usage"]["completion_tokens"] == 7
    assert data["choices"][0]["message"]["content"] is None  # still thinking when cut, as vLLM reports it
    _, raw = await post(emu.base_url, body(stream=True, max_completion_tokens=5))
    assert assemble(sse_events(raw))["finish_reason"] == "length"


@pytest.mark.parametrize("style", ["reasoning", "reasoning_content", "both", "think", "none"])
async def test_reasoning_styles(style):
    with Emulator(EmulatorConfig(reasoning=style, **FAST)) as server:
        _, raw = await post(server.base_url, body())
        _, streamed = await post(server.base_url, body(stream=True))
    message = json.loads(raw)["choices"][0]["message"]
    first_delta_keys = {k for e in sse_events(streamed)[1:2] for k in json.loads(e)["choices"][0]["delta"]}
    content = message["content"]
    assert "\\boxed{" in content
    if style in ("reasoning", "reasoning_content"):
        assert message[style] and set(message) & {"reasoning", "reasoning_content"} == {style}
        assert first_delta_keys == {style}
    elif style == "both":
        assert message["reasoning"] == message["reasoning_content"]
        assert first_delta_keys == {"reasoning", "reasoning_content"}
    elif style == "think":
        assert content.startswith("<think>") and "</think>" in content
        assert "\\boxed{" in content.rpartition("</think>")[2]
        assert "reasoning" not in message and first_delta_keys == {"content"}
    else:
        assert "<think>" not in content and "reasoning" not in message and "reasoning_content" not in message


async def test_no_usage_when_disabled():
    with Emulator(EmulatorConfig(usage=False, **FAST)) as server:
        _, raw = await post(server.base_url, body())
        _, streamed = await post(server.base_url, body(stream=True, stream_options={"include_usage": True}))
    assert "usage" not in json.loads(raw)
    assert assemble(sse_events(streamed))["usage"] is None


async def test_synthesis_prompt_answers_with_the_majority_of_its_references(emu):
    from pacore_graph.synthesis.prompt import render_synthesis_prompt

    references = ["so \\boxed{7}.", "I get \\boxed{3}.", "The answer is \\boxed{7}."]
    prompt = render_synthesis_prompt("What is 3 + 4?", references)
    for _ in range(3):
        _, raw = await post(emu.base_url, body(prompt))
        assert json.loads(raw)["choices"][0]["message"]["content"].endswith("\\boxed{7}.")


async def test_wrong_model_and_context_overflow_get_clear_errors():
    with Emulator(EmulatorConfig(max_model_len=1000, **FAST)) as server:
        status, raw = await post(server.base_url, {**body(), "model": "no-such-model"})
        assert status == 404 and "no-such-model" in json.loads(raw)["error"]["message"]
        status, raw = await post(server.base_url, body("x" * 8000))
        assert status == 400 and "maximum context length is 1000" in json.loads(raw)["error"]["message"]
        status, raw = await post(server.base_url, body(max_tokens=995))
        assert status == 400
        async with aiohttp.ClientSession() as session:
            async with session.post(server.base_url + "/chat/completions", data=b"{not json") as response:
                assert response.status == 400
        errors = server.stats()["errors"]
    assert errors == {"model": 1, "context": 2, "bad_request": 1}


# ---------------------------------------------------------------------------------------------- faults


def only(kind: str, **extra) -> EmulatorConfig:
    return EmulatorConfig(faults=FaultRates(**{kind: 1.0}), hang_seconds=30, **{**FAST, **extra})


@pytest.mark.parametrize("kind,status", [("http_500", 500), ("http_503", 503), ("http_429", 429)])
async def test_http_error_faults(kind, status):
    with Emulator(only(kind)) as server:
        got, raw = await post(server.base_url, body())
        assert got == status and "error" in json.loads(raw)
        assert server.stats()["faults"] == {kind: 1}


@pytest.mark.parametrize("kind", ["http_429", "http_503"])
async def test_rate_limit_faults_carry_retry_after_when_configured(kind):
    with Emulator(only(kind, retry_after=3)) as server:
        async with aiohttp.ClientSession() as session:
            async with session.post(server.base_url + "/chat/completions", json=body()) as response:
                assert response.headers.get("Retry-After") == "3"
    with Emulator(only(kind)) as server:
        async with aiohttp.ClientSession() as session:
            async with session.post(server.base_url + "/chat/completions", json=body()) as response:
                assert "Retry-After" not in response.headers


async def test_timeout_fault_hangs_until_the_client_gives_up():
    with Emulator(only("timeout")) as server:
        with pytest.raises(asyncio.TimeoutError):
            await post(server.base_url, body(), timeout=0.5)
        assert server.stats()["faults"] == {"timeout": 1}


async def test_drop_fault_closes_the_connection_without_a_response():
    with Emulator(only("drop")) as server:
        with pytest.raises(aiohttp.ClientConnectionError):  # disconnected or reset, depending on timing
            await post(server.base_url, body())


async def test_malformed_fault_sends_broken_json():
    with Emulator(only("malformed")) as server:
        status, raw = await post(server.base_url, body())
        assert status == 200
        with pytest.raises(ValueError):
            json.loads(raw)
        _, streamed = await post(server.base_url, body(stream=True))
        with pytest.raises(ValueError):
            assemble(sse_events(streamed))


async def test_cut_stream_fault_stops_midway():
    with Emulator(only("cut_stream", output_tokens=60)) as server:
        received = b""
        with pytest.raises(aiohttp.ClientPayloadError):
            async with aiohttp.ClientSession() as session:
                async with session.post(server.base_url + "/chat/completions", json=body(stream=True)) as response:
                    assert response.status == 200
                    async for chunk in response.content.iter_any():
                        received += chunk
        events = sse_events(received)
        assert events and "[DONE]" not in events and 1 < len(events) < 62
        with pytest.raises(aiohttp.ClientPayloadError):
            await post(server.base_url, body())  # non-streamed: a body shorter than its Content-Length


async def test_fault_rates_are_seeded_and_a_retry_is_a_fresh_draw():
    config = EmulatorConfig(faults=FaultRates(http_500=0.3), **FAST)
    outcomes = []
    for _ in range(2):
        with Emulator(config) as server:
            statuses = [(await post(server.base_url, body(f"problem {i}")))[0] for i in range(60)]
            outcomes.append(statuses)
            failed = [i for i, status in enumerate(statuses) if status == 500]
            retried = [(await post(server.base_url, body(f"problem {i}")))[0] for i in failed]
    assert outcomes[0] == outcomes[1]  # same seed, same faults
    assert 8 <= outcomes[0].count(500) <= 30
    assert retried.count(200) > len(retried) // 2  # retries are new draws, so most succeed


def test_fault_rates_above_one_are_refused():
    with pytest.raises(ValueError, match="more than 1"):
        FaultRates(http_500=0.7, drop=0.5)


# ------------------------------------------------------------------------------- log, load, transport


async def test_request_log_records_every_body_exactly(tmp_path):
    log = tmp_path / "requests.jsonl"
    sent = [body("first"), body("second", temperature=1.0, top_p=1.0, stream=True)]
    with Emulator(EmulatorConfig(request_log=str(log), **FAST)) as server:
        for payload in sent:
            await post(server.base_url, payload)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["body"] for r in records] == sent
    assert [r["occurrence"] for r in records] == [0, 0] and all(r["fault"] is None for r in records)


async def test_slots_queue_requests_beyond_capacity():
    with Emulator(EmulatorConfig(ttft=0.5, token_delay=0.0, output_tokens=5, slots=2)) as server:
        results = await asyncio.gather(*(post(server.base_url, body(f"q{i}")) for i in range(6)))
        stats = server.stats()
    assert [status for status, _ in results] == [200] * 6
    assert stats["peak_active"] == 2 and stats["peak_queue"] >= 1 and stats["completed"] == 6


async def test_keep_alive_and_chunked_request_bodies(emu):
    emu.reset()
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:
        for i in range(5):
            async with session.post(emu.base_url + "/chat/completions", json=body(f"k{i}")) as response:
                assert response.status == 200
                await response.read()

        async def chunks():
            raw = json.dumps(body("chunked")).encode()
            for start in range(0, len(raw), 7):
                yield raw[start : start + 7]

        async with session.post(emu.base_url + "/chat/completions", data=chunks()) as response:
            assert response.status == 200 and "\\boxed{" in (await response.text())
    assert emu.stats()["completed"] == 6


async def test_many_requests_in_flight_at_once():
    config = EmulatorConfig(ttft=2.0, token_delay=0.0, output_tokens=10)  # long enough to overlap even on a busy CI
    with Emulator(config) as server:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def one(i: int) -> int:
                async with session.post(server.base_url + "/chat/completions", json=body(f"p{i}")) as response:
                    await response.read()
                    return response.status

            statuses = await asyncio.gather(*(one(i) for i in range(1024)))
        stats = server.stats()
    assert statuses == [200] * 1024
    assert stats["peak_active"] > 512  # they were really concurrent, none refused by the backlog


# ------------------------------------------------------------------------------------- command line


def test_command_line_flags_build_the_config():
    args = build_parser().parse_args(
        [
            "--port",
            "0",
            "--output-tokens",
            "10-20",
            "--fault",
            "http_500=0.05",
            "--fault",
            "drop=0.02",
            "--reasoning",
            "think",
            "--no-usage",
        ]
    )
    config = config_from_args(args)
    assert config.output_tokens == (10, 20) and config.reasoning == "think" and not config.usage
    assert config.faults.http_500 == 0.05 and config.faults.drop == 0.02
    with pytest.raises(SystemExit, match="unknown fault kind"):
        config_from_args(build_parser().parse_args(["--fault", "gremlins=0.1"]))


def test_module_entry_serves_and_exits_with_its_parent():
    process = subprocess.Popen(
        [sys.executable, "-m", "pacore_emulator", "--port", "0", "--exit-with-stdin"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert line.startswith("EMULATOR READY port=")
        port = int(line.split("=")[1])
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as response:
            assert json.loads(response.read())["data"][0]["id"] == MODEL
        process.stdin.close()
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()


# ------------------------------------------------------------------------ prefix cache and GPU time


def test_prefix_cache_hits_whole_blocks_of_a_shared_prefix_only():
    cache = PrefixCache(capacity_tokens=10_000, block_size=4)  # 4 tokens = 16 characters per block
    text = "a" * 160  # 10 blocks
    assert cache.admit(text, prompt_tokens=40) == 0
    assert cache.admit(text, prompt_tokens=40) == 36  # the last token is always computed: 9 whole blocks
    assert cache.admit("a" * 100 + "b" * 60, prompt_tokens=40) == 24  # 100 shared chars: 6 whole blocks
    assert cache.admit("b" + "a" * 159, prompt_tokens=40) == 0  # same blocks later on, different prefix


def test_prefix_cache_evicts_least_recently_used_tails_first():
    cache = PrefixCache(capacity_tokens=16, block_size=4)  # 4 blocks
    first, second = "x" * 48, "y" * 48  # 3 blocks each
    cache.admit(first, 13)
    cache.admit(second, 13)  # 6 blocks wanted, 4 kept: first's tail went first, its head stays
    assert cache.admit(second, 13) == 12
    assert cache.admit(first, 13) == 4  # only the head block of first survived


def test_gpu_clock_queues_prefills_and_counts_their_stall():
    clock = GpuClock(prefill_token_time=0.01)
    assert clock.prefill(0, now=5.0) == 5.0  # fully cached: no prefill
    assert clock.prefill(100, now=5.0) == 6.0
    assert clock.prefill(50, now=5.5) == 6.5  # waits for the one before
    assert clock.stalled(5.5) == pytest.approx(0.5) and clock.pending(5.5) == pytest.approx(1.0)
    assert clock.stalled(7.0) == pytest.approx(1.5) and clock.pending(7.0) == 0.0


def test_gpu_clock_decodes_slower_the_more_context_the_batch_holds():
    clock = GpuClock(prefill_token_time=0.01, token_delay=0.001, context_time=1e-7)  # 10k tokens double a step
    clock.hold(10_000, now=0.0)
    assert clock.pace() == pytest.approx(0.5)
    assert clock.progress(2.0) == pytest.approx(1.0)
    assert clock.eta(2.0, now=2.0) == pytest.approx(4.0)
    clock.hold(-10_000, now=2.0)  # the batch empties: full pace again
    assert clock.progress(3.0) == pytest.approx(2.0) and clock.eta(2.5, now=3.0) == pytest.approx(3.5)
    clock.prefill(50, now=3.0)  # half a second of prefill: decoding stands still meanwhile
    assert clock.progress(3.5) == pytest.approx(2.0) and clock.eta(2.5, now=3.0) == pytest.approx(4.0)


def long_prompt(words: int) -> str:
    return "reference " * words


async def test_replica_reports_cached_tokens_in_usage_and_stats():
    config = EmulatorConfig.gpu_replica(
        ttft=0.0, token_delay=0.0, output_tokens=30, answer_tokens=10, prefill_token_time=1e-6
    )
    with Emulator(config) as server:
        first = json.loads((await post(server.base_url, body(long_prompt(2000))))[1])["usage"]
        second = json.loads((await post(server.base_url, body(long_prompt(2000))))[1])["usage"]
        stats = server.stats()
    assert first["prompt_tokens_details"] == {"cached_tokens": 0}
    cached = second["prompt_tokens_details"]["cached_tokens"]
    assert first["prompt_tokens"] - 16 < cached < first["prompt_tokens"] and cached % 16 == 0
    assert stats["requests"] == 2 and stats["prompt_tokens"] == 2 * first["prompt_tokens"]
    assert stats["cached_tokens"] == cached and stats["completion_tokens"] == 60
    uncached = stats["prompt_tokens"] - stats["cached_tokens"]
    assert stats["prefill_s"] == pytest.approx(uncached * 1e-6, abs=1e-4)
    assert stats["busy_s"] >= stats["prefill_s"]


async def test_default_config_keeps_no_cache_and_reports_no_cached_tokens(emu):
    _, raw = await post(emu.base_url, body(long_prompt(500)))
    _, raw = await post(emu.base_url, body(long_prompt(500)))
    assert "prompt_tokens_details" not in json.loads(raw)["usage"]
    assert emu.stats()["cached_tokens"] == 0


async def decoding(server: Emulator) -> None:
    """Until the emulator serves a request (with no time to first token: decodes it)."""
    await await_until(lambda: server.stats()["active"] >= 1, 10, what="a request being decoded")


async def test_a_prefill_stalls_the_sequences_decoding_on_its_replica():
    """A short reply alone would finish long before a long prompt's first token; a prefill holds it back."""
    config = EmulatorConfig.gpu_replica(
        ttft=0.0, token_delay=0.001, output_tokens=200, answer_tokens=10, prefill_token_time=1e-4
    )  # 10k uncached tokens: 1 s of prefill
    events: list[str] = []
    with Emulator(config) as server:
        async with aiohttp.ClientSession() as session:

            async def short() -> None:
                async with session.post(server.base_url + "/chat/completions", json=body("short")) as response:
                    await response.read()
                events.append("short reply done")

            async def long() -> None:
                await decoding(server)  # the short one is decoding when this prefill starts
                payload = body(long_prompt(8000), stream=True)
                async with session.post(server.base_url + "/chat/completions", json=payload) as response:
                    await response.content.readany()
                    events.append("long prompt's first token")
                    await response.read()

            await asyncio.gather(short(), long())
    assert events == ["long prompt's first token", "short reply done"]


async def test_a_long_context_sibling_slows_decoding_until_it_leaves():
    """Short reply A (1000 tokens: 1.05 s alone) joins B, whose 30k-token context makes each step 4x as long;
    B's 100 tokens take 0.4 s, by which A has done a tenth of its work; alone again, A needs about 0.95 s more:
    1.3 s in all (not 1.05 s, as with no slowdown, nor 4 s, as if A kept B's pace after B left)."""
    config = EmulatorConfig.gpu_replica(
        ttft=0.0,
        token_delay=0.001,
        output_tokens=1000,
        answer_tokens=10,
        prefill_token_time=0.0,
        decode_context_time=0.003 / 30_570,
    )
    with Emulator(config) as server:
        async with aiohttp.ClientSession() as session:

            async def timed(payload: dict) -> float:
                started = asyncio.get_running_loop().time()
                async with session.post(server.base_url + "/chat/completions", json=payload) as response:
                    assert response.status == 200
                    await response.read()
                return asyncio.get_running_loop().time() - started

            async def a_after_b() -> float:
                await decoding(server)  # B is decoding when A arrives: A's first estimate is at B's pace
                return await timed(body("short"))

            b, a = await asyncio.gather(timed({**body(long_prompt(12_000)), "max_tokens": 100}), a_after_b())
    assert 1.2 < a < 2.5, a
    assert b < a


# ------------------------------------------------------------------- answer distributions (coordination)


def test_problems_are_easy_split_or_hard_and_replies_follow_their_kind():
    from collections import Counter

    from pacore_emulator.replies import majority_answer, plan_reply, problem_answers, problem_kind

    config = EmulatorConfig(**FAST)
    problems = [f"Problem {n}: how many?" for n in range(400)]
    kinds = Counter(problem_kind(config, p) for p in problems)
    assert abs(kinds["easy"] / 400 - 0.5) < 0.08 and abs(kinds["hard"] / 400 - 0.2) < 0.06
    for kind, shares in config.answers.kinds.items():
        problem = next(p for p in problems if problem_kind(config, p) == kind)
        answers = Counter(plan_reply(config, body(problem), n).answer for n in range(600))
        expected = problem_answers(config.seed, problem, len(shares))
        assert expected[0] == majority_answer(config, problem)
        for answer, share in zip(expected, shares, strict=True):
            assert abs(answers[answer] / 600 - share) < 0.06, (kind, answer, answers.most_common(4))


def test_replies_off_the_majority_answer_are_longer_when_asked():
    from pacore_emulator.replies import majority_answer, plan_reply

    config = EmulatorConfig(**{**FAST, "answers": {"minority_length": 1.5}})
    plans = [plan_reply(config, body("Which one?"), n) for n in range(50)]
    majority = majority_answer(config, "Which one?")
    assert {p.completion_tokens for p in plans if p.answer == majority} == {40}
    assert {p.completion_tokens for p in plans if p.answer != majority} == {60}


async def test_a_deduplicated_reference_counts_as_often_as_its_note_says(emu):
    from pacore_graph.coordination.references import DUPLICATES_NOTE
    from pacore_graph.synthesis.prompt import render_synthesis_prompt

    references = ["so \\boxed{3}." + DUPLICATES_NOTE.format(count=3), "I get \\boxed{7}.", "Also \\boxed{7}."]
    _, raw = await post(emu.base_url, body(render_synthesis_prompt("What is 1 + 2?", references)))
    assert json.loads(raw)["choices"][0]["message"]["content"].endswith("\\boxed{3}.")


async def test_a_client_closing_mid_generation_is_counted_with_the_tokens_made_so_far():
    config = EmulatorConfig(ttft=0.0, token_delay=0.01, output_tokens=1000)  # a 10-second reply
    with Emulator(config) as server:
        with pytest.raises(asyncio.TimeoutError):
            await post(server.base_url, body(), timeout=0.5)
        stats = await await_until(lambda: (found := server.stats())["cancelled"] and found, 4, what="a cancel counted")
    assert stats["cancelled"] == 1 and stats["completed"] == 0 and stats["active"] == 0
    assert 0 < stats["cancelled_tokens"] < 1000


def test_mix_and_minority_length_flags():
    args = build_parser().parse_args(["--mix", "easy=0.7,hard=0.3", "--minority-length", "1.3"])
    config = config_from_args(args)
    assert config.answers.weights == {"easy": 0.7, "hard": 0.3} and config.answers.minority_length == 1.3
    with pytest.raises(SystemExit, match="KIND=WEIGHT"):
        config_from_args(build_parser().parse_args(["--mix", "easy"]))
    with pytest.raises(ValueError, match="unknown answer kinds"):
        EmulatorConfig(answers={"weights": {"medium": 1.0}})


@pytest.mark.parametrize("reasoned", [False, True])
async def test_a_forced_tool_call_comes_alone_or_after_reasoning(reasoned):
    """``tool_call_reasoning``: a reasoning model thinks before the call a named tool_choice forces."""
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    request = body(tools=[tool], tool_choice={"type": "function", "function": {"name": "lookup"}})
    with Emulator(EmulatorConfig(model=MODEL, tool_call_reasoning=reasoned, **FAST)) as emu:
        status, raw = await post(emu.base_url, request)
        _, streamed = await post(emu.base_url, {**request, "stream": True})
    reply = json.loads(raw)
    message = reply["choices"][0]["message"]
    assert status == 200 and message["tool_calls"][0]["function"] == {"name": "lookup", "arguments": "{}"}
    call_tokens = 2  # the name, then "{}"
    if reasoned:  # the drawn 40 tokens, less the conclusion a call has instead
        assert 30 <= len(message["reasoning"].split()) < 40
        assert reply["usage"]["completion_tokens"] == len(message["reasoning"].split()) + call_tokens
    else:
        assert message.get("reasoning") is None and reply["usage"]["completion_tokens"] == call_tokens
    assert bool(assemble(sse_events(streamed))["reasoning"]) == reasoned  # a stream thinks first too
