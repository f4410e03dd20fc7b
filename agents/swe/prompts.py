"""What a repair episode tells the model: the rules of the repository work, and the task itself.

Round 1 sends :func:`task_messages`; PaCoRe's later rounds replace only the user message (adding the
reference responses), so the system rules stay the same in every round.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from pacore_agents.swe.images import CONTAINER_WORKDIR

PaCoReProtocol = Literal["episodes", "per-call"]  # K whole episodes per round, or PaCoRe per model call
Runtime = Literal["docker", "local", "swerex"]

_RULES = """You are fixing an issue in a software repository {place}.
Work like a careful engineer: read the relevant code, reproduce the problem, edit the source files, and
check your fix. {commands} Do not change or add tests unless the issue asks you to;
the fix belongs in the source code. {references}"""

# Where the repository is and how each command runs, by runtime: what the sandbox really does.
_DOCKER_COMMANDS = (
    "Each command runs in a fresh `bash -lc` in {workdir} (no interactive programs, no network; "
    "edit files with sed, python or a here-document)."
)
_LOCAL_COMMANDS = (
    "Each command runs in a fresh `bash -c` (not a login shell), starting in the repository's root "
    "folder, a temporary copy whose path `pwd` prints: use paths relative to it (no interactive "
    "programs; edit files with sed, python or a here-document)."
)

# What the Reference Responses of a synthesis are, by protocol: whole attempts, or proposals for one step.
_REFERENCES: dict[str, str] = {
    "episodes": "If the task shows reference responses (patches from other attempts), none of them is applied "
    "to your checkout: judge them, then make and check your own fix.",
    "per-call": "If the task shows reference responses (other proposals for your next step, each made with "
    "the conversation so far), none of them has been run: judge them, then take the best next step yourself.",
}

_TOOL_RULES = """
Use the `bash` tool for every command. When the fix is done, call `submit` with a short note."""

_BLOCK_RULES = """
Reply with a short thought and exactly ONE command in a fenced block:

```bash
<command>
```

You will see its output in the next message. When the fix is done, write a short note on what you
changed, followed by a block holding only the word submit:

```bash
submit
```"""


def system_prompt(
    workdir: str = CONTAINER_WORKDIR,
    tool_calling: bool = True,
    protocol: PaCoReProtocol = "episodes",
    runtime: Runtime = "docker",
) -> str:
    """The rules, saying truthfully where the repository is and which shell runs each command: docker runs
    ``bash -lc`` in ``workdir``; the local runtime ``bash -c`` in a temporary copy whose path differs per episode."""
    if runtime == "local":
        place, commands = "checked out in a temporary folder", _LOCAL_COMMANDS
    else:
        place, commands = f"checked out at {workdir}", _DOCKER_COMMANDS.format(workdir=workdir)
    rules = _RULES.format(place=place, commands=commands, references=_REFERENCES[protocol])
    return rules + (_TOOL_RULES if tool_calling else _BLOCK_RULES)


def task_prompt(row: dict[str, Any]) -> str:
    """The user message of an episode: the problem statement only (never the hidden tests or patch)."""
    return (
        f"Repository: {row.get('repo', '?')}\n\n"
        f"<issue>\n{row['problem_statement'].strip()}\n</issue>\n\n"
        "Make the smallest change to the source files that resolves this issue."
    )


def task_messages(
    row: dict[str, Any],
    *,
    tool_calling: bool = True,
    protocol: PaCoReProtocol = "episodes",
    runtime: Runtime = "docker",
) -> list[BaseMessage]:
    """System rules plus the task: what round 1 sends; later rounds replace only the user message."""
    workdir = row.get("workdir") or CONTAINER_WORKDIR  # where a docker sandbox opens the row's repository
    return [SystemMessage(system_prompt(workdir, tool_calling, protocol, runtime)), HumanMessage(task_prompt(row))]
