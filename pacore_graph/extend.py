"""The extension module: what benchmark and agent authors build on, beside the public API.

``pacore_graph`` runs PaCoRe (one problem, many problems resumably, inside a graph). This module holds
the parts a benchmark or an agent is made of; ``benchmarks/`` and ``agents/`` use these two modules only.
Every other module of the package is internal and may change.

Explorers (what produces one trajectory)
    ``Explorer`` the protocol (``async explore(messages, episode) -> Trajectory``); ``ChatExplorer`` one
    chat completion; ``Trajectory`` what an explorer returns. ``Exploration(explorer, messages, episode,
    config)`` (its old name ``OneTrajectory`` still works): one trajectory as the operator runs it
    (``await .explore(slot=...)`` with its retries and timeout, ``.record(outcome)`` with its token
    accounting), for single calls outside a PaCoRe run (a pool of first-round trajectories);
    ``passed_on(trajectory, config)``: the text the operator's next round would see of it (None: dropped).
    ``PaCoReRunner(model_or_explorer, config)``: the compiled operator that
    ``asolve`` builds for one run, kept to run many (``await .arun(messages, runnable_config, ...)``) under one
    bound on the trajectories in flight (``config.max_concurrency``), e.g. a PaCoRe run per agent step.
Retries and transient errors
    ``RetryPolicy``, ``with_retries(attempt, policy, timeout, slot=...)``, ``is_transient(exc)`` (decided
    by the error's class), ``ModelRequestError`` (``.status``, ``.retryable``); ``run_sync(coroutine)``
    (a sync wrapper's way to await: one background loop, cancelled on Ctrl-C).
Coordination options (``pacore_graph.coordination``; every one off by default)
    ``Budget``, ``EarlyStop`` (``PaCoReConfig.budget`` / ``.early_stop``), ``BudgetExhaustedError``,
    ``rsa_config`` and ``RSA_TEMPLATE`` (Recursive Self-Aggregation on the operator); the
    answer a conclusion commits to, read by MathArena's non-strict rules: ``extract_answer``,
    ``boxed_answer``, ``strip_math_delimiters``, ``TEXT_GROUP``, ``AnswerFlag``; ``majority_vote``.
Token accounting
    ``completion_tokens(reported, content, reasoning)`` (server usage first, else a count) and
    ``count_tokens(text)``, each giving ``(tokens, approximate)``. ``SPACED_GC_FULL_PASS_THRESHOLD``: the oldest
    generation's GC threshold that ``PaCoReConfig(spaced_gc=True)`` sets while runs are in flight (a benchmark
    gives the clients it compares the same).
Records (results as data)
    ``RoundRecord`` / ``TrajectoryRecord``: what ``PaCoReResult.rounds`` and ``RoundFailedError.round`` hold;
    ``finished_rounds(state)``: the rounds (plain data, each with its records) of a PaCoRe graph's state.
The batch engine's parts (see ``pacore_graph.RunFolder``)
    ``ProblemOutcome`` what ``row(outcome)`` receives; ``RunSummary``; ``RunProgress`` the one progress display
    (rich, stderr); ``ResultsFile`` append-only JSONL rows; ``write_json_atomically``; the folder's errors
    ``FolderInUse`` (``.pid``) and ``SettingsMismatch`` (``.differing``), ``FolderLock`` (the folder lock alone,
    for a command that writes into a folder without the engine); ``open_checkpointer(folder)`` and
    ``thread_id(...)`` for reading a folder's checkpoints.
Messages and text
    ``message_text(message)``; ``compact(content, reasoning, finish_reason)`` (a message's conclusion);
    ``cut_middle(text, head, tail)`` (keep head and tail, say how much was cut); ``synthesis_messages``,
    ``render_synthesis_prompt`` and ``DEFAULT_TEMPLATE`` (the paper's Table 6).
Schedules and command lines (the command kit, ``pacore_graph.command_kit``: every ``pacore`` command's form)
    ``PRESETS``, ``parse_rounds("32,4")``. Arguments: ``add_run_arguments`` (``--base-url``/``--model``/
    ``--api-key``, ``--preset``/``--rounds``, ``--max-concurrency``, ``--max-tokens``, ``--output``) or its parts
    ``add_model_arguments``, ``add_schedule_arguments`` (read by ``schedule_from_args``, or by
    ``schedules_from_args`` for several), ``add_concurrency_argument``, ``add_output_argument``; ``add_alias``
    (an old spelling, hidden); ``config_from_args``; ``check_port``. Errors: ``UsageError`` (exit status 2: what
    was given cannot be used; any ``ValueError`` counts as one), any other error of a run exit status 1, each
    one line ``pacore: error: ...`` (``report_error``, ``run_parsed``, ``run_command_line``; ``CommandParser``
    for argparse's own); ``say`` / ``warn`` (stderr lines). The JSON summary, the last stdout line of a run
    command: ``print_summary``, ``item_counts``, ``summarised`` (a failed run's summary too).
    ``register_plugins`` (a plugin that fails to load is named).
Model servers
    ``serving(base_url, model, api_key)`` (a client for a block; starts the embedded model when no URL is
    given), ``configured_url`` (the URL given, else ``OPENAI_BASE_URL``; several are refused),
    ``check_server(model)`` (the server answers and serves the model), ``served_models(url)`` and
    ``discover_model(url)`` (its first), ``OpenAICompatibleChatModel`` (the client class),
    ``EmbeddedServer``, ``EMBEDDED_MODEL`` / ``EMBEDDED_CONTEXT`` / ``EMBEDDED_MAX_TOKENS`` (its default reply
    cap), ``free_port()``; for vllm-router:
    ``ServerProcess``, ``router_command``, ``ROUTER_POLICY``.
The OpenAI-compatible endpoint (``pacore serve``; needs the ``server`` extra, so imported when asked for)
    ``create_app``, ``BackgroundServer``.
"""

