"""A client that goes away cancels its run (the upstream sees its requests close), and one limiter bounds
the trajectories in flight upstream over every request at once."""

from __future__ import annotations

import concurrent.futures

import pytest
from endpoint import endpoint, is_synthesis, scripted, send_request, wait_until_settled
from openai import OpenAI
from waits import wait_until

from pacore_emulator import Emulator, EmulatorConfig
from pacore_graph import PaCoReConfig, chat_model
from pacore_graph.server import BackgroundServer, create_app

USER = [{"role": "user", "content": "What is 17*23?"}]
HELD_SECONDS = 60.0  # how long the upstream holds first-round requests: far longer than any test waits


def held_first_round(body: dict, attempt: int) -> dict:
    return scripted(body, attempt) if is_synthesis(body) else {"delay": HELD_SECONDS, "content": "late"}


@pytest.mark.parametrize("stream", [False, True])
def test_client_disconnect_closes_every_upstream_request(stream):
    with endpoint(held_first_round, rounds=[3]) as (upstream, server):
        idle = server.tasks()
        connection = send_request(server, {"model": "mock-model", "messages": USER, "stream": stream})
        wait_until(
            lambda: len(upstream.requests) == 3,  # round 1 is in flight upstream
            what=lambda: f"{len(upstream.requests)} of 3 requests reached the upstream",
        )
        if stream:
            assert b"data: " in connection.recv(65536)  # the stream had begun
        connection.close()  # the client goes away mid-reply
        wait_until(lambda: upstream.disconnected == 3, what=lambda: f"upstream saw {upstream.disconnected} of 3 close")
        wait_until_settled(upstream, server, idle)  # the run is over: nothing can be sent any more
        assert len(upstream.requests) == 3  # and no synthesis round was started for nobody


def test_concurrency_is_shared_by_all_requests():
    emulator = EmulatorConfig(ttft=0.3, token_delay=0.001, output_tokens=20)
    with Emulator(emulator) as emu:
        chat = chat_model(base_url=emu.base_url, model=emu.config.model)
        app = create_app(chat, PaCoReConfig(rounds=[4], max_concurrency=3))
        with BackgroundServer(app) as server:
            client = OpenAI(base_url=server.base_url, api_key="unused")

            def ask(number: int) -> int:
                messages = [{"role": "user", "content": f"Problem {number}: what is 17*23?"}]
                return client.chat.completions.create(model=emu.config.model, messages=messages).usage.completion_tokens

            with concurrent.futures.ThreadPoolExecutor(3) as pool:
                tokens = list(pool.map(ask, range(3)))
        stats = emu.stats()
    assert stats["requests"] == 3 * (4 + 1) and stats["peak_active"] == 3  # 15 wanted to run, 3 ever did at once
    assert sum(tokens) == stats["tokens_out"]
