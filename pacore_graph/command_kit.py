"""What every ``pacore`` command shares (``solve``, ``serve*``, ``bench ...``, ``swe ...``), so that they all read
their arguments, fail and report the same way. Plugins import it: it is a public module.

Errors
    One line on stderr, ``pacore: error: MESSAGE`` (passwords in URLs replaced by ``***``), and the exit status
    says whose it is: **2** when what was given cannot be used (a bad argument, value, path or file, a folder
    made for other settings: a ``ValueError``, :class:`~pacore_graph.errors.UsageError` included, refused
    before anything starts), **1** when the run failed (a server, Docker, a folder in use, a failed problem),
    130 on Ctrl-C. argparse's own errors take the same form and status (:class:`CommandParser`).
Output
    Human-readable lines go to stderr (:func:`say`, :func:`warn`) or to stdout before the end. A run command's
    last stdout line is one JSON object (:func:`print_summary`): ``command``, ``exit_code``, ``output`` (the
    folder or file written, or null), ``counts`` (``total`` / ``done`` / ``failed`` where it runs a list of
    items), then the command's own fields; a run with exit status 1 ends stderr with its ``pacore: error: ...``
    line and its summary with the same ``error`` (a run stopped by an exception: :func:`summarised`).
Arguments
    :func:`add_run_arguments` (the model, the schedule, ``--max-concurrency``, ``--max-tokens``, ``--output``),
    or its parts :func:`add_model_arguments`, :func:`add_schedule_arguments`, :func:`add_concurrency_argument`,
    :func:`add_output_argument`; :func:`add_alias` keeps an old spelling working without showing it;
    :func:`comma_list` reads an option's comma-separated values;
    :func:`config_from_args` builds the ``PaCoReConfig``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import ipaddress
import json
import logging
import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

from pacore_graph.config import PRESETS, PaCoReConfig, parse_rounds
from pacore_graph.errors import PaCoReError, UsageError, redact_credentials

if TYPE_CHECKING:
    from pacore_graph.models.panel_file import PanelFile

PROG = "pacore"
USAGE = 2  # exit status: what was given cannot be used; nothing started
FAILED = 1  # exit status: the run failed
INTERRUPTED = 130  # exit status: Ctrl-C (128 + SIGINT, as shells report it)

# What `parser.add_subparsers()` returns, where a plugin adds its commands (argparse names the class privately).
Subcommands: TypeAlias = "argparse._SubParsersAction[Any]"


# -- errors and messages --------------------------------------------------------------------------------------
def say(message: str) -> None:
    """A line for the person at the terminal, on stderr: ``pacore: MESSAGE``."""
    print(f"{PROG}: {redact_credentials(message)}", file=sys.stderr, flush=True)


def warn(message: str) -> None:
    """``pacore: warning: MESSAGE`` on stderr."""
    say(f"warning: {message}")


def log_to_stderr(logger: logging.Logger, label: str) -> None:
    """A server command's own log (a failed request's whole story) on stderr, each line marked ``pacore LABEL``,
    apart from the root logger's handlers (the command owns its process; a library user's logging is theirs)."""
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(f"%(levelname)s:  {label}: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False


def error_message(exc: BaseException) -> str:
    """The error as its one line says it: a settings model's first refusal names its field."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError) and exc.errors():
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"]))
        message = str(first["msg"]).removeprefix("Value error, ")
        return redact_credentials(f"invalid {where}: {message}" if where else message)
    return redact_credentials(str(exc) or type(exc).__name__)


def exit_status(exc: BaseException) -> int:
    """2 for an input refused (a ``ValueError``), 130 for Ctrl-C, 1 for a run that failed."""
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED
    return USAGE if isinstance(exc, ValueError) else FAILED


# What a command reports in one line (the machine's too: a file system's or SQLite's); anything else is a defect
# and keeps its traceback.
REPORTED = (PaCoReError, ValueError, OSError, RuntimeError, sqlite3.Error)


