"""What this project assumes of other libraries beyond their public, documented APIs, checked against the
installed versions: one test per row of docs/architecture.md's "Other libraries' internals we rely on".

Each test runs the real library (a small LangGraph graph, a uvicorn server on loopback, pydantic models) and
fails with a message naming the module of this project that needs fixing after an upgrade.
"""

from __future__ import annotations

import asyncio
import contextvars
import socket
import threading
import warnings
from typing import Any, TypedDict

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from pydantic import BaseModel, PrivateAttr
from waits import wait_until

# What LangGraph puts in each task's config metadata (pacore_graph.graph.unseen.TASK_METADATA lists the same).
TASK_METADATA = {"langgraph_step", "langgraph_node", "langgraph_triggers", "langgraph_path", "langgraph_checkpoint_ns"}


class State(TypedDict):
    x: int


def one_node_graph(node: Any, name: str = "node", checkpointer: Any = None) -> Any:
    graph = StateGraph(State)
    graph.add_node(name, node)
    graph.add_edge(START, name)
    return graph.compile(checkpointer=checkpointer)


# ------------------------------------------------------------------------------------------ LangGraph


def test_langgraph_puts_its_task_metadata_in_a_node_config():
    """pacore_graph.graph.unseen, graph.runner and integrations.chat_model pick LangGraph's task metadata out of
    a config by these keys (``langgraph_*``); LangGraph documents no API that names them."""
    seen: dict[str, Any] = {}

    def node(state: State, config: RunnableConfig) -> State:
        seen.update(config["metadata"])
        return {"x": 1}

    one_node_graph(node, "probe").invoke({"x": 0})
    missing = TASK_METADATA - set(seen)
    assert not missing, f"LangGraph no longer sets {sorted(missing)} in a node's config metadata: update TASK_METADATA"
    assert seen["langgraph_node"] == "probe" and seen["langgraph_step"] == 1, seen
    assert not {key for key in seen if key.startswith("langgraph_")} - TASK_METADATA, (
        f"LangGraph sets more task metadata than pacore_graph.graph.unseen.TASK_METADATA lists: {sorted(seen)}"
    )


def test_a_nested_graph_sets_its_own_task_metadata_over_the_enclosing_one():
    """pacore_graph.graph.unseen drops the enclosing task's ``langgraph_*`` metadata for unobserved runs because
    every task of the inner graph sets its own over it."""
    inner_seen: dict[str, Any] = {}

    def inner_node(state: State, config: RunnableConfig) -> State:
        inner_seen.update(config["metadata"])
        return {"x": 2}

    inner = one_node_graph(inner_node, "inner")

    def outer_node(state: State, config: RunnableConfig) -> State:
        return inner.invoke(state, config)

    one_node_graph(outer_node, "outer").invoke({"x": 0})
    assert inner_seen.get("langgraph_node") == "inner", (
        f"a nested graph's task no longer sets its own langgraph_node over the enclosing one: {inner_seen}"
    )


def test_var_child_runnable_config_holds_the_node_config_inside_a_node():
    """LangChain's ambient config (``var_child_runnable_config``) is the running node's config (modules that
    read or set it: see docs/architecture.md)."""
    seen: dict[str, Any] = {}

    def node(state: State, config: RunnableConfig) -> State:
        ambient = var_child_runnable_config.get()
        seen["ambient"] = ambient
        seen["config"] = config
        return {"x": 1}

    one_node_graph(node, "probe").invoke({"x": 0})
    ambient = seen["ambient"]
    assert ambient is not None, "var_child_runnable_config is no longer set inside a LangGraph node"
    assert ambient.get("metadata", {}).get("langgraph_node") == "probe", ambient.get("metadata")
    assert ambient["metadata"] == seen["config"]["metadata"]


def test_a_graph_run_merges_in_the_ambient_config():
    """pacore_graph.graph.unseen trims the ambient config before a run because LangGraph merges it into the
    run's config (``ensure_config``): what is set there reaches every node."""
    seen: dict[str, Any] = {}

    def node(state: State, config: RunnableConfig) -> State:
        seen.update(config["metadata"])
        return {"x": 1}

    graph = one_node_graph(node)
    token = var_child_runnable_config.set({"metadata": {"pacore_probe": "ambient"}})
    try:
        graph.invoke({"x": 0})
    finally:
        var_child_runnable_config.reset(token)
    assert seen.get("pacore_probe") == "ambient", f"the ambient config no longer reaches a graph run: {seen}"


