"""The endpoint's HTTP contract: API key, OpenAI-shaped errors before anything is spent, schedules per call,
what is sent upstream, /v1/models, progress as SSE comments, upstream failures."""

from __future__ import annotations

import json

import httpx
import pytest
from endpoint import FINAL_ANSWER, endpoint, is_synthesis, scripted
from openai import APIError, OpenAI

from pacore_emulator import Emulator, EmulatorConfig, FaultRates
from pacore_graph import PaCoReConfig, chat_model
from pacore_graph.server import BackgroundServer, create_app
from pacore_graph.server.schedule import split_model_name

USER = [{"role": "user", "content": "What is 17*23?"}]


def post(server, body: dict, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{server.base_url}/chat/completions", json=body, headers=headers, timeout=30)


def test_api_key_required_when_configured():
    with endpoint(api_key="s3cret") as (upstream, server):
        missing = post(server, {"model": "mock-model", "messages": USER})
        wrong = post(server, {"model": "mock-model", "messages": USER}, key="guess")
        models = httpx.get(f"{server.base_url}/models")
        assert upstream.requests == []
        good = post(server, {"model": "mock-model", "messages": USER}, key="s3cret")
    for response in (missing, wrong, models):
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "invalid_api_key"
    assert good.status_code == 200 and good.json()["choices"][0]["message"]["content"] == FINAL_ANSWER


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"model": "mock-model", "messages": []}, "messages", "at least one"),
        ({"model": "mock-model", "messages": [{"role": "system", "content": "x"}]}, "messages", "user"),
        ({"model": "mock-model", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "robot"),
        (
            {"model": "mock-model", "messages": [{"role": "tool", "content": "x"}, *USER]},
            "messages[0].tool_call_id",
            "tool_call_id",
        ),
        ({"model": "mock-model", "messages": USER, "n": 3}, "n", "n must be 1"),
        ({"model": "mock-model", "messages": USER, "temperature": 9}, "temperature", "less than or equal"),
        ({"model": "mock-model", "messages": USER, "logprobs": True}, "logprobs", "logprobs"),
        ({"model": "mock-model", "messages": USER, "tools": [{"type": "function"}]}, "tools[0]", "tools[0]"),
        ({"model": "pacore-rounds-4y2/mock-model", "messages": USER}, "model", "pacore-rounds-32x4"),
        ({"model": "mock-model", "messages": USER, "pacore": {"rounds": [4, 0]}}, "pacore.rounds", "round 2"),
        ({"model": "mock-model", "messages": USER, "pacore": {"rounds": [9999]}}, "pacore.rounds", "1 to 1024"),
        ({"model": "mock-model", "messages": USER, "pacore": {"preset": "huge"}}, "pacore.preset", "low, medium"),
        ({"model": "mock-model", "messages": USER, "pacore": {"k": 4}}, "pacore.k", "Extra inputs"),
    ],
)
def test_bad_requests_get_one_line_400_before_anything_is_spent(body, param, words):
    with endpoint() as (upstream, server):
        response = post(server, body)
        assert upstream.requests == []
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert words in error["message"] and "\n" not in error["message"]


def test_invalid_json_and_unknown_model_and_route():
    with endpoint() as (upstream, server):
        garbage = httpx.post(f"{server.base_url}/chat/completions", content=b"{nope", timeout=30)
        unknown = post(server, {"model": "pacore-high/other-model", "messages": USER})
        route = httpx.get(f"{server.base_url}/completions", timeout=30)
        assert upstream.requests == []
    assert garbage.status_code == 400 and "not valid JSON" in garbage.json()["error"]["message"]
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    assert "mock-model" in unknown.json()["error"]["message"]
    assert route.status_code == 404 and "error" in route.json()


def test_models_lists_upstream_models_and_schedule_aliases():
    with endpoint() as (_, server):
        listed = httpx.get(f"{server.base_url}/models", timeout=30).json()
    assert [m["id"] for m in listed["data"]] == [
        "mock-model",
        "pacore-low/mock-model",
        "pacore-medium/mock-model",
        "pacore-high/mock-model",
    ]


@pytest.mark.parametrize(
    ("model", "field", "sent"),
    [
        ("mock-model", None, 2 + 1),  # the server's default [2]
        ("pacore-low/mock-model", None, 4 + 1),
        ("pacore-rounds-2x3/mock-model", None, 2 + 3 + 1),
        ("pacore-rounds-0/mock-model", None, 1),  # one plain call
        ("pacore-high", {"rounds": [1]}, 1 + 1),  # the body field wins; no /NAME: the default model
        ("mock-model", {"preset": "low"}, 4 + 1),
    ],
)
def test_schedule_per_call(model, field, sent):
    body = {"model": model, "messages": USER, **({"pacore": field} if field else {})}
    with endpoint() as (upstream, server):
        response = post(server, body)
        requests = list(upstream.requests)
    assert response.status_code == 200, response.text
    assert len(requests) == sent and all(r["model"] == "mock-model" for r in requests)
    assert [r["k"] for r in response.json()["usage"]["pacore"]["rounds"]][-1] == 1


def test_split_model_name_keeps_upstream_names_that_only_look_like_aliases():
    assert split_model_name("pacore-high/stepfun-ai/PaCoRe-8B") == ("stepfun-ai/PaCoRe-8B", [32, 4])
    assert split_model_name("stepfun-ai/PaCoRe-8B") == ("stepfun-ai/PaCoRe-8B", None)
    assert split_model_name("pacore-8b/v2") == ("pacore-8b/v2", None)
    assert split_model_name("pacore/m") == ("m", None)


