"""The ``pacore`` command: solve a problem, serve models; plugins add ``swe`` and ``bench``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pacore_graph.command_kit import (
    CommandParser,
    Subcommands,
    add_run_arguments,
    check_port,
    config_from_args,
    extra_needed,
    is_loopback,
    item_counts,
    panel_from_args,
    print_summary,
    register_plugins,
    run_command_line,
    say,
    summarised,
)
from pacore_graph.config import PaCoReConfig
from pacore_graph.errors import PaCoReError, UsageError

if TYPE_CHECKING:  # imported on first use at run time: `pacore --help` stays fast
    from langchain_core.messages import BaseMessage

    from pacore_graph.batch.folder import RunFolder
    from pacore_graph.batch.progress import RunProgress
    from pacore_graph.graph.runner import MessagesInput
    from pacore_graph.models.openai_compatible import OpenAICompatibleChatModel
    from pacore_graph.models.vllm_server import Cluster

SOLVE_ID = "problem"  # the one problem of a `pacore solve --output` folder
PANEL_HELP = (
    "a JSON file naming several models (each its base_url, model, api_key_env, weight) and the synthesizer that "
    "writes the final round: each round's slots are shared among them (docs/coordination.md#panels); in place of "
    "--base-url/--model"
)


@summarised("solve")
def _solve(args: argparse.Namespace) -> int:
    import asyncio

    from pacore_graph.batch.folder import Problem
    from pacore_graph.batch.progress import RunProgress
    from pacore_graph.graph.runner import asolve, to_messages
    from pacore_graph.inputs import check_problem_text
    from pacore_graph.models import configured_url, serving
    from pacore_graph.models.panel_file import serving_panel
    from pacore_graph.synthesis.prompt import last_user_index

    panel = panel_from_args(args)  # a --panel file, checked before anything starts
    config = config_from_args(args, **({"panel": panel.panel()} if panel else {}))
    check_api_keys(args)
    given: MessagesInput
    if args.messages_file:
        given = read_messages_file(args.messages_file)
        if args.problem:
            given.append({"role": "user", "content": args.problem})
    elif args.problem:
        given = args.problem
    else:
        raise ValueError("give a PROBLEM or --messages-file")
    messages = to_messages(given)  # checked before a server is started or a token is spent
    if config.rounds:
        where = f"--messages-file {args.messages_file}" if args.messages_file else "the problem"
        check_problem_text(messages, last_user_index(messages), where)
    else:
        last_user_index(messages)
    base_url = configured_url(args.base_url)  # several URLs are refused here, before anything runs
    progress = RunProgress()
    model_named = panel.servers() if panel else args.model
    folder = _solve_folder(args.output, messages, config, model_named, progress) if args.output else None

    async def run(model: OpenAICompatibleChatModel | dict[str, OpenAICompatibleChatModel]) -> dict[str, Any]:
        try:
            if folder is None:
                return (await asolve(model, messages, config, on_event=progress)).summary()
            async with folder:
                summary = await folder.run(model, config, [Problem(SOLVE_ID, messages)], label=None)
            if summary.failed:
                advice = (
                    "a rerun would be refused the same way: change the request"
                    if SOLVE_ID in summary.refused
                    else f"rerun the same command to continue: {args.output}"
                )
                raise PaCoReError(f"{summary.failed[SOLVE_ID]} ({advice})")
            row: dict[str, Any] = folder.results.rows[0]
            return row
        finally:
            for each in model.values() if isinstance(model, dict) else [model]:
                await each.aclose()

    try:
        if folder is not None and folder.results.rows:
            row = folder.results.rows[0]
            say(f"answered before; read from {folder.results.path}")
        else:
            with serving_panel(panel) if panel else serving(base_url, args.model, args.api_key) as model, progress:
                row = asyncio.run(run(model))
    finally:
        if folder is not None:
            folder.release()
    print(row["answer"])
    _say_rounds(row["rounds"])
    trajectories = sum(len(record["trajectories"]) for record in row["rounds"])
    approx = " (approximate)" if row["ttc_approximate"] else ""
    say(f"effective TTC: {row['ttc']} tokens{approx}; failed trajectories: {len(row['failures'])}")
    say_models(row.get("models") or {})
    if row.get("reuse"):
        say(reuse_line(row["reuse"], trajectories))
    if args.output:
        say(f"the run, readable: pacore show {args.output}")
    counts = item_counts(1, 0, trajectories=trajectories, failed_trajectories=len(row["failures"]))
    if row.get("reuse"):
        counts["reused_trajectories"] = row["reuse"].get("reused", 0)
    return print_summary(
        "solve",
        output=args.output,
        counts=counts,
        answer=row["answer"],
        ttc=row["ttc"],
        ttc_approximate=row["ttc_approximate"],
    )


def reuse_line(reuse: dict[str, Any], trajectories: int) -> str:
    """What a continued run took from the earlier one, or why it took nothing, in one line."""
    reused = reuse.get("reused", 0)
    if not reused:
        return f"reused no earlier trajectory: {reuse.get('note') or 'none was a request of this schedule'}"
    return (
        f"reused {reused} earlier trajectories ({reuse.get('completion_tokens', 0)} completion tokens bought before); "
        f"sent {trajectories - reused}"
    )


def _say_rounds(rounds: list[dict[str, Any]]) -> None:
    """Each round in one line on stderr: K, tokens, and how far its answers agreed."""
    from pacore_graph.batch.show import agreement
    from pacore_graph.records import RoundRecord, round_line

    for data in rounds:
        round_ = RoundRecord.model_validate(data)
        say(f"round {round_.round_index + 1}: {round_line(round_)}; {agreement(round_)}")


def say_models(models: dict[str, Any]) -> None:
    """A panel run: one line per model on stderr (trajectories, requests, tokens, seconds, agreement)."""
    from pacore_graph.records import model_line

    for name, account in models.items():
        say(f"  {model_line(name, account)}")


def read_messages_file(path: str) -> list[dict[str, Any]]:
    """A ``--messages-file``: a JSON list of OpenAI-style messages, each checked (role, content, types), so a
    file of something else (an object, ``[1, 2]``) is refused in one line before anything starts."""
    from pacore_graph.inputs import check_messages, read_json_file

    where = f"--messages-file {path}"
    messages = read_json_file(path, where)
    check_messages(messages, where)
    checked: list[dict[str, Any]] = messages  # check_messages refused anything else
    return checked


def check_api_keys(args: argparse.Namespace) -> None:
    """An API key given empty (``--api-key "$UNSET"``, ``PACORE_API_KEY=""``) is a mistake no server accepts:
    refused before anything starts."""
    for flag in ("api_key", "upstream_api_key"):
        value = getattr(args, flag, None)
        if value is not None and not value.strip():
            source = " or $PACORE_API_KEY" if flag == "api_key" and args.command == "serve" else ""
            raise ValueError(f"--{flag.replace('_', '-')}{source} is empty: give the key, or leave it unset")


MESSAGES_KEPT_INLINE = 64 * 1024  # characters of a problem that run.json keeps as text; beyond, a digest


def messages_fingerprint(messages: Sequence[BaseMessage]) -> Any:
    """The problem as ``run.json`` compares it: the messages themselves, or for a long problem their SHA-256
    (a 10 MB problem must not make a 10 MB ``run.json``)."""
    import hashlib

    from langchain_core.messages import convert_to_openai_messages

    converted = convert_to_openai_messages(messages)
    text = json.dumps(converted, sort_keys=True, ensure_ascii=False)
    if len(text) <= MESSAGES_KEPT_INLINE:
        return converted
    return {"sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "characters": len(text)}


def _solve_folder(
    output: str, messages: Sequence[BaseMessage], config: PaCoReConfig, model: Any, progress: RunProgress
) -> RunFolder:
    """The run folder of ``--output``, claimed now: a bad path, a folder in use or one made for another
    problem or settings is refused before a server starts."""
    from pacore_graph.batch.folder import Problem, RunFolder
    from pacore_graph.batch.resume import RUNTIME_FIELDS

    if output.endswith(".json") and not Path(output).is_dir():
        raise ValueError(f"--output names a folder now (it keeps the result and the checkpoint): not {output}")
    fingerprint = {
        "messages": messages_fingerprint(messages),
        "model": model,
        **config.model_dump(mode="json", exclude=RUNTIME_FIELDS),
    }
    folder = RunFolder(output, fingerprint=fingerprint, progress=progress).claim()
    try:
        folder.check_earlier([Problem(SOLVE_ID, messages)], config)  # an escalation's earlier row, before a server
    except BaseException:
        folder.release()
        raise
    return folder


def _show(args: argparse.Namespace) -> int:
    from pacore_graph.batch.show import plot, render

    print(render(args.folder))
    if args.plot:
        say(f"plot: {plot(args.folder, args.plot)}")
    return 0


def _view(args: argparse.Namespace) -> int:
    """``pacore view``: serve the folder's page on loopback until Ctrl-C, or write it into one HTML file."""
    from pacore_graph.viewer.kinds import open_folder

    if args.port:
        check_port(args.port)
    view = open_folder(args.folder)  # a folder that is not a run folder: one line, before anything is bound
    if args.html:
        from pacore_graph.viewer.report import write_report

        out, problems = write_report(view, args.html)
        say(f"wrote {out}: {problems} problem(s) of {args.folder}, self-contained (open it in any browser)")
        return 0
    from pacore_graph.viewer.server import ViewServer

    view.index()  # read once now: rows that cannot be read are refused in one line, before the URL is printed
    try:
        server = ViewServer(view, host=args.host, port=args.port or 0)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port or 0}: {exc.strerror or exc}") from None
    with server:
        print(server.url, flush=True)
        exposed = (
            "" if is_loopback(args.host) else " (NOT loopback: anyone who reaches this address can read the folder)"
        )
        say(f"viewing {args.folder} ({view.title}) at {server.url}{exposed}; read only; Ctrl-C stops")
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            if args.open:  # beside the server: a browser command that waits must not hold up the page's requests
                import threading
                import webbrowser

                threading.Thread(target=webbrowser.open, args=(server.url,), daemon=True).start()
            server.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            pass
    return 0