class _RecordingChat(BaseChatModel):
    """A minimal real chat model: records its run manager's inheritable metadata."""

    seen: dict[str, Any] = {}

    @property
    def _llm_type(self) -> str:
        return "recording"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        assert run_manager is not None
        self.seen.update(run_manager.inheritable_metadata)
        return ChatResult(generations=[ChatGeneration(message=AIMessage("ok"))])


def test_a_model_called_in_a_node_gets_the_task_metadata_in_its_run_manager():
    """pacore_graph.integrations.chat_model passes the enclosing task's ``langgraph_*`` metadata on from its run
    manager's inheritable metadata."""
    chat = _RecordingChat()
    chat.seen = {}

    def node(state: State, config: RunnableConfig) -> State:
        chat.invoke([HumanMessage("hi")], config)
        return {"x": 1}

    one_node_graph(node, "probe").invoke({"x": 0})
    missing = TASK_METADATA - set(chat.seen)
    assert not missing, f"a model's run manager no longer inherits {sorted(missing)} from its node"
    assert chat.seen["langgraph_node"] == "probe"


def test_a_handler_with_tap_output_aiter_makes_a_plain_ainvoke_stream():
    """pacore_graph.integrations.final_tokens makes the final round's model calls stream token by token by
    being a handler with ``tap_output_aiter``, which LangChain's chat models check for (its private
    ``_StreamingCallbackHandler`` protocol) to decide whether ``ainvoke`` streams."""
    from langchain_core.language_models import GenericFakeChatModel

    from pacore_graph.integrations.final_tokens import FinalRoundTokens

    tokens: list[str] = []
    handler = FinalRoundTokens(0, lambda chunk: tokens.append(str(chunk.content)))
    model = GenericFakeChatModel(messages=iter([AIMessage("one two three")]))
    config: RunnableConfig = {"callbacks": [handler], "metadata": {"pacore_round": 0}}
    answer = asyncio.run(model.ainvoke([HumanMessage("hi")], config))
    assert answer.content == "one two three"
    assert len(tokens) > 1 and "".join(tokens) == "one two three", (
        f"a handler with tap_output_aiter no longer makes ainvoke stream (tokens: {tokens}): "
        "fix pacore_graph.integrations.final_tokens"
    )


def test_chat_models_call_their_native_protocol_hook_with_the_run_manager():
    """pacore_graph.integrations.chat_model gives PaCoReChatModel LangChain's content-block protocol
    (``stream_events(version="v3")``) through the hook ``_stream_chat_model_events``, which LangChain calls with
    the model's run manager (its ``_stream`` / ``_astream`` get none on LangChain's other roads), and turns its
    chunks into the protocol's events with ``langchain_core.language_models._compat_bridge.achunks_to_events``."""
    from langchain_core.language_models._compat_bridge import achunks_to_events, chunks_to_events
    from langchain_core.messages import AIMessageChunk
    from langchain_core.outputs import ChatGenerationChunk

    managers: list[Any] = []

    class Native(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "native"

        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any):
            return ChatResult(generations=[ChatGeneration(message=AIMessage("one two"))])

        def _stream_chat_model_events(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
        ):
            managers.append(run_manager)
            chunks = (ChatGenerationChunk(message=AIMessageChunk(content=text)) for text in ("one ", "two"))
            yield from chunks_to_events(chunks, message_id="m")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # v3 is beta
        stream = Native().stream_events("hi", version="v3")
        events = list(stream)
    assert isinstance(managers[0], CallbackManagerForLLMRun), (
        "LangChain no longer calls _stream_chat_model_events with the run manager: fix "
        "pacore_graph.integrations.chat_model (PaCoReChatModel's protocol hooks)"
    )
    assert events[0]["event"] == "message-start" and events[-1]["event"] == "message-finish"
    assert stream.output.text == "one two", "the protocol's stream no longer assembles the hook's events"

    async def chunks():
        for text in ("a", "b"):
            yield ChatGenerationChunk(message=AIMessageChunk(content=text))

    async def converted() -> list[Any]:
        return [event async for event in achunks_to_events(chunks(), message_id="m")]

    kinds = [event["event"] for event in asyncio.run(converted())]
    assert kinds[0] == "message-start" and kinds[-1] == "message-finish" and "content-block-delta" in kinds, (
        f"achunks_to_events no longer makes a message's events ({kinds}): fix pacore_graph.integrations.chat_model"
    )


