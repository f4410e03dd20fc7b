"""``pacore serve`` under an adversarial client (issue 25): every bad request is refused in OpenAI's error shape
with nothing spent upstream, and no client holds more of the server than its limits allow.

Everything runs on loopback; every loop is bounded by a deadline; every socket and server is closed on exit.
"""

from __future__ import annotations

import json
import re
import socket
import time
from contextlib import ExitStack

import httpx
import pytest
from endpoint import endpoint, is_synthesis, scripted, wait_until_settled
from waits import wait_until

from pacore_graph.server import ServerLimits

USER = [{"role": "user", "content": "What is 17*23?"}]
TOOL = {
    "type": "function",
    "function": {"name": "bash", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
}
QUICK = ServerLimits(header_timeout=0.5, body_timeout=0.5, max_request_bytes=512 * 1024, request_timeout=1.0)


def body_of(**fields) -> dict:
    return {"model": "mock-model", "messages": USER, **fields}


def raw(text: str) -> bytes:
    """A body the JSON encoder would refuse to write (NaN, lone surrogates, deep nesting) as bytes."""
    return text.encode()


def assert_openai_error(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "\n" not in error["message"] and len(error["message"]) < 400
    assert not re.search(r"https?://", error["message"]), error["message"]  # no upstream URL reaches a client
    if param is not None:
        assert error["param"] == param, error
    return error


DEEP = "[" * 100_000 + "]" * 100_000
BAD_BODIES = [
    # tools and tool_choice
    (body_of(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "rm"}}), "tool_choice", "not among"),
    (body_of(tool_choice="required"), "tool_choice", "needs tools"),
    (body_of(tool_choice={"type": "function", "function": {"name": "bash"}}), "tool_choice", "not among"),
    (
        body_of(tools=[{"type": "function", "function": {"name": "bash", "parameters": "a string"}}]),
        "tools[0].function.parameters",
        "JSON schema object",
    ),
    (
        body_of(tools=[{"type": "function", "function": {"name": "bash", "parameters": {"type": "string"}}}]),
        "tools[0].function.parameters",
        "object",
    ),
    (
        body_of(
            tools=[
                {"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": 5}}}
            ]
        ),
        "tools[0].function.parameters",
        "not a valid JSON schema",
    ),
    (body_of(tools=[TOOL, TOOL]), "tools[1].function.name", "second tool"),
    (body_of(tools="bash"), "tools", "valid list"),
    # content present and representable
    (body_of(messages=[{"role": "user", "content": ""}]), "messages[0].content", "no text"),
    (body_of(messages=[{"role": "user", "content": None}]), "messages[0].content", "needs content"),
    (body_of(messages=[{"role": "user"}]), "messages[0].content", "needs content"),
    (
        body_of(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,x"}}]}]),
        "messages[0].content",
        "no text",
    ),
    (body_of(messages=[{"role": "user", "content": 5}]), "messages[0].content", "string or a list"),
    (
        body_of(messages=[{"role": "user", "content": [{"type": "text", "text": 5}]}]),
        "messages[0].content[0].text",
        "must be a string",
    ),
    (body_of(messages=["hello"]), "messages[0]", "message object"),
    (
        body_of(messages=[{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, *USER]),
        "messages[0].content[0]",
        "text only",
    ),
    (body_of(messages={"role": "user", "content": "hi"}), "messages", "valid list"),
    # assistant tool_calls of the wrong type (a plain-text 500 before)
    (
        body_of(messages=[*USER, {"role": "assistant", "tool_calls": "x"}, *USER]),
        "messages[1].tool_calls",
        "list of tool calls",
    ),
    (
        body_of(messages=[*USER, {"role": "assistant", "tool_calls": [{"function": "x"}]}, *USER]),
        "messages[1].tool_calls[0]",
        "function",
    ),
    (
        body_of(
            messages=[
                *USER,
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "1", "type": "function", "function": {"name": "bash", "arguments": {"cmd": "ls"}}}
                    ],
                },
                *USER,
            ]
        ),
        "messages[1].tool_calls[0].function.arguments",
        "must be a string",
    ),
    (
        body_of(messages=[{"role": "user", "content": "hi", "tool_calls": []}]),
        "messages[0].tool_calls",
        "only assistant",
    ),
    # strict types: nothing coerced
    (body_of(pacore={"rounds": ["2"]}), "pacore.rounds[0]", "valid integer"),
    (body_of(pacore={"rounds": [True]}), "pacore.rounds[0]", "valid integer"),
    (body_of(pacore={"rounds": [2.0]}), "pacore.rounds[0]", "valid integer"),
    (body_of(pacore={"rounds": "2"}), "pacore.rounds", "valid list"),
    (body_of(temperature="0.5"), "temperature", "valid number"),
    (body_of(stream="true"), "stream", "valid boolean"),
    (body_of(max_tokens=True), "max_tokens", "valid integer"),
    (body_of(max_tokens=2**70), None, "64 bits"),
    (body_of(model=7), "model", "valid string"),
    # fields sent upstream as they are, typed before K trajectories each send them
    (body_of(stop=5), "stop", "valid string"),
    (body_of(presence_penalty=3), "presence_penalty", "less than or equal to 2"),
    (body_of(tool_choice="any"), "tool_choice", "'none', 'auto' or 'required'"),
    (body_of(model="pacore-rounds-" + "9" * 5000 + "/mock-model"), "model", "is not a schedule"),
    (body_of(model="pacore-rounds-" + "2x" * 5000 + "2/mock-model"), "model", "is not a schedule"),
    # schedules beyond the limits
    (body_of(pacore={"rounds": [2] * 9}), "pacore.rounds", "at most 8"),
]
RAW_BODIES = [
    (raw('{"model": "mock-model", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}'), "NaN"),
    (
        raw('{"model": "mock-model", "messages": [{"role": "user", "content": "x"}], "presence_penalty": Infinity}'),
        "Infinity",
    ),
    (
        raw('{"model": "mock-model", "messages": [{"role": "user", "content": "x"}], "presence_penalty": 1e999}'),
        "too large",
    ),
    (raw('{"model": "mock-model", "messages": [{"role": "user", "content": "x \\ud800 y"}]}'), "lone surrogate"),
    (
        raw('{"model": "mock-model", "messages": [{"role": "user", "content": "x"}], "extra": ' + DEEP + "}"),
        "nested too deeply",
    ),
    (
        raw(
            '{"model": "mock-model", "messages": [{"role": "user", "content": "x"}], "extra": '
            + "[" * 150
            + "]" * 150
            + "}"
        ),
        "nested too deeply",
    ),
    (b'{"model": "mock-model", "messages": [{"role": "user", "content": "\xff"}]}', "not valid JSON"),
    (b"", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
]


@pytest.fixture(scope="module")
def served():
    with endpoint(rounds=[2], limits=QUICK) as (upstream, server):
        yield upstream, server


def post(server, content: bytes | dict, **headers: str) -> httpx.Response:
    data = content if isinstance(content, bytes) else json.dumps(content).encode()
    return httpx.post(
        f"{server.base_url}/chat/completions",
        content=data,
        timeout=30,
        headers={"Content-Type": "application/json", **headers},
    )


@pytest.mark.parametrize(("body", "param", "words"), BAD_BODIES)
def test_each_bad_request_is_a_400_in_openai_shape_with_nothing_sent_upstream(served, body, param, words):
    upstream, server = served
    before = len(upstream.requests)
    error = assert_openai_error(post(server, body), 400, param)
    assert words in error["message"] and error["type"] == "invalid_request_error"
    assert len(upstream.requests) == before


@pytest.mark.parametrize(("content", "words"), RAW_BODIES, ids=lambda value: str(value)[:40])
def test_bodies_no_other_json_reader_accepts_are_400s(served, content, words):
    upstream, server = served
    before = len(upstream.requests)
    error = assert_openai_error(post(server, content), 400)
    assert words in error["message"]
    assert len(upstream.requests) == before


def test_a_good_request_still_works_between_bad_ones(served):
    upstream, server = served
    before = len(upstream.requests)
    response = post(server, body_of(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "bash"}}))
    assert response.status_code == 200, response.text
    assert len(upstream.requests) == before + 3 and all(
        r["tool_choice"]["function"]["name"] == "bash" for r in upstream.requests[before:]
    )