def _serve_local(args: argparse.Namespace) -> int:
    import time

    from pacore_graph.models.embedded import EmbeddedServer

    check_port(args.port)
    with EmbeddedServer(port=args.port, n_ctx=args.n_ctx, seed=args.seed) as server:
        say(f"serving {server.model} at {server.base_url}, sampling seed {server.seed} (Ctrl-C stops)")
        try:
            while server.process is not None and server.process.poll() is None:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


def _serve_vllm(args: argparse.Namespace) -> int:
    import shlex

    from pacore_graph.models.vllm_server import Cluster, serve_vllm

    args.vllm_args = _own_options_first(args.own_parser, args)
    check_port(args.port)
    check_port(args.port + max(args.replicas, 1))  # the replicas listen on the ports after the router's
    if args.replicas == 1 and not args.emulate:
        if not args.model:
            raise ValueError("name the model to serve, e.g. pacore serve-vllm stepfun-ai/PaCoRe-8B")
        signal.signal(signal.SIGTERM, _interrupt)  # a service manager's stop: vLLM's processes stopped as on Ctrl-C
        return serve_vllm(args.model, port=args.port, host=args.host, extra=args.vllm_args)
    cluster = Cluster(
        args.model,
        replicas=args.replicas,
        port=args.port,
        host=args.host,
        policy=args.policy,
        emulate=args.emulate,
        vllm_args=args.vllm_args,
        router_args=shlex.split(args.router_args),
        log_dir=args.log_dir,
    )
    return serve_cluster(cluster)


