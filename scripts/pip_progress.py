"""Run ``pip install ...`` and show a person what it is doing: each package it collects, the compile steps of a
package built from source (llama-cpp-python: several minutes on 2 cores), and a line at least every 30 s.

pip's own output is either silent for minutes (``-q``, or a spinner that a pipe does not show) or thousands of
compiler command lines (``-v``); this keeps pip's verbose output in a log file and prints a short account of it.
On failure it prints the log's tail and where the whole log is. Standard library only: it runs before the
project's venv has anything in it.

    python3 scripts/pip_progress.py LOG_FILE PYTHON -m pip install ...
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

STEP = re.compile(rb"^\s*\[(\d+)/(\d+)\]")  # ninja's "[12/150] ..." (scikit-build-core's verbose build)
COLLECTING = re.compile(rb"^Collecting (\S+)")
BUILDING = re.compile(rb"^\s*Building wheel for (\S+)")
INSTALLED = re.compile(rb"^Successfully installed (.*)")
HEARTBEAT_S = 30.0
STEP_EVERY_S = 10.0


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    log_path, command = argv[0], argv[1:]
    if "-v" not in command:
        command = [*command, "-v"]
    started = time.monotonic()
    last_said = [started]
    lock = threading.Lock()

    def say(text: str) -> None:
        with lock:
            minutes, seconds = divmod(int(time.monotonic() - started), 60)
            print(f"  [{minutes:2d}:{seconds:02d}] {text}", flush=True)
            last_said[0] = time.monotonic()

    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(5):
            if time.monotonic() - last_said[0] >= HEARTBEAT_S:
                say("still working (full output: " + log_path + ")")

    threading.Thread(target=heartbeat, daemon=True).start()
    collected = 0
    last_step = 0.0
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            if found := COLLECTING.match(line):
                collected += 1
                say(f"collecting {found.group(1).decode(errors='replace')} ({collected} so far)")
            elif found := BUILDING.match(line):
                say(f"building {found.group(1).decode(errors='replace')} from source")
            elif found := STEP.match(line):
                step, steps = int(found.group(1)), int(found.group(2))
                if time.monotonic() - last_step >= STEP_EVERY_S or step == steps:
                    last_step = time.monotonic()
                    say(f"compiling: step {step} of {steps}")
            elif found := INSTALLED.match(line):
                say(f"installed {len(found.group(1).split())} packages")
        code = process.wait()
    done.set()
    if code != 0:
        with open(log_path, "rb") as log:
            tail = log.read().decode(errors="replace").splitlines()[-40:]
        print("\n".join(tail), file=sys.stderr)
        print(f"pip failed (exit {code}); its whole output: {log_path}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
