"""A panel of two real servers at once: this folder's vLLM (CPU build) and the embedded llama.cpp server, each
counted on its own books (vLLM's ``/metrics``, the llama.cpp server's access log): exactly sum(K) + 1 requests in
all, each server getting the slots the panel gave it, each model's window its own server's."""

from __future__ import annotations

from collections import Counter

from real_vllm import MODEL, REPLY_CAP, WINDOW
from waits import wait_until

from pacore_graph import PaCoReConfig, chat_model, solve
from pacore_graph.explorers.panel import member_config
from pacore_graph.models.embedded import DEFAULT_CONTEXT

QUESTION = "Explain in two sentences why the sky is blue, then give a one-word summary."
CHAT_REQUEST = '"POST /v1/chat/completions HTTP/1.1" 200'


def embedded_requests(server) -> int:
    """Chat completions the llama.cpp server answered, read off its own access log."""
    return server.log_tail(limit=2**30).count(CHAT_REQUEST)


def test_a_panel_of_vllm_and_the_embedded_server_counted_on_each_servers_books(vllm, embedded_server):
    vllm.wait_idle()
    rounds = [4, 2]
    config = PaCoReConfig(
        rounds=rounds,
        max_tokens=REPLY_CAP,
        panel={"models": {"vllm": 1, "local": 1}, "synthesizer": "vllm"},
    )
    models = {
        "vllm": chat_model(vllm.base_url, MODEL),
        "local": chat_model(embedded_server.base_url, embedded_server.model),
    }
    # each model's window is its own server's (vLLM's --max-model-len, the embedded server's n_ctx)
    assert member_config(config, config.panel, "vllm", models["vllm"]).context_window == WINDOW
    assert member_config(config, config.panel, "local", models["local"]).context_window == DEFAULT_CONTEXT
    vllm_before, local_before = vllm.finished(), embedded_requests(embedded_server)
    result = solve(models, QUESTION, config)
    wait_until(lambda: vllm.finished() - vllm_before >= 1, what="vLLM's counters caught up")
    by_model = Counter(t.model for r in result.rounds for t in r.trajectories)
    sent_vllm = vllm.finished() - vllm_before
    sent_local = embedded_requests(embedded_server) - local_before
    assert sent_vllm + sent_local == sum(rounds) + 1
    assert (sent_vllm, sent_local) == (by_model["vllm"], by_model["local"])
    planned = [config.panel.slot_map(i, k, i == len(rounds), config.seed) for i, k in enumerate([*rounds, 1])]
    assert [[t.model for t in r.trajectories] for r in result.rounds] == planned
    assert result.rounds[-1].trajectories[0].model == "vllm" and result.answer
    # each record names its server's model too (vLLM's served name, the embedded alias)
    served = {t.model: t.model_name for r in result.rounds for t in r.trajectories}
    assert served == {"vllm": MODEL, "local": embedded_server.model}
    models_account = result.models
    assert models_account["vllm"]["requests"] == sent_vllm and models_account["local"]["requests"] == sent_local