SERVE_VLLM_OWN = ("--port", "--host", "--replicas", "--policy", "--router-args", "--log-dir")


def _own_options_first(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """serve-vllm's own options, also where they come after the model (``pacore serve-vllm DIR --port 8001``,
    as vLLM's own command reads them) are taken as ours; the rest go to ``vllm serve``."""
    own: list[str] = []
    rest: list[str] = []
    tokens = iter(args.vllm_args)
    for token in tokens:
        name = token.split("=", 1)[0]
        if name in SERVE_VLLM_OWN:
            own += [token] if "=" in token else [token, next(tokens, "")]
        elif token == "--emulate":
            own.append(token)
        else:
            rest.append(token)
    if own:
        model, rest_given = args.model, args.vllm_args
        parser.parse_args(own, namespace=args)  # checks them as usual (a port that is no number: one line)
        args.model, args.vllm_args = model, rest_given
    return rest


def _serve(args: argparse.Namespace) -> int:
    from pacore_graph.models import configured_url

    panel = panel_from_args(args)
    config = config_from_args(args, **({"panel": panel.panel()} if panel else {}))
    check_api_keys(args)
    check_port(args.port)
    with extra_needed("pacore serve", "server"):
        from pacore_graph.server.limits import ServerLimits
        from pacore_graph.server.serve import serve
    fields: dict[str, Any] = {}  # what is not given keeps ServerLimits' default
    if args.request_timeout is not None:
        fields["request_timeout"] = args.request_timeout or None  # 0: no limit
    if args.max_request_mb is not None:
        fields["max_request_bytes"] = int(args.max_request_mb * 2**20)
    for name in ("max_connections", "header_timeout"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    limits = ServerLimits(**fields)
    base_url = configured_url(args.base_url)  # several URLs are refused here, before anything runs
    return serve(
        config,
        base_url=base_url,
        model=args.model,
        upstream_api_key=args.upstream_api_key,
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        limits=limits,
        panel=panel,
    )


def _mcp(args: argparse.Namespace) -> int:
    """``pacore mcp``: everything given is checked (and the token read) before a server starts."""
    from pacore_graph.models import configured_url

    config = config_from_args(args)
    check_api_keys(args)
    check_port(args.port)
    with extra_needed("pacore mcp", "mcp"):
        from pacore_graph.mcp.limits import McpLimits
        from pacore_graph.mcp.serve import read_token, serve_mcp
    fields = {name: getattr(args, name) for name in ("max_calls", "call_tokens", "max_trajectories")}
    limits = McpLimits(**{name: value for name, value in fields.items() if value is not None})
    calls = sum(config.schedule)
    if calls > limits.max_trajectories:
        raise ValueError(
            f"the default rounds {config.rounds} make {calls} model calls, above --max-trajectories "
            f"{limits.max_trajectories}"
        )
    if args.token_file is not None and args.transport != "http":
        raise ValueError("--token-file is for --transport http (a stdio server is its client's own child process)")
    token = read_token(args.token_file) if args.transport == "http" else None
    return serve_mcp(
        config,
        limits,
        transport=args.transport,
        base_url=configured_url(args.base_url),
        model=args.model,
        upstream_api_key=args.api_key,
        host=args.host,
        port=args.port,
        token=token,
    )


def _add_mcp(commands: Subcommands) -> None:
    """``pacore mcp``'s arguments."""
    mcp = commands.add_parser(
        "mcp",
        help="PaCoRe as an MCP server (tool pacore_solve) for Claude Desktop, IDE agents and other MCP clients",
        description="Serve one MCP tool, pacore_solve (question, context, preset or rounds, max_tokens), that runs "
        "PaCoRe on the upstream --base-url names (default: the embedded SmolLM2-135M), over stdio (the client starts "
        "this command) or streamable HTTP (needs a bearer token; loopback unless --host says otherwise). The model "
        "and the limits are this server's options, never a caller's. Each finished round is a progress notification; "
        "a cancelled call closes its upstream requests.",
    )
    mcp.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio (default: the MCP client runs this command) or http (streamable HTTP at /mcp)",
    )
    mcp.add_argument("--host", default="127.0.0.1", help="http: interface to listen on (default: loopback only)")
    mcp.add_argument("--port", type=int, default=8765, help="http: port to listen on (default 8765)")
    mcp.add_argument(
        "--token-file",
        metavar="FILE",
        help="http: a file whose first line is the bearer token clients must send (default: $PACORE_MCP_TOKEN; "
        "never on the command line)",
    )
    add_run_arguments(
        mcp,
        output=None,
        role="upstream",
        concurrency="trajectories in flight upstream at most, over all calls (default 256)",
    )
    mcp.add_argument(
        "--max-calls", type=int, metavar="N", help="pacore_solve calls at once; one more is refused (default 4)"
    )
    mcp.add_argument(
        "--call-tokens",
        type=int,
        metavar="N",
        help="the largest budget of one call, in completion tokens over all its model calls; a caller's max_tokens "
        "may only lower it (default: no limit)",
    )
    mcp.add_argument(
        "--max-trajectories",
        type=int,
        metavar="N",
        help="model calls of the largest schedule a caller may ask for, sum(K) + 1 (default 37: the high preset)",
    )
    mcp.set_defaults(func=_mcp)


def _add_view(commands: Subcommands) -> None:
    """``pacore view``'s arguments (its own small parser too: see :func:`main`)."""
    view = commands.add_parser(
        "view",
        help="a run folder in the browser: problems, rounds, trajectories, SWE episodes, benchmark curves",
        description="Serve a folder's page on loopback (pacore solve --output, RunFolder, bench math, bench "
        "multichallenge, swe run, swe eval): the problems sortable and filterable, each problem's rounds as a grid "
        "of trajectories, a click for one trajectory's messages and conclusion. Prints the URL; Ctrl-C stops. Reads "
        "only (a row being written is skipped) and serves no file outside the folder.",
    )
    view.add_argument("folder", help="the folder a run wrote")
    view.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    view.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to listen on (default: loopback only; another one lets anyone who reaches it read the folder)",
    )
    view.add_argument("--open", action="store_true", help="open the page in the default browser")
    view.add_argument(
        "--html",
        metavar="FILE",
        help="write the page with all its data into this one self-contained HTML file instead of serving it",
    )
    view.set_defaults(func=_view)


