"""The embedded model's server process: llama-cpp-python's OpenAI-compatible app, with four changes.

    python -m pacore_graph.models.llama_server --model FILE.gguf --alias NAME --port N --n-ctx N --seed N

Why not ``python -m llama_cpp.server`` as it is:

- It does not say its context size. llama.cpp's own server (``llama-server``) reports it at ``GET /props``
  (``default_generation_settings.n_ctx``); this one answers there the same way, so a client reads the
  context of either server from one place (:func:`pacore_graph.models.preflight.served_context`).
- It generates a non-streamed reply to its end after the client has gone (a cancelled PaCoRe run, an early
  stop, an abandoned ``pacore serve`` request), and a 135M model asked for thousands of tokens holds the one
  model for minutes while every other request waits. Here such a reply ends at its next token: a logits
  processor makes end-of-text the only choice once the connection is closed, so the reply ends normally
  (with its usage) and nobody reads it. Streamed replies already stop there on their own.
- By default it ends a streamed reply early whenever another request is waiting (``interrupt_requests``),
  which would cut PaCoRe's parallel trajectories short once they stream: here it is off, requests queue.
- A streamed reply carries no usage, even when ``stream_options.include_usage`` asks (vLLM then sends a last
  chunk with it): here it does, counted by a logits processor (:class:`CountTokens`).

The sampling seed is the caller's (:func:`pacore_graph.models.embedded.sampling_seed`: random unless given).

This module runs in the server's own process only (it is never imported by the library). No ``from __future__
import annotations`` here: FastAPI reads the route's annotations, whose types are imported inside ``build_app``.
"""

import argparse
import asyncio
import contextlib
import threading
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from fastapi import FastAPI

LLAMA_CPP_EXCLUDED = {"n", "logit_bias_type", "user", "min_tokens"}  # what llama-cpp-python's route leaves out


class EndWhenGone:
    """A llama.cpp logits processor: once ``gone`` is set, only end-of-text can be sampled."""

    def __init__(self, gone: threading.Event, end_token: int):
        self.gone = gone
        self.end_token = end_token

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if self.gone.is_set():
            scores[:] = float("-inf")
            scores[self.end_token] = 0.0
        return scores


class CountTokens:
    """A llama.cpp logits processor that counts: its first call sees the whole prompt, and it is called once per
    token sampled (end-of-text included, which llama-cpp-python's usage leaves out)."""

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.samples = 0

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if not self.samples:
            self.prompt_tokens = len(input_ids)
        self.samples += 1
        return scores

    def usage(self, finish_reason: str | None, stop_strings: bool) -> dict[str, int]:
        """The usage a non-streamed reply would report. A reply that stopped without stop strings sampled
        end-of-text last; one stopped by a stop string did not (counted as such when both could be)."""
        ended_by_eos = finish_reason == "stop" and not stop_strings
        completion = max(self.samples - ended_by_eos, 0)
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        }


def _with_usage(llama: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """``Llama.create_chat_completion`` streamed, then one chunk with no choices and the usage, as vLLM sends it
    when ``stream_options.include_usage`` asks (llama-cpp-python's server sends none)."""
    from llama_cpp import Llama, LogitsProcessorList

    counter = CountTokens()
    kwargs["logits_processor"] = LogitsProcessorList([*(kwargs.get("logits_processor") or []), counter])
    last: dict[str, Any] | None = None
    finish_reason = None
    chunks = cast(Iterator[dict[str, Any]], Llama.create_chat_completion(llama, **kwargs))  # stream=True: chunks
    for chunk in chunks:
        last = chunk
        finish_reason = next((c["finish_reason"] for c in chunk["choices"] if c.get("finish_reason")), finish_reason)
        yield chunk
    if last is not None:
        fields: dict[str, Any] = {name: last[name] for name in ("id", "object", "created", "model") if name in last}
        yield {**fields, "choices": [], "usage": counter.usage(finish_reason, bool(kwargs.get("stop")))}


async def _until_disconnected(request: Any, gone: threading.Event) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
    gone.set()


def build_app(model: str, alias: str, n_ctx: int, seed: int) -> "FastAPI":
    """llama-cpp-python's FastAPI app for one GGUF, with ``GET /props``, non-streamed replies that end when
    their client leaves, and streamed ones that report their usage when asked."""
    import anyio
    from fastapi import APIRouter, Depends, FastAPI, Request
    from llama_cpp import LogitsProcessorList
    from llama_cpp.server.app import (
        create_app,
        create_chat_completion,
        get_event_publisher,
        get_llama_proxy,
        prepare_request_resources,
    )
    from llama_cpp.server.errors import RouteErrorHandler
    from llama_cpp.server.settings import ModelSettings, ServerSettings
    from llama_cpp.server.types import CreateChatCompletionRequest
    from sse_starlette.sse import EventSourceResponse
    from starlette.concurrency import run_in_threadpool

    app: FastAPI = create_app(  # llama-cpp-python's functions are untyped
        server_settings=ServerSettings(interrupt_requests=False),
        model_settings=[ModelSettings(model=model, model_alias=alias, n_ctx=n_ctx, seed=seed)],
    )
    router = APIRouter(route_class=RouteErrorHandler)  # llama-cpp-python's error bodies (OpenAI's shape)

    @router.post("/v1/chat/completions")
    async def chat_completions(request: Request, body: CreateChatCompletionRequest) -> Any:
        if body.stream:
            if not ((await request.json()).get("stream_options") or {}).get("include_usage"):
                return await create_chat_completion(request, body)
            # llama-cpp-python's own road, with the usage chunk added
            send, receive = anyio.create_memory_object_stream[dict[str, Any]](10)
            publish = partial(
                get_event_publisher,
                request=request,
                inner_send_chan=send,
                body=body,
                body_model=body.model,
                llama_call=_with_usage,
                kwargs=body.model_dump(exclude=LLAMA_CPP_EXCLUDED),
            )
            return EventSourceResponse(receive, data_sender_callable=publish, sep="\n")
        kwargs = body.model_dump(exclude=LLAMA_CPP_EXCLUDED)
        gone = threading.Event()
        async with contextlib.asynccontextmanager(get_llama_proxy)() as llama_proxy:
            llama = prepare_request_resources(body, llama_proxy, body.model, kwargs)
            kwargs["logits_processor"] = LogitsProcessorList(
                [*(kwargs.get("logits_processor") or []), EndWhenGone(gone, llama.token_eos())]
            )
            watcher = asyncio.ensure_future(_until_disconnected(request, gone))
            try:
                return await run_in_threadpool(llama.create_chat_completion, **kwargs)
            finally:
                watcher.cancel()

    @router.get("/props")
    async def props(llama_proxy: Any = Depends(get_llama_proxy)) -> dict[str, Any]:  # noqa: B008 - FastAPI's form
        """What llama.cpp's server reports here: the context the model was loaded with."""
        return {"default_generation_settings": {"n_ctx": llama_proxy(None).n_ctx()}, "model_alias": alias}

    app.router.routes[:0] = router.routes  # matched before llama-cpp-python's own /v1/chat/completions
    return app


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the GGUF file")
    parser.add_argument("--alias", required=True, help="the model name clients send")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--n-ctx", type=int, required=True, help="context size in tokens")
    parser.add_argument("--seed", type=int, required=True, help="where the chain of each request's seed starts")
    args = parser.parse_args(argv)
    uvicorn.run(build_app(args.model, args.alias, args.n_ctx, args.seed), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