def test_a_plain_call_may_carry_an_image_only_message(served):
    """With no rounds there is no synthesis prompt to quote the problem in: image-only content goes through."""
    upstream, server = served
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}]
    response = post(server, body_of(model="pacore-rounds-0/mock-model", messages=image))
    assert response.status_code == 200 and upstream.requests[-1]["messages"][0]["content"][0]["type"] == "image_url"


# ------------------------------------------------------------------------------------------------ sizes


def raw_socket(server, timeout: float = 10.0) -> socket.socket:
    connection = socket.create_connection((server.host, server.port), timeout=timeout)
    return connection


def read_reply(connection: socket.socket) -> tuple[int, dict | None, bytes]:
    """(status, JSON body or None, raw) of the one reply on the connection; reads until the server closes."""
    received = bytearray()

    def closed() -> bool:
        try:
            chunk = connection.recv(65536)
        except (ConnectionResetError, TimeoutError):  # reset, or nothing more within the socket's timeout
            return True
        received.extend(chunk)
        return not chunk

    wait_until(closed, 20, what="the server closed the connection", every=0)
    data = bytes(received)
    if not data:
        return 0, None, data
    head, _, payload = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(payload) if payload.startswith(b"{") else None, data


def test_a_body_over_the_limit_is_a_413_as_soon_as_its_length_is_declared(served):
    upstream, server = served
    with raw_socket(server) as connection:  # headers only: the 40 MB it announces never need to come
        connection.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 40000000\r\n\r\n"
        )
        status, body, _ = read_reply(connection)  # the server answers and closes without the body
    assert status == 413 and body["error"]["code"] == "request_too_large"
    assert str(QUICK.max_request_bytes) in body["error"]["message"]