def build_parser() -> argparse.ArgumentParser:
    from pacore_graph.models.embedded import EMBEDDED_MAX_TOKENS

    parser = CommandParser(
        prog="pacore",
        description="PaCoRe: parallel coordinated reasoning. Errors are one line on stderr "
        "(pacore: error: ...) with exit status 2 for a refused argument, value or file and 1 for a failed run; "
        "a run command's last stdout line is its JSON summary.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    solve = commands.add_parser(
        "solve",
        help="answer one problem with PaCoRe",
        description="Answer one problem with PaCoRe: preset low ([4]: 4 trajectories, then one synthesis) unless "
        "--preset/--rounds say otherwise, on the server --base-url names, else on the embedded SmolLM2-135M model "
        f"(replies capped at {EMBEDDED_MAX_TOKENS} tokens unless --max-tokens says otherwise).",
    )
    solve.add_argument("problem", nargs="?", help="the problem (a user message)")
    solve.add_argument("--messages-file", help="JSON list of OpenAI-style messages (a conversation)")
    solve.add_argument("--panel", metavar="FILE", help=PANEL_HELP)
    add_run_arguments(
        solve,
        concurrency="trajectories in flight at most (default 256)",
        output="a folder for the run: its row (answer, rounds, usage, TTC, failures) in results.jsonl and its "
        "checkpoint; the same command again continues an interrupted run or prints the answer",
    )
    solve.set_defaults(func=_solve)

    show = commands.add_parser(
        "show",
        help="read a run folder: answers, rounds, agreement, tokens",
        description="Print what a run folder holds (pacore solve --output, RunFolder): per problem its answer and, per "
        "round, K, tokens and how many of the round's answers agree. Reads only: safe beside a run in progress.",
    )
    show.add_argument("folder", help="the run folder")
    show.add_argument(
        "--plot",
        metavar="PNG",
        help="also draw tokens per round and first-round agreement per problem into this PNG (needs matplotlib)",
    )
    show.set_defaults(func=_show)

    _add_view(commands)

    local = commands.add_parser(
        "serve-local",
        help="run the embedded SmolLM2 server alone",
        description="Run the embedded SmolLM2-135M-Instruct model behind llama-cpp-python's OpenAI-compatible server "
        "on loopback, until Ctrl-C; other commands use it with --base-url http://127.0.0.1:PORT/v1 (model name "
        "smollm2-135m-instruct).",
    )
    local.add_argument("--port", type=int, default=8080, help="port on 127.0.0.1 to listen on (default: 8080)")
    local.add_argument(
        "--n-ctx",
        type=int,
        default=8192,
        help="context size in tokens (default: 8192, SmolLM2's own); clients read it from the server",
    )
    local.add_argument(
        "--seed",
        type=int,
        help="sampling seed, to repeat a run (default: $PACORE_EMBEDDED_SEED, else a random one each start)",
    )
    local.set_defaults(func=_serve_local)

    from pacore_graph.models.vllm_server import ROUTER_POLICIES, ROUTER_POLICY

    vllm = commands.add_parser(
        "serve-vllm",
        help="run `vllm serve` with the flags a model needs; --replicas N puts vllm-router in front",
        description="Run `vllm serve` (a GPU build, or vLLM's CPU build) with the flags the model needs: PaCoRe-8B's "
        "(reasoning parser qwen3, 131072-token context) for PaCoRe and Qwen3-style reasoning models, else read from "
        "the model's files (its context, a reasoning parser only where its chat template thinks, a tool-call "
        "parser); prefix caching always. Flags after the model override ours. The vllm beside this Python or on "
        "PATH serves, or the one $PACORE_VLLM names.",
    )
    vllm.add_argument(
        "model",
        nargs="?",
        help="a Hugging Face name (stepfun-ai/PaCoRe-8B) or a local model folder (with --emulate: the served name)",
    )
    vllm.add_argument("--port", type=int, default=8000, help="the server's port, or the router's (replicas: next N)")
    vllm.add_argument("--host", default="127.0.0.1")
    vllm.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="vLLM servers behind vllm-router: one GPU each (CPU build: a share of the cores each)",
    )
    vllm.add_argument(
        "--policy",
        choices=ROUTER_POLICIES,
        default=ROUTER_POLICY,
        help=f"vllm-router's routing policy (default {ROUTER_POLICY}: measured by pacore bench replicas)",
    )
    vllm.add_argument("--emulate", action="store_true", help="emulated GPU replicas instead of vLLM (no GPU needed)")
    vllm.add_argument("--router-args", default="", help="further flags for vllm-router, as one quoted string")
    vllm.add_argument(
        "--log-dir",
        help="where each server's log goes (default: a new temporary folder, which "
        "--emulate removes when the cluster stops)",
    )
    vllm.add_argument("vllm_args", nargs=argparse.REMAINDER, help="further flags passed to vllm serve")
    vllm.set_defaults(func=_serve_vllm, own_parser=vllm)

    endpoint = commands.add_parser(
        "serve",
        help="PaCoRe behind an OpenAI-compatible endpoint (/v1/chat/completions)",
        description="PaCoRe behind an OpenAI-compatible endpoint, in front of the upstream --base-url names (its "
        "--model for requests that name none); until Ctrl-C.",
    )
    add_run_arguments(
        endpoint,
        output=None,
        role="upstream",
        api_key_option="--upstream-api-key",
        concurrency="trajectories in flight upstream at most, over all requests (default 256)",
        max_tokens=f"default cap on each generated message (default: none; embedded model: {EMBEDDED_MAX_TOKENS})",
    )
    endpoint.add_argument("--panel", metavar="FILE", help=PANEL_HELP + "; clients ask for model 'panel'")
    endpoint.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: loopback only)")
    endpoint.add_argument("--port", type=int, default=8100)
    endpoint.add_argument(
        "--api-key",
        default=os.environ.get("PACORE_API_KEY"),
        help="clients must send Authorization: Bearer KEY (default: $PACORE_API_KEY; unset: none)",
    )
    endpoint.add_argument(
        "--request-timeout",
        type=float,
        metavar="SECONDS",
        help="a request's PaCoRe run may take this long, then its upstream requests are closed and "
        "the client gets a 504 (default 3600; 0: no limit)",
    )
    endpoint.add_argument(
        "--max-request-mb",
        type=float,
        metavar="MB",
        help="largest request body, in MiB; a larger one is a 413 (default 8)",
    )
    endpoint.add_argument(
        "--max-connections", type=int, help="open client connections at most; one more gets a 503 (default 1024)"
    )
    endpoint.add_argument(
        "--header-timeout",
        type=float,
        metavar="SECONDS",
        help="a connection that sends no complete request head this long is closed (default 30)",
    )
    endpoint.set_defaults(func=_serve)

    _add_mcp(commands)

    plugins = entry_points(group="pacore.commands")
    register_plugins(commands, [(f"plugin {p.name!r} ({p.value})", p.load) for p in plugins])
    return parser


