"""Every public name keeps working where users import it from, whatever moves inside the package.

The lists are the public names as they stood before the package was regrouped into folders (issue 28); a
renamed name stays here under its old name (``OneTrajectory``, now ``Exploration``), as an alias.
"""

import importlib

import pytest

PUBLIC = {
    "pacore_graph": [
        "AgentExplorer", "EpisodeContext", "PaCoReChatModel", "PaCoReConfig", "PaCoReContext", "PaCoReError",
        "PaCoReMiddleware", "PaCoReNode", "PaCoReResult", "Problem", "RoundFailedError", "RunFolder", "asolve",
        "build_pacore_graph", "chat_model", "solve",
    ],
    "pacore_graph.extend": [
        "DEFAULT_TEMPLATE", "TEXT_GROUP", "EMBEDDED_CONTEXT", "EMBEDDED_MAX_TOKENS", "EMBEDDED_MODEL", "PRESETS",
        "SPACED_GC_FULL_PASS_THRESHOLD",
        "ROUTER_POLICY", "RSA_TEMPLATE", "AnswerFlag", "Budget", "BudgetExhaustedError", "ChatExplorer", "EarlyStop",
        "EmbeddedServer", "Explorer", "FolderInUse", "FolderLock", "ModelRequestError", "OneTrajectory",
        "OpenAICompatibleChatModel", "PaCoReRunner", "ProblemOutcome", "ResultsFile", "RetryPolicy", "RoundRecord",
        "RunProgress", "RunSummary", "ServerProcess", "SettingsMismatch", "Trajectory", "TrajectoryRecord",
        "add_model_arguments", "boxed_answer", "add_schedule_arguments", "check_server", "compact",
        "completion_tokens", "config_from_args", "configured_url", "count_tokens", "cut_middle", "discover_model",
        "extract_answer", "free_port", "is_transient", "majority_vote", "message_text", "open_checkpointer",
        "parse_rounds", "passed_on", "render_synthesis_prompt", "router_command", "run_sync", "rsa_config",
        "served_models", "strip_math_delimiters", "serving", "synthesis_messages", "thread_id", "with_retries",
        "write_json_atomically", "BackgroundServer", "create_app",
    ],
    "pacore_graph.coordination": [
        "RSA_TEMPLATE", "VERIFIER_TEMPLATE", "Budget", "EarlyStop", "VoteResult", "answer_key", "boxed_answer",
        "extract_answer", "last_boxed", "majority_vote",
    ],
    "pacore_graph.models": [
        "EmbeddedServer", "OpenAICompatibleChatModel", "chat_model", "check_server", "configured_url",
        "discover_model", "served_models", "serving",
    ],
    "pacore_graph.server": ["BackgroundServer", "ServerLimits", "create_app"],
    "pacore_graph.integrations": ["PaCoReChatModel", "PaCoReMiddleware"],
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_public_names_still_import(module):
    imported = importlib.import_module(module)
    missing = [name for name in PUBLIC[module] if not hasattr(imported, name)]
    assert not missing, f"{module} lost {missing}"
    if hasattr(imported, "__all__"):
        assert set(PUBLIC[module]) - {"BackgroundServer", "create_app"} <= set(imported.__all__)


def test_a_renamed_name_is_an_alias_of_its_new_name():
    from pacore_graph import extend

    assert extend.OneTrajectory is extend.Exploration
    assert "Exploration" in extend.__all__