def test_a_chunked_body_is_refused_once_past_the_limit_never_buffered_whole(served):
    upstream, server = served
    before = len(upstream.requests)
    sent = 0
    with raw_socket(server) as connection:
        connection.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"x" * 16384
        try:
            for _ in range(256):  # up to 4 MiB offered; the limit is 512 KiB
                connection.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed the connection after its 413
        status, body, _ = read_reply(connection)
    assert status == 413 and body["error"]["code"] == "request_too_large"
    assert len(upstream.requests) == before


def test_a_body_that_never_finishes_is_a_408(served):
    _, server = served
    with raw_socket(server) as connection:
        connection.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"model":'
        )
        started = time.monotonic()
        status, body, _ = read_reply(connection)
    assert status == 408 and body["error"]["code"] == "body_timeout"
    assert time.monotonic() - started < 5


# ------------------------------------------------------------------------------------------ connections


def test_idle_and_trickling_connections_are_closed_while_others_are_served(served):
    upstream, server = served
    with ExitStack() as stack:
        idle = [stack.enter_context(raw_socket(server)) for _ in range(40)]
        trickling = stack.enter_context(raw_socket(server))
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        answered = post(server, body_of())  # served while the idle ones are open
        sent = 0

        def closed_while_trickling() -> bool:  # a byte every 50 ms: each would restart a keep-alive timer
            nonlocal sent
            try:
                trickling.sendall(head[sent % len(head) : sent % len(head) + 1])
            except (BrokenPipeError, ConnectionResetError):
                return True
            sent += 1
            return False

        wait_until(closed_while_trickling, 5, what="the server closed the trickling connection", every=0.05)
        status, body, _ = read_reply(trickling)
        closed = [read_reply(connection)[2] == b"" for connection in idle]
    assert answered.status_code == 200
    assert status == 408 and "did not arrive within 0.5 s" in body["error"]["message"]
    assert sent < 40  # closed after about 0.5 s, not after 5
    assert all(closed)  # every idle socket saw the server close it (read_reply returns b"" at EOF)


def test_connections_past_the_limit_get_a_503_in_openai_shape_and_the_server_recovers():
    limits = ServerLimits(max_connections=4, header_timeout=5)
    with endpoint(limits=limits) as (upstream, server), ExitStack() as stack:
        held = [stack.enter_context(raw_socket(server)) for _ in range(4)]
        wait_until(lambda: server.connections() == 4, what=lambda: f"the server accepted {server.connections()} of 4")
        with raw_socket(server) as extra:
            status, body, _ = read_reply(extra)
        for connection in held:
            connection.close()
        wait_until(
            lambda: server.connections() == 0,  # it saw them close: their places are free
            what=lambda: f"the server still holds {server.connections()} closed connections",
        )
        recovered = post(server, body_of())
    assert status == 503 and body["error"]["code"] == "too_many_connections"
    assert recovered.status_code == 200


def test_a_malformed_or_oversized_request_head_is_answered_in_openai_shape(served):
    _, server = served
    with raw_socket(server) as connection:
        connection.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        status, body, _ = read_reply(connection)
    assert status == 400 and "malformed" in body["error"]["message"]
    with raw_socket(server) as connection:
        try:
            connection.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000)
        except (BrokenPipeError, ConnectionResetError):
            pass
        status, body, _ = read_reply(connection)
    assert status == 431 and body["error"]["type"] == "invalid_request_error"