def main(argv: list[str] | None = None) -> int:
    """The ``pacore`` command: its exit status (0 done, 1 the run failed, 2 a refused argument, value or file)."""
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == ["view"]:  # the viewer loads neither the model clients nor the plugins: its page is up sooner
        return run_command_line(view_parser(), given)
    return run_command_line(build_parser(), argv)


def view_parser() -> argparse.ArgumentParser:
    """The parser of ``pacore view`` alone (the same arguments, help and errors as in :func:`build_parser`)."""
    parser = CommandParser(prog="pacore")
    _add_view(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    return parser


def serve_cluster(cluster: Cluster) -> int:
    """Run the cluster until Ctrl-C (exit 0) or until one of its servers dies (exit 1, naming it)."""
    from pacore_graph.models.vllm_server import KEYLESS_NOTE

    signal.signal(signal.SIGTERM, _interrupt)  # a service manager's stop gets the same clean shutdown as Ctrl-C
    with cluster:
        kind = "emulated replicas" if cluster.emulate else f"vLLM replicas of {cluster.model}"
        say(
            f"vllm-router ({cluster.policy}) at {cluster.base_url} over {cluster.replicas} {kind}: "
            f"{' '.join(cluster.replica_urls())}; logs in {cluster.log_dir} (Ctrl-C stops)"
        )
        if cluster.policy in ("consistent_hash", "sticky_least_loaded"):
            say(f"note: {cluster.policy}: {KEYLESS_NOTE}")
        try:
            while (dead := cluster.dead()) is None:
                time.sleep(1)
        except KeyboardInterrupt:
            return 0
        say(f"error: {dead.name} exited; stopping the cluster\n--- {dead.log} (tail) ---\n{dead.log_tail()}")
        return 1


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
