"""The extension module: what benchmark and agent authors build on, beside the public API.

``pacore_graph`` runs PaCoRe (one problem, many problems resumably, inside a graph). This module holds the
parts a benchmark or an agent is made of that have no other public home. The rest of what they use is in the
public packages: ``pacore_graph.coordination`` (budgets, early stop, answers, votes), ``pacore_graph.models``
(model clients and servers), ``pacore_graph.server`` (the OpenAI-compatible endpoint) and
``pacore_graph.command_kit`` (the form of every ``pacore`` command). Every other module is internal.

Explorers (what produces one trajectory)
    ``Explorer`` the protocol (``async explore(messages, episode) -> Trajectory``); ``ChatExplorer`` one chat
    completion; ``Trajectory`` what an explorer returns. ``Exploration(explorer, messages, episode, config)``:
    one trajectory as the operator runs it (``await .explore(slot=...)`` with its retries and timeout,
    ``.record(outcome)`` with its token accounting), for single calls outside a PaCoRe run (a pool of
    first-round trajectories); ``passed_on(trajectory, config)``: the text the operator's next round would see
    of it (None: dropped). ``PaCoReRunner(model_or_explorer, config)``: the compiled operator ``asolve``
    builds for one run, kept to run many under one bound on the trajectories in flight.
Retries and errors
    ``RetryPolicy``, ``with_retries(attempt, policy, timeout, slot=...)``, ``ModelRequestError`` (``.status``,
    ``.retryable``); ``UsageError`` (what was given cannot be used); ``BudgetExhaustedError``; ``run_sync``
    (a sync wrapper's way to await: one background loop, cancelled on Ctrl-C).
Records (results as data)
    ``RoundRecord`` / ``TrajectoryRecord``: what ``PaCoReResult.rounds`` and ``RoundFailedError.round`` hold.
The batch engine's parts (see ``pacore_graph.RunFolder``)
    ``ProblemOutcome`` what ``row(outcome)`` receives; ``RunSummary``; ``RunProgress`` the one progress display;
    ``ResultsFile`` append-only JSONL rows; ``write_json_atomically``; ``FolderInUse`` (``.pid``),
    ``SettingsMismatch`` (``.differing``), ``FolderLock`` (the folder lock alone); ``open_checkpointer(folder)``
    and ``thread_id(...)`` for reading a folder's checkpoints.
Messages, schedules, answers
    ``message_text(message)``; ``cut_middle(text, head, tail)``; ``PRESETS``, ``parse_rounds("32,4")``;
    ``rsa_config`` (Recursive Self-Aggregation on the operator); what MathArena's non-strict rules read of an
    answer beside ``coordination.extract_answer``: ``strip_math_delimiters``, ``TEXT_GROUP``, ``AnswerFlag``.
Model servers, beside ``pacore_graph.models``
    ``EMBEDDED_MODEL`` / ``EMBEDDED_CONTEXT`` / ``EMBEDDED_MAX_TOKENS`` (the embedded model's name, window and
    reply cap); ``free_port()``; for vllm-router ``ServerProcess``, ``router_command``, ``ROUTER_POLICY``;
    ``SPACED_GC_FULL_PASS_THRESHOLD``: the GC threshold ``PaCoReConfig(spaced_gc=True)`` sets while runs are
    in flight (a benchmark gives the clients it compares the same).
"""

from pacore_graph.batch.fingerprint import SettingsMismatch
from pacore_graph.batch.folder import ProblemOutcome, RunSummary
from pacore_graph.batch.folder_lock import FolderInUse, FolderLock
from pacore_graph.batch.progress import RunProgress
from pacore_graph.batch.results_file import ResultsFile, write_json_atomically
from pacore_graph.batch.resume import open_checkpointer, thread_id
from pacore_graph.concurrency.retry import with_retries
from pacore_graph.concurrency.sync import run_sync
from pacore_graph.config import PRESETS, RetryPolicy, parse_rounds
from pacore_graph.coordination.answers import TEXT_GROUP, strip_math_delimiters
from pacore_graph.coordination.answers import Flag as AnswerFlag
from pacore_graph.coordination.rsa import rsa_config
from pacore_graph.errors import BudgetExhaustedError, ModelRequestError, UsageError
from pacore_graph.explorers.chat import ChatExplorer
from pacore_graph.explorers.protocol import Explorer
from pacore_graph.graph.exploration import Exploration, passed_on
from pacore_graph.graph.gc_policy import FULL_PASS_THRESHOLD as SPACED_GC_FULL_PASS_THRESHOLD
from pacore_graph.graph.runner import PaCoReRunner
from pacore_graph.models.embedded import DEFAULT_CONTEXT as EMBEDDED_CONTEXT
from pacore_graph.models.embedded import EMBEDDED_MAX_TOKENS, free_port
from pacore_graph.models.embedded import MODEL_ALIAS as EMBEDDED_MODEL
from pacore_graph.models.vllm_server import ROUTER_POLICY, ServerProcess, router_command
from pacore_graph.records import RoundRecord, Trajectory, TrajectoryRecord
from pacore_graph.synthesis.context_window import cut_middle
from pacore_graph.synthesis.prompt import message_text

__all__ = [
    # explorers
    "ChatExplorer",
    "Exploration",
    "Explorer",
    "PaCoReRunner",
    "Trajectory",
    "passed_on",
    # retries and errors
    "BudgetExhaustedError",
    "ModelRequestError",
    "RetryPolicy",
    "UsageError",
    "run_sync",
    "with_retries",
    # records
    "RoundRecord",
    "TrajectoryRecord",
    # the batch engine's parts
    "FolderInUse",
    "FolderLock",
    "ProblemOutcome",
    "ResultsFile",
    "RunProgress",
    "RunSummary",
    "SettingsMismatch",
    "open_checkpointer",
    "thread_id",
    "write_json_atomically",
    # messages, schedules, answers
    "PRESETS",
    "TEXT_GROUP",
    "AnswerFlag",
    "cut_middle",
    "message_text",
    "parse_rounds",
    "rsa_config",
    "strip_math_delimiters",
    # model servers
    "EMBEDDED_CONTEXT",
    "EMBEDDED_MAX_TOKENS",
    "EMBEDDED_MODEL",
    "ROUTER_POLICY",
    "SPACED_GC_FULL_PASS_THRESHOLD",
    "ServerProcess",
    "free_port",
    "router_command",
]
