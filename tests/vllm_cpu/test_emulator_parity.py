"""The serving emulator answers like real vLLM: every request of tests/vllm_cpu/corpus.py goes to both, and the shapes
of their answers (status, error body, keys and types, finish reasons, stream chunks; not the text) must match
except for the deliberate differences the corpus names. Benchmarks and most tests trust the emulator in vLLM's
place; this keeps that trust checked.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from corpus import CORPUS, Case, deliberate, differences, shape, unexplained
from real_vllm import MODEL, WINDOW

from pacore_emulator import Emulator, EmulatorConfig

# A non-reasoning model (SmolLM2 is served without a reasoning parser) that stops on its own after 20 tokens,
# behind vLLM 0.32's handling of max_tokens past the window
EMULATED = EmulatorConfig(
    model=MODEL,
    max_model_len=WINDOW,
    clamp_max_tokens=True,
    reasoning="none",
    output_tokens=20,
    answer_tokens=8,
    ttft=0.01,
    token_delay=0.001,
)


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(EMULATED) as emu:
        yield emu


def send(base_url: str, case: Case) -> tuple[int, str, bytes]:
    """(status, content type, body) of one request, as sent by any HTTP client."""
    url = urlsplit(base_url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=300)
    try:
        payload = case.payload()
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        connection.request(case.method, url.path + case.path, body=payload, headers=headers)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        connection.close()


def report(rows: list[tuple[str, str, str, str]]) -> str:
    width = max(len(row[1]) for row in rows)
    lines = [f"{'case':<36} {'path':<{width}}  vLLM  |  emulator"]
    lines += [f"{case:<36} {path:<{width}}  {theirs}  |  {ours}" for case, path, theirs, ours in rows]
    return "\n".join(lines)


def test_the_emulator_answers_every_request_in_the_shape_vllm_does(vllm, emulator):
    vllm.wait_idle()
    allowed = deliberate()
    rows: list[tuple[str, str, str, str]] = []
    started = time.monotonic()
    for case in CORPUS:
        theirs = shape(*send(vllm.base_url, case))
        ours = shape(*send(emulator.base_url, case))
        rows += [(case.name, *row) for row in unexplained(case.name, differences(case.name, theirs, ours), allowed)]
    assert not rows, (
        f"the emulator differs from vLLM (fix it, or name the difference in corpus.deliberate()):\n{report(rows)}"
    )
    stale = [entry.reason for entry in allowed if not entry.seen]
    assert not stale, f"deliberate differences no longer seen (drop them here and in the docs): {stale}"
    assert time.monotonic() - started < 240, "the corpus should stay quick on vLLM's CPU build"


def test_an_unexplained_difference_fails_with_a_readable_row():
    """The comparison can fail: a status and a finish reason that differ are both reported."""
    theirs = shape(
        400, "application/json", b'{"error": {"message": "m", "type": "BadRequestError", "param": null, "code": 400}}'
    )
    ours = shape(200, "application/json", b'{"id": "chatcmpl-1", "choices": [{"finish_reason": "stop"}]}')
    found = unexplained("plain", differences("plain", theirs, ours), deliberate())
    paths = {path for path, _, _ in found}
    assert {"status", "body.error.type", "body.choices[].finish_reason"} <= paths
    assert "400" in report([("plain", *row) for row in found])
    stream = (
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":'
        b'"assistant","content":""},"finish_reason":null}]}\n\ndata: {"id":"chatcmpl-1","choices":[],'
        b'"usage":{"prompt_tokens":1}}\n\ndata: [DONE]\n\n'
    )
    chunks = shape(200, "text/event-stream", stream)
    assert chunks["order"] == "role_chunk usage_chunk" and chunks["stream.done"] == "True"
    assert chunks["role_chunk.choices[].delta.role"] == "str:assistant"
