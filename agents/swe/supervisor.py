"""How a model's command runs outside a Docker container of pacore's own: under a small supervisor that travels
with the command. The SWE-ReX runtime sends it to the sandbox's server; the local runtime starts it on this host.

SWE-ReX's ``execute`` runs a program and hands back its whole output, with no cap and no care for what the
program leaves running; a plain subprocess is no better. So each model command runs as ``python -c SUPERVISOR
SPEC`` (on SWE-ReX, the interpreter of the server itself, which every SWE-ReX sandbox has; locally, pacore's):
it runs the command in ``bash -lc`` (``bash -c`` for the local runtime) under a deadline, keeps the first and
last halves of its output (counting the whole), caps every file it writes (``ulimit -f``), and, as the child
subreaper of everything the command starts (``setsid``, ``nohup`` and ``&`` jobs come back to it), ends them all
when the command ends (when its shell exits: a job left holding the output open does not keep it waiting),
then whatever still carries the sandbox's mark in its environment. It answers with one JSON line. Given its
parent's pid (the local runtime: pacore's), it also ends everything when that parent dies, even by SIGKILL.
The supervisor's code is sent with every command, so no command can replace it; a command that kills it loses
its output, and what it left is ended by the next sweep of the mark.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from pacore_agents.swe.sandbox import MAX_OUTPUT_BYTES, BoundedOutput, CommandResult, SystemResult

# SWE-bench images keep their Python in a conda env that only interactive shells activate (the images built
# here put a stand-in at the same path).
ENV_PRELUDE = (
    "if [ -f /opt/miniconda3/bin/activate ]; then . /opt/miniconda3/bin/activate; "
    "conda activate testbed >/dev/null 2>&1; fi"
)
MARK = "PACORE_SANDBOX"
KILL_GRACE_S = 5

SUPERVISOR = r"""
import base64, ctypes, json, os, resource, select, signal, subprocess, sys, time
spec = json.loads(sys.argv[1])
DRAIN_S = 0.5
me = os.getpid()
stopped = []
def children():
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                if fields[0] != "Z" and int(fields[1]) == me:
                    found.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return found
def marked():
    mark = ("\0%s=%s\0" % (spec["mark_name"], spec["mark"])).encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            try:
                with open(f"/proc/{entry}/environ", "rb") as handle:
                    if mark in b"\0" + handle.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found
def end_all():
    first = None
    for _ in range(300):
        pids = set(children()) | set(marked())
        first = len(pids) if first is None else first
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.01)
    return first or 0
signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
try:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    if spec.get("parent"):
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG: SIGTERM when the parent dies
except (AttributeError, OSError):
    pass  # not Linux: the process group is still killed, and the sandbox's mark still found
if spec.get("parent") and os.getppid() != spec["parent"]:
    sys.exit(143)  # the parent died before the parent-death signal was set
if spec.get("pidfile"):
    with open(spec["pidfile"], "w") as handle:
        handle.write(str(me))
if spec.get("stamp"):
    open(spec["stamp"], "w").close()
def limits():
    if spec["fsize"]:
        resource.setrlimit(resource.RLIMIT_FSIZE, (spec["fsize"], spec["fsize"]))