def test_chat_openai_builds_its_messages_through_the_two_methods_reasoning_chat_openai_overrides(mock_server):
    """pacore_graph.models.chat_openai keeps vLLM's reasoning in ChatOpenAI's messages by overriding
    ``_create_chat_result`` (a whole reply) and ``_convert_chunk_to_generation_chunk`` (each streamed chunk):
    langchain-openai has no public hook for fields of a reply it does not know."""
    from pacore_graph.models.chat_openai import ReasoningChatOpenAI

    def handler(body, attempt):
        return {"content": "42", "reasoning_content": "I thought."}

    with mock_server(handler) as server:
        model = ReasoningChatOpenAI(base_url=server.base_url, api_key="k", model="mock-model", max_retries=0)
        whole = model.invoke("q")
        streamed = list(model.stream("q"))
    assert whole.additional_kwargs.get("reasoning_content") == "I thought.", (
        "ChatOpenAI no longer builds a reply through _create_chat_result: fix pacore_graph.models.chat_openai"
    )
    reasoning = "".join(chunk.additional_kwargs.get("reasoning_content", "") for chunk in streamed)
    assert reasoning == "I thought.", (
        "ChatOpenAI no longer builds a streamed chunk through _convert_chunk_to_generation_chunk: fix "
        "pacore_graph.models.chat_openai"
    )


def test_the_checkpointer_config_key_still_lends_a_saver_to_a_graph():
    """pacore_graph.graph.own_thread reads the saver LangGraph lends a node, and hands it to the PaCoRe graph, by
    ``langgraph.constants.CONF`` / ``CONFIG_KEY_CHECKPOINTER`` (kept there for backwards compatibility only)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a deprecation warning on import is the first sign of removal
        from langgraph.constants import CONF, CONFIG_KEY_CHECKPOINTER
    saver = InMemorySaver()
    lent: dict[str, Any] = {}

    def node(state: State, config: RunnableConfig) -> State:
        lent["saver"] = config.get(CONF, {}).get(CONFIG_KEY_CHECKPOINTER)
        return {"x": 1}

    one_node_graph(node, checkpointer=saver).invoke({"x": 0}, {"configurable": {"thread_id": "caller"}})
    assert lent["saver"] is saver, (
        f"a node's config no longer carries its graph's saver under {CONFIG_KEY_CHECKPOINTER!r}"
    )

    uncheckpointed = one_node_graph(lambda state: {"x": 3})
    uncheckpointed.invoke({"x": 0}, {CONF: {"thread_id": "own", CONFIG_KEY_CHECKPOINTER: saver}})
    stored = saver.get_tuple({"configurable": {"thread_id": "own"}})
    assert isinstance(saver, BaseCheckpointSaver) and stored is not None, (
        "a graph compiled without a checkpointer no longer checkpoints to the saver its config lends it"
    )
    assert stored.checkpoint["channel_values"].get("x") == 3


# ------------------------------------------------------------------------------------------- pydantic


def test_pydantic_keeps_private_attributes_in_one_dict_and_fields_in_the_instance_dict():
    """pacore_graph.models.openai_compatible reads its private attributes through ``__pydantic_private__`` (one
    dict read instead of several ``__getattr__`` calls) and a message's fields through ``vars(message)``."""

    class Model(BaseModel):
        field: str = "f"
        _private: int = PrivateAttr(default=1)

    model = Model()
    model._private = 7
    assert model.__pydantic_private__ == {"_private": 7}, (
        "pydantic no longer keeps private attributes in __pydantic_private__: update OpenAICompatibleChatModel._private"
    )
    message = AIMessage("hello", name="n")
    fields = vars(message)
    assert fields["content"] == "hello" and fields["name"] == "n" and fields["type"] == "ai", (
        "pydantic/LangChain messages no longer keep their fields in the instance __dict__: update _message_key"
    )