from typing import TYPE_CHECKING, Any

from pacore_graph.batch.fingerprint import SettingsMismatch
from pacore_graph.batch.folder import ProblemOutcome, RunSummary
from pacore_graph.batch.folder_lock import FolderInUse, FolderLock
from pacore_graph.batch.progress import RunProgress
from pacore_graph.batch.results_file import ResultsFile, write_json_atomically
from pacore_graph.batch.resume import open_checkpointer, thread_id
from pacore_graph.command_kit import (
    CommandParser,
    add_alias,
    add_concurrency_argument,
    add_model_arguments,
    add_output_argument,
    add_run_arguments,
    add_schedule_arguments,
    check_port,
    config_from_args,
    item_counts,
    print_summary,
    register_plugins,
    report_error,
    run_command_line,
    run_parsed,
    say,
    schedule_from_args,
    schedules_from_args,
    summarised,
    warn,
)
from pacore_graph.concurrency.retry import with_retries
from pacore_graph.concurrency.sync import run_sync
from pacore_graph.config import PRESETS, RetryPolicy, parse_rounds
from pacore_graph.coordination import RSA_TEMPLATE, Budget, EarlyStop, boxed_answer, extract_answer, majority_vote
from pacore_graph.coordination.answers import TEXT_GROUP, strip_math_delimiters
from pacore_graph.coordination.answers import Flag as AnswerFlag
from pacore_graph.coordination.rsa import rsa_config
from pacore_graph.errors import BudgetExhaustedError, ModelRequestError, UsageError, is_transient
from pacore_graph.explorers.chat import ChatExplorer
from pacore_graph.explorers.protocol import Explorer
from pacore_graph.graph.exploration import Exploration, passed_on
from pacore_graph.graph.gc_policy import FULL_PASS_THRESHOLD as SPACED_GC_FULL_PASS_THRESHOLD
from pacore_graph.graph.runner import PaCoReRunner, finished_rounds
from pacore_graph.models import (
    EmbeddedServer,
    OpenAICompatibleChatModel,
    check_server,
    configured_url,
    discover_model,
    served_models,
    serving,
)
from pacore_graph.models.embedded import DEFAULT_CONTEXT as EMBEDDED_CONTEXT
from pacore_graph.models.embedded import EMBEDDED_MAX_TOKENS, free_port
from pacore_graph.models.embedded import MODEL_ALIAS as EMBEDDED_MODEL
from pacore_graph.models.vllm_server import ROUTER_POLICY, ServerProcess, router_command
from pacore_graph.records import RoundRecord, Trajectory, TrajectoryRecord
from pacore_graph.synthesis.compaction import compact
from pacore_graph.synthesis.context_window import cut_middle
from pacore_graph.synthesis.prompt import DEFAULT_TEMPLATE, message_text, render_synthesis_prompt, synthesis_messages
from pacore_graph.synthesis.tokens import completion_tokens, count_tokens

if TYPE_CHECKING:  # a type checker sees them; at run time they are imported on first use (below)
    from pacore_graph.server import BackgroundServer as BackgroundServer
    from pacore_graph.server import create_app as create_app

OneTrajectory = Exploration  # the name before Exploration, kept for existing callers

__all__ = [
    "DEFAULT_TEMPLATE",
    "TEXT_GROUP",
    "EMBEDDED_CONTEXT",
    "EMBEDDED_MAX_TOKENS",
    "SPACED_GC_FULL_PASS_THRESHOLD",
    "EMBEDDED_MODEL",
    "PRESETS",
    "ROUTER_POLICY",
    "RSA_TEMPLATE",
    "AnswerFlag",
    "Budget",
    "BudgetExhaustedError",
    "ChatExplorer",
    "EarlyStop",
    "EmbeddedServer",
    "Exploration",
    "Explorer",
    "FolderInUse",
    "FolderLock",
    "ModelRequestError",
    "OneTrajectory",
    "OpenAICompatibleChatModel",
    "PaCoReRunner",
    "ProblemOutcome",
    "ResultsFile",
    "RetryPolicy",
    "RoundRecord",
    "finished_rounds",
    "RunProgress",
    "RunSummary",
    "ServerProcess",
    "SettingsMismatch",
    "Trajectory",
    "TrajectoryRecord",
    "add_model_arguments",
    "boxed_answer",
    "add_schedule_arguments",
    "check_server",
    "compact",
    "completion_tokens",
    "config_from_args",
    "configured_url",
    "count_tokens",
    "cut_middle",
    "discover_model",
    "extract_answer",
    "free_port",
    "is_transient",
    "majority_vote",
    "message_text",
    "open_checkpointer",
    "parse_rounds",
    "passed_on",
    "render_synthesis_prompt",
    "router_command",
    "run_sync",
    "rsa_config",
    "served_models",
    "strip_math_delimiters",
    "serving",
    "synthesis_messages",
    "thread_id",
    "with_retries",
    "write_json_atomically",
    "CommandParser",
    "add_alias",
    "add_concurrency_argument",
    "add_output_argument",
    "add_run_arguments",
    "check_port",
    "item_counts",
    "print_summary",
    "register_plugins",
    "report_error",
    "run_command_line",
    "run_parsed",
    "say",
    "schedule_from_args",
    "schedules_from_args",
    "summarised",
    "warn",
    "UsageError",
]


def __getattr__(name: str) -> Any:
    """The endpoint's names, imported on first use: it needs the optional ``server`` extra."""
    if name in ("BackgroundServer", "create_app"):
        from pacore_graph import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