# -------------------------------------------------------------------------------------------- deadline


def hanging(body: dict, attempt: int):
    return scripted(body, attempt) if is_synthesis(body) else {"delay": 60.0, "content": "late"}


@pytest.mark.parametrize("stream", [False, True])
def test_the_request_deadline_closes_every_upstream_request_and_answers_504(stream):
    with endpoint(hanging, rounds=[3], limits=ServerLimits(request_timeout=0.5)) as (upstream, server):
        idle = server.tasks()
        started = time.monotonic()
        response = post(server, body_of(stream=stream))
        waited = time.monotonic() - started
        wait_until(lambda: upstream.disconnected == 3, what=lambda: f"upstream saw {upstream.disconnected} of 3 close")
        wait_until_settled(upstream, server, idle)  # the run is over: the request log below is final
    if stream:
        events = [line for line in response.text.splitlines() if line.startswith('data: {"error"')]
        error = json.loads(events[-1][len("data: ") :])["error"]
    else:
        error = assert_openai_error(response, 504)
    assert error["code"] == "request_timeout" and "0.5 s" in error["message"]
    assert waited < 10 and upstream.disconnected == 3 and len(upstream.requests) == 3


# ------------------------------------------------------------------------------------- error messages


def test_upstream_failures_reach_the_client_short_without_urls_or_bodies():
    secret_body = "internal trace at http://10.0.0.7:8000/v1 key=sk-upstream"

    def broken(body: dict, attempt: int):
        return (503, secret_body)

    with endpoint(broken, rounds=[4], retry={"max_attempts": 1}) as (_, server):
        response = post(server, body_of())
    error = assert_openai_error(response, 502)
    assert error["code"] == "round_failed" and "HTTP 503 x4" in error["message"]
    assert "sk-upstream" not in error["message"] and "127.0.0.1" not in error["message"]


def test_an_upstream_refusal_passes_on_its_own_message_only():
    def too_long(body: dict, attempt: int):
        return (400, "This model's maximum context length is 8192 tokens (see http://upstream.local/docs)")

    with endpoint(too_long, retry={"max_attempts": 1}) as (_, server):
        response = post(server, body_of())
    error = assert_openai_error(response, 400)
    assert error["code"] == "upstream_rejected" and "maximum context length is 8192" in error["message"]
    assert "<url>" in error["message"]


def test_an_unexpected_failure_is_a_500_in_openai_shape(served, monkeypatch):
    import pacore_graph.server.app as app_module

    def broken(*args, **kwargs):
        raise RuntimeError("a bug with a secret http://user:pw@host/")

    _, server = served
    monkeypatch.setattr(app_module, "plan_call", broken)
    error = assert_openai_error(post(server, body_of()), 500)
    assert error["type"] == "server_error" and "secret" not in error["message"]


# ------------------------------------------------------------------------------------------------ memory


def test_what_requests_leave_behind_is_bounded_by_bytes_not_only_by_count():
    """The chat model keeps the OpenAI form of recent message lists (K trajectories send the same one), and the
    endpoint a compiled graph per request shape: both were bounded by count only, so forty-megabyte requests
    left hundreds of megabytes behind."""
    from langchain_core.messages import HumanMessage

    from pacore_graph import PaCoReConfig, chat_model
    from pacore_graph.models import openai_compatible
    from pacore_graph.server import upstream as upstream_module
    from pacore_graph.server.request import plan_call

    chat = chat_model(base_url="http://127.0.0.1:9/v1", model="m")
    big = "x" * (4 * 2**20)
    for number in range(40):  # 160 M characters offered, far fewer kept
        chat._openai_messages([HumanMessage(f"{number} {big}")])
    kept = sum(entry[-1] for entry in chat._converted.values())
    assert kept == chat._converted_chars <= openai_compatible.CONVERTED_CHARS
    assert 0 < len(chat._converted) <= openai_compatible.CONVERTED_CHARS // len(big)

    shapes = upstream_module.Upstream(chat, 4)
    description = "d" * (2**20)
    for number in range(20):  # 20 distinct request shapes of about 1 MiB each (their tools)
        tool = {"type": "function", "function": {"name": f"t{number}", "description": description}}
        shapes.runner(plan_call({"model": "m", "messages": USER, "tools": [tool]}, PaCoReConfig(), "m"))
    assert sum(map(len, shapes._runners)) <= upstream_module.CACHED_SHAPE_BYTES
    assert len(shapes._runners) < 20