# ------------------------------------------------------------------------------------------ uvicorn


_PROBE: contextvars.ContextVar[str | None] = contextvars.ContextVar("pacore_probe", default=None)


def _wrapping_protocol() -> type:
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class Wrapping(asyncio.Protocol):
        """As pacore_graph.server.connections._Guard: uvicorn's protocol built from uvicorn's own arguments,
        fed through asyncio.Protocol only, a context variable set while it reads."""

        def __init__(self, **arguments: Any) -> None:
            self.inner = AutoHTTPProtocol(**arguments)

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.inner.connection_made(transport)

        def data_received(self, data: bytes) -> None:
            token = _PROBE.set("set while uvicorn read the request")
            try:
                self.inner.data_received(data)
            finally:
                _PROBE.reset(token)

        def eof_received(self) -> bool | None:
            return self.inner.eof_received()

        def connection_lost(self, exc: Exception | None) -> None:
            self.inner.connection_lost(exc)

    return Wrapping


async def _probe_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = (_PROBE.get() or "unset").encode()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body)).encode())]}
    )
    await send({"type": "http.response.body", "body": body})


def test_uvicorn_takes_a_wrapping_protocol_and_its_request_tasks_inherit_the_reading_context():
    """pacore_graph.server.connections puts a guard in front of uvicorn's HTTP protocol (``Config(http=<class>)``,
    built with uvicorn's own keyword arguments) and finds it from the ASGI app through a context variable set
    while uvicorn reads: the request task uvicorn creates, and a pipelined request's, must inherit it."""
    import uvicorn

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = uvicorn.Config(_probe_app, http=_wrapping_protocol(), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 10, what="uvicorn started with a wrapping protocol class")
        request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
        with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
            connection.sendall(request * 2)  # the second one is pipelined: started from the first one's task
            data = b""
            while data.count(b"set while uvicorn read the request") + data.count(b"unset") < 2:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                data += chunk
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listener.close()
    assert data.count(b"HTTP/1.1 200") == 2, data
    assert b"unset" not in data, (
        "uvicorn's request task no longer inherits the context of the protocol's data_received: "
        "pacore_graph.server.connections cannot tell its guard when a reply is complete"
    )


def test_httptools_request_parser_reports_where_a_head_ends():
    """pacore_graph.server.connections parses the bytes it hands uvicorn with httptools (``on_headers_complete``,
    ``HttpParserError``), as uvicorn does."""
    import httptools

    class Heads:
        count = 0

        def on_headers_complete(self) -> None:
            self.count += 1

    heads = Heads()
    parser = httptools.HttpRequestParser(heads)
    parser.feed_data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi")
    assert heads.count == 2
    with pytest.raises(httptools.HttpParserError):
        httptools.HttpRequestParser(Heads()).feed_data(b"NOT HTTP AT ALL\r\n\r\n")


# --------------------------------------------------------------------------------- docker-py, pip, stdlib


def test_docker_py_api_client_is_a_requests_session_with_its_base_url_and_version():
    """pacore_agents.swe.docker_sandbox sends ``POST /containers/{id}/update`` (``PidsLimit``, which
    update_container lacks) through the APIClient's public parts, and reads an exec socket's ``_sock``."""
    import docker
    import requests

    api = docker.APIClient(base_url="tcp://127.0.0.1:9", version="1.41", timeout=7)  # no daemon contacted
    assert isinstance(api, requests.Session), "docker.APIClient is no longer a requests.Session"
    assert (api.base_url, api.api_version, api.timeout) == ("http://127.0.0.1:9", "1.41", 7)
    assert callable(docker.errors.create_api_error_from_http_exception)
    import inspect

    assert "pids_limit" not in inspect.signature(api.update_container).parameters, (
        "docker-py's update_container now takes pids_limit: use it in DockerSandbox._set_pids_limit"
    )
    left, right = socket.socketpair()
    with left, right:
        wrapped = socket.SocketIO(left, "rwb")  # what exec_start(socket=True) returns over a unix socket
        assert getattr(wrapped, "_sock", None) is left, "socket.SocketIO no longer keeps its socket in _sock"


