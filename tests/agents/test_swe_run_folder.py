"""Two `pacore swe run` into one folder at once: the second refuses in one line and spends nothing.

The first run serves one local task (--runtime local, --rounds 1) from a scripted tool-calling model on
loopback that holds every request until the test releases it, so the first run is certainly in flight
(holding the folder's lock) while the second starts. The second must exit at once with one line naming
the folder as in use, without a model request; the first then finishes and writes its one prediction.
"""

from __future__ import annotations

import json
import subprocess
import sys

from test_swe_pacore import ROMAN, pacore_script
from test_swe_resume import ROOT, HoldingServer, release_at_exit
from waits import still_running, wait_until

from pacore_agents.swe.run import PREDICTIONS_FILE


def test_a_second_run_into_a_folder_in_use_refuses_in_one_line(tmp_path):
    from pacore_agents.swe.tasks import load_tasks

    row = load_tasks("local", instances=[ROMAN])[0]
    out = tmp_path / "run"
    server = HoldingServer(pacore_script(row["patch"]), hold=lambda body: True)
    with server, release_at_exit(server):
        args = [
            "swe",
            "run",
            "--dataset",
            "local",
            "--instances",
            ROMAN,
            "--base-url",
            server.base_url,
            "--model",
            "scripted",
            "--rounds",
            "1",
            "--runtime",
            "local",
            "--output",
            str(out),
        ]
        first = subprocess.Popen(
            [sys.executable, "-m", "pacore_graph.cli", *args], cwd=ROOT, stderr=subprocess.PIPE, text=True
        )
        try:
            wait_until(lambda: still_running(first, "the first run") and server.held >= 1, 60, what="a first request")
            command = [sys.executable, "-m", "pacore_graph.cli", *args]  # a refusal is quick; a wait is a failure
            second = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
            held = server.held
            server.release.set()
            first_stderr = first.communicate(timeout=120)[1]
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()

    lines = second.stderr.strip().splitlines()
    assert second.returncode == 1 and len(lines) == 1 and lines[0].startswith("pacore: error: "), second.stderr[-2000:]
    assert "is in use by another run" in lines[0] and f"pid {first.pid}" in lines[0]
    assert held == 1, "the refused run sent no model request"
    assert first.returncode == 0, first_stderr[-3000:]
    (prediction,) = [json.loads(line) for line in (out / PREDICTIONS_FILE).read_text().splitlines()]
    assert prediction == {"instance_id": ROMAN, "model_name_or_path": "scripted", "model_patch": row["patch"]}
