"""``pacore solve --output`` on real vLLM, as a user types it: the run, Ctrl-C in round 2 and the same command
again (round 1 is not bought twice), then once more (the answer read back, nothing sent)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from real_vllm import MODEL, REPLY_CAP


def done_requests(vllm) -> float:
    """Requests vLLM finished with a reply (stop or length), not aborted ones."""
    found = vllm.metrics()
    return found.get("vllm:request_success_total{stop}", 0) + found.get("vllm:request_success_total{length}", 0)


def test_solve_output_resumes_after_ctrl_c_without_buying_round_one_again(vllm, tmp_path: Path):
    vllm.wait_idle()
    out = tmp_path / "run"
    pacore = str(Path(sys.executable).parent / "pacore")
    command = [
        pacore,
        "solve",
        "Name three prime numbers and add them up.",
        "--base-url",
        vllm.base_url,
        "--model",
        MODEL,
        "--rounds",
        "3,3",
        "--max-tokens",
        str(REPLY_CAP),
        "--output",
        str(out),
    ]
    start = done_requests(vllm)
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (done_requests(vllm) - start >= 3 and vllm.metrics().get("vllm:num_requests_running", 0) > 0):
        assert first.poll() is None and time.monotonic() < deadline, "round 2 never started"
        time.sleep(0.05)
    first.send_signal(signal.SIGINT)  # Ctrl-C while round 2 runs
    _, err = first.communicate(timeout=60)
    assert first.returncode == 130, err
    vllm.wait_idle()
    bought = done_requests(vllm) - start
    assert 3 <= bought < 7

    second = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    summary = json.loads(second.stdout.splitlines()[-1])
    assert summary["counts"]["done"] == 1 and summary["answer"] and second.stdout.startswith(summary["answer"])
    assert done_requests(vllm) - start == 3 + 3 + 1  # every finished trajectory bought once

    before = done_requests(vllm)
    third = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert third.returncode == 0 and third.stdout == second.stdout and "answered before" in third.stderr
    assert done_requests(vllm) == before