def test_docker_py_frames_iter_demultiplexes_an_exec_stream():
    """pacore_agents.swe.docker_sandbox reads an exec's output with ``docker.utils.socket.frames_iter`` (undocumented),
    which splits Docker's multiplexed stream (an 8-byte header per frame: stream, 0, 0, 0, size) into stdout and
    stderr."""
    import struct

    from docker.utils.socket import STDERR, STDOUT, frames_iter

    left, right = socket.socketpair()
    with left, right:
        frames = [(STDOUT, b"out\n"), (STDERR, b"err\n"), (STDOUT, b"more")]
        right.sendall(b"".join(struct.pack(">BxxxL", stream, len(data)) + data for stream, data in frames))
        right.shutdown(socket.SHUT_WR)
        read = list(frames_iter(socket.SocketIO(left, "rb"), tty=False))
    assert read == frames, f"docker-py's frames_iter no longer demultiplexes an exec stream: {read}"


def test_a_content_and_artifact_tool_may_answer_a_command_and_a_tool_node_injects_a_runtime_schema_field():
    """pacore_graph.integrations.tool: a BaseTool with response_format="content_and_artifact" whose args_schema has a
    field named ``runtime`` gets LangGraph's ToolRuntime there from a ToolNode, and a ``(Command, None)`` reply comes
    out of the tool as that Command (the tool's state update), not as a ToolMessage around it."""
    from typing import Annotated

    from langchain_core.messages import ToolMessage
    from langchain_core.tools import BaseTool, InjectedToolArg
    from langgraph.prebuilt import ToolNode, ToolRuntime
    from langgraph.types import Command

    class Input(BaseModel):
        question: str
        runtime: Annotated[Any, InjectedToolArg] = None

    seen: list[Any] = []

    class Probe(BaseTool):
        name: str = "probe"
        description: str = "a probe"
        args_schema: type[BaseModel] = Input
        response_format: str = "content_and_artifact"

        def _run(self, question: str, runtime: Any = None) -> tuple[Any, Any]:
            seen.append(runtime)
            message = ToolMessage("answer", artifact={"a": 1}, tool_call_id=runtime.tool_call_id, name=self.name)
            return Command(update={"messages": [message]}), None

    from langgraph.graph import MessagesState

    graph = StateGraph(MessagesState)
    graph.add_node("tools", ToolNode([Probe()]))
    graph.add_edge(START, "tools")
    call = {"name": "probe", "args": {"question": "q"}, "id": "c1", "type": "tool_call"}
    out = graph.compile().invoke({"messages": [AIMessage("", tool_calls=[call])]})
    assert isinstance(seen[0], ToolRuntime), "integrations/tool.py: the ToolNode no longer injects ToolRuntime"
    assert seen[0].tool_call_id == "c1"
    messages = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [(m.content, m.artifact) for m in messages] == [("answer", {"a": 1})], "integrations/tool.py: Command lost"


def test_argparse_subcommands_are_a_subparsers_action():
    """Type annotations only (the commands' ``register(subparsers)``): typeshed types ``add_subparsers()`` as
    ``argparse._SubParsersAction``; mypy checks the annotations, this the runtime class."""
    import argparse

    assert isinstance(argparse.ArgumentParser().add_subparsers(), argparse._SubParsersAction)


def test_pip_evaluates_markers_through_its_vendored_default_environment():
    """pacore_agents.swe.wheelhouse runs pip with another interpreter's marker environment by replacing
    ``pip._vendor.packaging.markers.default_environment``."""
    markers = pytest.importorskip("pip._vendor.packaging.markers")
    original = markers.default_environment
    markers.default_environment = lambda: {**original(), "python_version": "2.7", "python_full_version": "2.7.18"}
    try:
        assert markers.Marker('python_version < "3"').evaluate(), (
            "pip's markers no longer read default_environment when evaluated: update pacore_agents.swe.wheelhouse"
        )
    finally:
        markers.default_environment = original