environment = dict(os.environ, **{spec["mark_name"]: spec["mark"]})
process = subprocess.Popen(
    ["bash", "-lc" if spec["login"] else "-c", spec["script"]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    stdin=subprocess.DEVNULL, cwd=spec["cwd"], env=environment, preexec_fn=limits, start_new_session=True,
)
half, keep_tail = spec["limit"] // 2, spec["keep"] == "ends"
head, tail, total, dropped = bytearray(), bytearray(), 0, 0
room = half if keep_tail else spec["limit"]
deadline = time.monotonic() + spec["timeout"]
timed_out = False
stream = process.stdout.fileno()
drain_until = None
while True:
    now = time.monotonic()
    left = deadline - now
    if left <= 0:
        timed_out = True
        break
    if stopped:
        break
    if drain_until is None and process.poll() is not None:
        drain_until = now + DRAIN_S  # the command is over: what it left running may hold the pipe open
    if drain_until is not None and now >= drain_until:
        break
    try:
        ready, _, _ = select.select([stream], [], [], min(left, 0.05 if drain_until else 0.2))
    except InterruptedError:
        continue
    if not ready:
        if drain_until is not None:
            break
        continue
    chunk = os.read(stream, 1 << 16)
    if not chunk:
        break
    total += len(chunk)
    take = max(room - len(head), 0)
    head += chunk[:take]
    chunk = chunk[take:]
    if chunk and keep_tail:
        tail += chunk
        if len(tail) > half:
            dropped += len(tail) - half
            del tail[: len(tail) - half]
    elif chunk:
        dropped += len(chunk)
if timed_out or stopped:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass
try:
    code = process.wait(timeout=5)
except subprocess.TimeoutExpired:
    code = -9
ended = end_all()
print(json.dumps({
    "exit": 124 if timed_out else code, "timed_out": timed_out, "stopped": bool(stopped), "total": total,
    "dropped": dropped, "ended": ended, "head": base64.b64encode(bytes(head)).decode(),
    "tail": base64.b64encode(bytes(tail)).decode(),
}))
"""


def supervised(
    python: str,
    command: str,
    *,
    cwd: str,
    timeout: float,
    mark: str,
    fsize: int = 0,
    limit: int = MAX_OUTPUT_BYTES,
    keep: str = "ends",
    stamp: str | None = None,
    pidfile: str | None = None,
    login: bool = True,
    parent: int | None = None,
) -> dict[str, Any]:
    """SWE-ReX's ``Command`` (as JSON) that runs ``command`` under the supervisor: ``command`` (the argv) and
    ``timeout``. ``login``: ``bash -lc`` with the images' environment activated, else a plain ``bash -c``;
    ``parent``: end everything when the process of this pid dies."""
    spec = {
        "script": f"exec 2>&1\n{ENV_PRELUDE}\n{command}" if login else command,
        "login": login,
        "parent": parent,
        "cwd": cwd,
        "timeout": max(timeout, 1),
        "limit": limit,
        "keep": keep,
        "fsize": fsize,
        "mark_name": MARK,
        "mark": mark,
        "stamp": stamp,
        "pidfile": pidfile,
    }
    return {"command": [python, "-c", SUPERVISOR, json.dumps(spec)], "timeout": timeout + KILL_GRACE_S + 30}


def read_report(answer: dict[str, Any]) -> dict[str, Any]:
    """The supervisor's JSON line, from the answer to :func:`supervised` (SWE-ReX's ``CommandResponse``: its
    ``stdout``, ``stderr``, ``exit_code``). When the supervisor did not report (the command killed it), a report
    of the exit status alone, marked ``lost``: sweep the sandbox's mark then (a supervised ``true`` does)."""
    try:
        report: dict[str, Any] = json.loads(answer.get("stdout", "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        code = answer.get("exit_code")
        return {"exit": 137 if code is None else code, "timed_out": False, "total": 0, "dropped": 0, "ended": 0,
                "head": "", "tail": "", "lost": True}  # fmt: skip
    return report


def ended_notes(report: dict[str, Any]) -> list[str]:
    """The notes saying what the supervisor ended, as the Docker runtime words it, and a lost output."""
    notes = []
    if report.get("lost"):
        notes.append("the command ended the supervisor pacore runs it under: its output is lost")
    if report.get("ended"):
        notes.append(
            f"{report['ended']} process(es) the command left running were stopped: nothing a command starts "
            "outlives it (run servers and background jobs inside the command that uses them)"
        )
    return notes


def command_result(report: dict[str, Any], notes: list[str]) -> CommandResult:
    """The command's result: its output's kept head and tail, the count of the whole, and ``notes`` at its end."""
    collected = BoundedOutput()
    collected.head = bytearray(base64.b64decode(report["head"]))
    collected.tail = bytearray(base64.b64decode(report["tail"]))
    collected.total, collected.dropped = report["total"], report["dropped"]
    return collected.result(int(report["exit"]), bool(report["timed_out"]), notes)


def system_command(script: str, *, cwd: str, scratch: str, stdin_file: str | None, timeout: float) -> dict[str, Any]:
    """SWE-ReX's ``Command`` for one of pacore's own scripts: ``bash -c`` (no login profile), stdout in base64
    (a patch's bytes come back exactly), stderr as text; ``stdin_file`` (base64) decoded and fed in."""
    feed = f'base64 -d "{stdin_file}"' if stdin_file else "true"
    wrapper = (
        f'cd "$1" || exit 97; export PACORE_SCRATCH="$2"; '
        f'{feed} | timeout -k 5 {timeout:g} bash -c "$3" | base64 -w0; exit "${{PIPESTATUS[1]}}"'
    )
    return {"command": ["bash", "-c", wrapper, "pacore-system", cwd, scratch, script], "timeout": timeout + 30}


def system_result(answer: dict[str, Any]) -> SystemResult:
    """A :class:`SystemResult` from SWE-ReX's answer to :func:`system_command`."""
    try:
        stdout = base64.b64decode(answer.get("stdout", ""))
    except ValueError:
        stdout = answer.get("stdout", "").encode()
    code = answer.get("exit_code")
    return SystemResult(
        exit_code=-1 if code is None else int(code), stdout=stdout, stderr=answer.get("stderr", "").encode()
    )