def test_request_fields_reach_every_trajectory_seed_and_account_fields_do_not():
    body = {
        "model": "mock-model",
        "messages": USER,
        "temperature": 0.6,
        "top_p": 0.9,
        "max_completion_tokens": 77,
        "stop": ["\n\n"],
        "chat_template_kwargs": {"enable_thinking": True},
        "seed": 7,
        "user": "alice",
        "metadata": {"k": "v"},
    }
    with endpoint() as (upstream, server):
        assert post(server, body).status_code == 200
        requests = list(upstream.requests)
    assert len(requests) == 3
    for sent in requests:
        assert (sent["temperature"], sent["top_p"], sent["max_tokens"], sent["stop"]) == (0.6, 0.9, 77, ["\n\n"])
        assert sent["chat_template_kwargs"] == {"enable_thinking": True}
        assert not {"seed", "user", "metadata", "pacore"} & set(sent)


def test_defaults_are_the_papers_sampling():
    with endpoint() as (upstream, server):
        assert post(server, {"model": "mock-model", "messages": USER}).status_code == 200
        sent = upstream.requests[0]
    assert (sent["temperature"], sent["top_p"]) == (1.0, 1.0) and "max_tokens" not in sent


def test_stream_shows_progress_as_comments_that_strict_clients_skip():
    with endpoint(rounds=[3]) as (_, server):
        with httpx.stream(
            "POST",
            f"{server.base_url}/chat/completions",
            timeout=30,
            json={"model": "mock-model", "messages": USER, "stream": True},
        ) as response:
            lines = [line for line in response.iter_lines() if line]
    comments = [json.loads(line[len(": pacore ") :]) for line in lines if line.startswith(": pacore ")]
    events = [(c["event"], c["round"]) for c in comments]
    assert events[0] == ("round_started", 0) and events.count(("trajectory_finished", 0)) == 3
    assert ("round_finished", 0) in events and ("round_started", 1) in events
    assert events.index(("round_finished", 0)) < events.index(("round_started", 1))
    data = [line[len("data: ") :] for line in lines if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(item) for item in data[:-1]]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "usage" not in chunks[-1]  # usage only when stream_options.include_usage asks for it


def test_upstream_rejecting_every_trajectory_passes_its_4xx_on():
    with endpoint(lambda body, attempt: 400, retry={"max_attempts": 1}) as (upstream, server):
        response = post(server, {"model": "mock-model", "messages": USER})
        assert len(upstream.requests) == 2  # round 1's two trajectories, never retried, no synthesis
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "upstream_rejected" and "HTTP 400" in response.json()["error"]["message"]


def test_upstream_failing_round_is_a_502_and_a_stream_error_event():
    def flaky(body: dict, attempt: int):
        return 503 if not is_synthesis(body) else scripted(body, attempt)

    settings = {"retry": {"max_attempts": 2, "initial_delay": 0}}
    with endpoint(flaky, **settings) as (upstream, server):
        plain = post(server, {"model": "mock-model", "messages": USER})
        with httpx.stream(
            "POST",
            f"{server.base_url}/chat/completions",
            timeout=30,
            json={"model": "mock-model", "messages": USER, "stream": True},
        ) as response:
            lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert plain.status_code == 502 and plain.json()["error"]["code"] == "round_failed"
    assert "HTTP 503" in plain.json()["error"]["message"]
    error = json.loads(lines[-1][len("data: ") :])["error"]
    assert error["code"] == "round_failed"


def test_final_trajectory_retried_after_streaming_part_of_its_text_ends_the_stream_with_an_error():
    """Text already sent cannot be taken back: a retried final trajectory ends the stream with an error event."""
    faults = FaultRates(cut_stream=1.0)  # every streamed reply stops midway (and so does the retry)
    with Emulator(EmulatorConfig(ttft=0.01, token_delay=0.001, output_tokens=200, faults=faults)) as emu:
        chat = chat_model(base_url=emu.base_url, model=emu.config.model)
        app = create_app(chat, PaCoReConfig(rounds=[], retry={"max_attempts": 2, "initial_delay": 0}))
        with BackgroundServer(app) as server:
            client = OpenAI(base_url=server.base_url, api_key="unused")
            received = []
            with pytest.raises(APIError, match="partial text above is void"):
                for chunk in client.chat.completions.create(model=emu.config.model, messages=USER, stream=True):
                    received.append(chunk)
    deltas = [c.choices[0].delta for c in received if c.choices]
    assert any(d.content or d.model_extra.get("reasoning_content") for d in deltas)  # part of it had gone out


def test_a_selector_chosen_answer_comes_with_its_own_trajectorys_reasoning():
    """final_selector="vote": the answer is the majority's first conclusion in template order, which need not be the
    first reference; its reasoning must be the chosen trajectory's (issue 28: it was the first reference's).
    Template order sorts by length then shuffles with seed 42, which puts the middle length first: that one is
    the minority here, so a reply taking the first reference's reasoning pairs it with another's answer."""
    replies = {1: "short \\boxed{7}", 2: "a middle one \\boxed{5}", 3: "the longest conclusion of all \\boxed{7}"}

    def voters(body: dict, attempt: int) -> dict:
        content = replies[attempt]
        return {"content": content, "reasoning_content": f"why: {content}"}

    with endpoint(voters, rounds=[3], final_selector="vote", answer_extractor="boxed") as (upstream, server):
        response = post(server, {"model": "mock-model", "messages": USER})
        assert len(upstream.requests) == 3  # a vote makes no final call
    message = response.json()["choices"][0]["message"]
    assert message["content"] == "short \\boxed{7}"
    assert message["reasoning_content"] == f"why: {message['content']}"