def report_error(exc: BaseException) -> int:
    """Print ``exc`` as a command's error line; return the exit status it means."""
    if isinstance(exc, KeyboardInterrupt):
        say("interrupted")
    else:
        say(f"error: {error_message(exc)}")
    return exit_status(exc)


def run_parsed(args: argparse.Namespace) -> int:
    """Run a parsed command (``args.func(args)``): an error is one line and its exit status."""
    try:
        return args.func(args) or 0
    except (*REPORTED, KeyboardInterrupt) as exc:
        return report_error(exc)


def run_command_line(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the command: its exit status, for ``--help`` (0) and argparse's errors (2) too."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or argparse's error, already printed
        return exc.code if isinstance(exc.code, int) else USAGE
    return run_parsed(args)


class CommandParser(argparse.ArgumentParser):
    """argparse's parser with errors in the commands' form: one line, ``pacore: error: ...``, exit status 2.

    Sub-commands made with ``add_subparsers().add_parser`` are of this class too (argparse's default)."""

    def error(self, message: str) -> NoReturn:
        say(f"error: {message} (see {self.prog} --help)")
        self.exit(USAGE)


# -- the JSON summary -----------------------------------------------------------------------------------------
def print_summary(
    command: str,
    exit_code: int = 0,
    *,
    output: str | Path | None = None,
    counts: dict[str, Any] | None = None,
    error: str | None = None,
    **fields: Any,
) -> int:
    """Print a run's summary as one JSON line, the last of stdout; return ``exit_code`` (for ``return``).

    ``error``: why a run that went to its end failed (problems left failed, a target missed): said as the
    error line on stderr too, so that every exit status 1 ends stderr with ``pacore: error: ...``."""
    if error is not None:
        say(f"error: {error}")
    _print_summary_line(command, exit_code, output, counts, error, fields)
    return exit_code


def _print_summary_line(
    command: str, exit_code: int, output: Any, counts: dict[str, Any] | None, error: str | None, fields: dict[str, Any]
) -> None:
    line = {
        "command": command,
        "exit_code": exit_code,
        "output": None if output is None else str(output),
        "counts": counts or {},
        **fields,
    }
    if error is not None:
        line["error"] = redact_credentials(error)
    sys.stdout.flush()
    print(json.dumps(line, default=str), flush=True)


def item_counts(total: int, failed: int, **more: Any) -> dict[str, Any]:
    """``counts`` of a command that runs a list of items: how many, how many done (now or before), failed."""
    return {"total": total, "done": total - failed, "failed": failed, **more}


def summarised(command: str) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """A run command whose run fails with an error still ends stdout with its summary: ``exit_code`` 1 and the
    ``error`` (a refused input, exit status 2, prints none: nothing ran). The command prints its own summary
    when it returns."""

    def decorate(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        @functools.wraps(func)
        def run(args: argparse.Namespace) -> int:
            try:
                return func(args)
            except REPORTED as exc:
                if exit_status(exc) == FAILED:  # the error line itself is run_parsed's
                    _print_summary_line(command, FAILED, getattr(args, "output", None), None, error_message(exc), {})
                raise

        return run

    return decorate


@contextlib.contextmanager
def extra_needed(command: str, extra: str) -> Iterator[None]:
    """Around a command's imports of an optional extra: a missing one is one line saying what to install."""
    try:
        yield
    except ImportError as exc:
        raise PaCoReError(
            f"{command} needs the {extra} extra: pip install -e '.[{extra}]' in the pacore-graph clone ({exc})"
        ) from None


# -- arguments ------------------------------------------------------------------------------------------------
def add_alias(parser: argparse.ArgumentParser, dest: str, *spellings: str, **kwargs: Any) -> None:
    """Old spellings of an option that still work (same ``dest``), left out of ``--help`` and the usage line."""
    parser.add_argument(*spellings, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)


def add_model_arguments(parser: argparse.ArgumentParser, *, role: str = "", api_key_option: str = "--api-key") -> None:
    """``--base-url``, ``--model`` and ``--api-key`` (or ``api_key_option``); none given: the embedded model.

    ``args.base_url`` is a list so that a repeated flag is refused (by
    :func:`~pacore_graph.models.configured_url`) rather than silently cut to its last URL. ``role`` (such as
    ``"responder"``) starts each help text, for a command that talks to more than one model."""
    lead = f"{role}: " if role else ""
    parser.add_argument(
        "--base-url",
        action="append",
        metavar="URL",
        help=f"{lead}OpenAI-compatible server, e.g. http://localhost:8000/v1 (replicas: vllm-router's URL, see "
        "serve-vllm); default: $OPENAI_BASE_URL, else the embedded SmolLM2-135M, started here (a tiny CPU model "
        "that exercises the plumbing, not one that answers well)",
    )
    parser.add_argument("--model", help=f"{lead}model name (default: the server's first model)")
    parser.add_argument(api_key_option, help=f"{lead}API key sent to the server (default: $OPENAI_API_KEY)")


def _preset_names(text: str) -> str:
    unknown = [name for name in text.split(",") if name.strip() and name.strip() not in PRESETS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown preset {unknown[0].strip()!r}: choose from {', '.join(PRESETS)}")
    return text


def add_schedule_arguments(parser: argparse.ArgumentParser, *, several: bool = False, default: str = "low") -> None:
    """``--preset`` / ``--rounds`` (one of them); ``several``: each may be repeated or comma-listed (a benchmark
    that runs several schedules), read with :func:`schedules_from_args`. ``default`` says what none means."""
    group = parser.add_mutually_exclusive_group()
    presets = "low [4], medium [16], high [32,4]"
    if several:
        group.add_argument(
            "--preset",
            action="append",
            type=_preset_names,
            metavar="NAME[,NAME]",
            help=f"PaCoRe presets {presets} (default: {default})",
        )
        group.add_argument(
            "--rounds",
            action="append",
            metavar="K1[,K2...]",
            help="a PaCoRe schedule such as 32,4; repeat the flag for several schedules",
        )
    else:
        group.add_argument("--preset", choices=list(PRESETS), help=f"PaCoRe preset: {presets} (default: {default})")
        group.add_argument("--rounds", help="trajectories per round, e.g. 32,4 (0: one plain call)")


def schedule_from_args(args: argparse.Namespace) -> list[int] | None:
    """The schedule of a command with ``add_schedule_arguments()``; None when neither flag was given."""
    if getattr(args, "rounds", None) is not None:
        return parse_rounds(args.rounds)
    if getattr(args, "preset", None):
        return list(PRESETS[args.preset])
    return None


def schedules_from_args(args: argparse.Namespace, default: Sequence[str]) -> list[list[int]]:
    """The schedules of a command with ``add_schedule_arguments(several=True)``; ``default``: preset names."""
    if args.rounds:
        return [parse_rounds(text) for text in args.rounds]
    names = [name for text in (args.preset or []) for name in comma_list(text)]
    return [list(PRESETS[name]) for name in names or default]


def comma_list(text: str) -> list[str]:
    """An option's comma-separated values, blanks dropped: ``"a, b,,c"`` is ``["a", "b", "c"]``."""
    return [part.strip() for part in text.split(",") if part.strip()]


def add_concurrency_argument(
    parser: argparse.ArgumentParser, help: str, *, default: int | None = None, aliases: Sequence[str] = ()
) -> None:
    """``--max-concurrency N`` (``PaCoReConfig.max_concurrency``'s name), with old spellings as hidden aliases."""
    parser.add_argument("--max-concurrency", type=int, default=default, metavar="N", help=help)
    if aliases:
        add_alias(parser, "max_concurrency", *aliases, type=int)


def add_output_argument(
    parser: argparse.ArgumentParser, help: str, *, default: str | None = None, required: bool = False
) -> None:
    """``--output DIR``: where the run writes (and, for a resumable run, where it is continued from)."""
    parser.add_argument("--output", metavar="DIR", default=default, required=required, help=help)


def add_run_arguments(
    parser: argparse.ArgumentParser,
    *,
    output: str | None,
    concurrency: str = "model calls (trajectories) in flight at most over the whole run (default 256)",
    concurrency_default: int | None = None,
    concurrency_aliases: Sequence[str] = (),
    max_tokens: str = "",
    several_schedules: bool = False,
    schedule_default: str = "low",
    output_default: str | None = None,
    output_required: bool = False,
    role: str = "",
    api_key_option: str = "--api-key",
) -> None:
    """The arguments every command that runs PaCoRe on a model takes, in one order: ``--base-url``, ``--model``,
    ``--api-key``, ``--preset`` / ``--rounds``, ``--max-concurrency``, ``--max-tokens`` and (``output``: its
    help; None: none) ``--output``."""
    from pacore_graph.models.embedded import EMBEDDED_MAX_TOKENS

    add_model_arguments(parser, role=role, api_key_option=api_key_option)
    add_schedule_arguments(parser, several=several_schedules, default=schedule_default)
    add_concurrency_argument(parser, concurrency, default=concurrency_default, aliases=concurrency_aliases)
    parser.add_argument(
        "--max-tokens",
        type=int,
        metavar="N",
        help=max_tokens or f"cap on each generated message (default: none; embedded model: {EMBEDDED_MAX_TOKENS})",
    )
    if output is not None:
        add_output_argument(parser, output, default=output_default, required=output_required)


def config_from_args(args: argparse.Namespace, **overrides: Any) -> PaCoReConfig:
    """A PaCoReConfig from --preset / --rounds and the optional sampling flags.

    The command owns its process, so full GC passes are spaced out during runs (``spaced_gc``).
    """
    fields: dict[str, Any] = {"spaced_gc": True}
    if (rounds := schedule_from_args(args)) is not None:
        fields["rounds"] = rounds
    for name in ("max_concurrency", "max_tokens", "temperature", "top_p", "seed", "context_window"):
        if getattr(args, name, None) is not None:
            fields[name] = getattr(args, name)
    fields.update(overrides)
    return PaCoReConfig(**fields)


def panel_from_args(args: argparse.Namespace) -> PanelFile | None:
    """The ``--panel`` file, read and checked; with it, ``--base-url`` / ``--model`` / the key flag are refused
    (each panel model names its own server, model and key variable)."""
    if not getattr(args, "panel", None):
        return None
    from pacore_graph.models.panel_file import read_panel_file

    upstream_key = "upstream_api_key" if args.command == "serve" else "api_key"  # serve's --api-key is its clients'
    for flag in ("base_url", "model", upstream_key):
        if getattr(args, flag, None):
            raise UsageError(
                f"--panel names each model's server, model and key variable: leave out --{flag.replace('_', '-')}"
            )
    return read_panel_file(args.panel)


def is_loopback(host: str) -> bool:
    """Whether a ``--host`` is this machine only (``localhost``, 127.0.0.0/8, ``::1``, also as ``[::1]``): a
    server bound elsewhere warns that others can reach it."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_port(port: int | None) -> None:
    """A port outside 1-65535 is refused before anything starts."""
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"--port {port} is not a TCP port (1-65535)")


# -- plugins --------------------------------------------------------------------------------------------------
def register_plugins(subparsers: Subcommands, plugins: Sequence[tuple[str, Callable[[], Any]]]) -> None:
    """Each plugin's commands: ``load()`` gives its ``register(subparsers)``. One that fails to load or register
    is named, with its error, in one line on stderr (its commands are not offered); the others still load."""
    for name, load in plugins:
        try:
            load()(subparsers)
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not take the other commands down
            warn(f"{name} failed to load, its commands are not offered: {type(exc).__name__}: {exc}")
