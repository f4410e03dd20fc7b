"""mini-swe-agent with PaCoRe on every model call, through ``pacore serve``: the paper's SWE-bench protocol.

    pacore serve --base-url http://localhost:8000/v1 --preset low        # in front of vLLM (or vllm-router)
    python examples/mini_swe_agent.py --endpoint http://127.0.0.1:8100/v1 \\
        --model pacore-low/stepfun-ai/PaCoRe-8B --task pacore__roman-1

    pacore serve                                                         # in front of the embedded model
    python examples/mini_swe_agent.py --model pacore-low/smollm2-135m-instruct --step-limit 3

mini-swe-agent (PyPI ``mini-swe-agent``) talks to models through litellm: ``openai/<model>`` with an
``api_base`` makes litellm a plain OpenAI client of the endpoint, and the model name picks the PaCoRe
schedule (``pacore-low/NAME``, ``pacore-rounds-32x4/NAME``). Nothing in the agent knows about PaCoRe:
each of its steps is one chat completion, answered by K trajectories plus a synthesis upstream.

The agent uses mini-swe-agent's tool-calling SWE-bench prompts and its *local* environment: its commands
run on this host, in a temporary git copy of one of this project's local SWE tasks (no Docker). Use it
only with models you trust. Prints a JSON summary: exit status, the submitted patch, and each model call's
usage (``completion_tokens`` is PaCoRe's effective TTC; ``usage.pacore.rounds`` its per-round breakdown), and
``error``: why the episode stopped early, in one line (e.g. the conversation outgrew the model's context), also
printed on stderr.
The summary is stdout's only content (what the libraries print goes to stderr), so it can be piped to ``jq``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm would fetch its price list at import
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")  # mini-swe-agent prints a banner on stdout at import

import yaml  # noqa: E402  (after the environment above: litellm reads it at import)
from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.config import get_config_path  # noqa: E402
from minisweagent.environments.local import LocalEnvironment  # noqa: E402
from minisweagent.models.litellm_model import LitellmModel  # noqa: E402

from pacore_agents.swe.local_sandbox import LocalSandbox  # noqa: E402
from pacore_agents.swe.tasks import load_tasks  # noqa: E402


def run_agent(
    endpoint: str, model: str, task: dict, *, api_key: str, step_limit: int, trajectory: Path | None
) -> dict[str, Any]:
    """One mini-swe-agent episode on ``task`` through the endpoint; the summary described above."""
    config = yaml.safe_load(get_config_path("swebench.yaml").read_text())
    sandbox = LocalSandbox(task)  # a temporary git copy of the task's repository at its base commit
    try:
        agent_config = {**config["agent"], "step_limit": step_limit, "cost_limit": 0, "output_path": trajectory}
        agent_config["instance_template"] = agent_config["instance_template"].replace("/testbed", sandbox.workdir)
        # BASH_ENV activates conda in SWE-bench's images; on this host it would source your own ~/.bashrc
        environment = {k: v for k, v in config["environment"]["env"].items() if k != "BASH_ENV"}
        agent = DefaultAgent(
            LitellmModel(
                model_name=f"openai/{model}",
                model_kwargs={"api_base": endpoint, "api_key": api_key, "drop_params": True},
                cost_tracking="ignore_errors",  # litellm has no price for a local model
                observation_template=config["model"]["observation_template"],
                format_error_template=config["model"]["format_error_template"],
            ),
            LocalEnvironment(cwd=sandbox.workdir, timeout=60, env=environment),
            **agent_config,
        )
        error = None
        try:
            outcome = agent.run(task["problem_statement"])
        except Exception as exc:  # noqa: BLE001 - e.g. the conversation outgrew the model's context (HTTP 400)
            # mini-swe-agent recorded it as the episode's exit (exit_status, exception_str); one line is enough
            outcome = agent.messages[-1].get("extra", {}) if agent.messages else {"exit_status": type(exc).__name__}
            error = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:1000]}"
    finally:
        sandbox.close()
    # every model call left its response on a message: the assistant's, or the format error that replaced it
    calls = [
        message["extra"]["response"]["usage"] for message in agent.messages if "response" in message.get("extra", {})
    ]
    return {
        "instance_id": task["instance_id"],
        "exit_status": outcome.get("exit_status"),
        "submission": outcome.get("submission", ""),
        "model_calls": len(calls),
        "completion_tokens": sum(usage["completion_tokens"] for usage in calls),
        "usage": calls,
        "error": error,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", default="http://127.0.0.1:8100/v1", help="pacore serve's base URL")
    parser.add_argument("--model", required=True, help="e.g. pacore-low/stepfun-ai/PaCoRe-8B")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("PACORE_API_KEY", "none"),
        help="the endpoint's --api-key (default: $PACORE_API_KEY)",
    )
    parser.add_argument("--task", default="pacore__roman-1", help="instance id of a local SWE task")
    parser.add_argument("--step-limit", type=int, default=30, help="model calls at most")
    parser.add_argument("--trajectory", type=Path, help="also save mini-swe-agent's trajectory JSON here")
    args = parser.parse_args(argv)
    (task,) = load_tasks("local", instances=[args.task])
    # stdout carries the JSON summary alone: litellm and mini-swe-agent print banners and progress on it
    with contextlib.redirect_stdout(sys.stderr):
        summary = run_agent(
            args.endpoint,
            args.model,
            task,
            api_key=args.api_key,
            step_limit=args.step_limit,
            trajectory=args.trajectory,
        )
    print(json.dumps(summary, indent=2))
    if summary["error"]:
        print(f"mini_swe_agent: the episode stopped: {summary['error']}", file=sys.stderr)
    return 0 if summary["exit_status"] == "Submitted" else 1


if __name__ == "__main__":
    sys.exit(main())
