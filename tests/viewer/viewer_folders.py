"""Run folders of every kind the project writes, made by the project's own commands on real servers, for the
viewer's tests: ``pacore solve --output`` on the embedded model, ``RunFolder`` over a scripted server on loopback
(a hostile conclusion, a failed and a truncated trajectory), ``pacore bench math`` on the serving emulator,
``pacore bench multichallenge`` on its loopback mock, ``pacore swe run`` on a local task with a scripted
tool-calling model, and ``pacore swe eval`` of that run in Docker (written inside the run's folder)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
HOSTILE = '<script>window.pwned = 1</script><img src="x" onerror="window.pwned = 2"> so \\boxed{391}'
ROMAN = "pacore__roman-1"


def pacore(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_BASE_URL"}
    done = subprocess.run(
        [sys.executable, "-m", "pacore_graph.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"pacore {' '.join(args[:2])} failed:\n{done.stderr[-3000:]}"
    return done


def solve_folder(out: Path, base_url: str) -> Path:
    """One problem, [2] and a synthesis, on the embedded SmolLM2 (its server started by the session)."""
    pacore(
        "solve", "What is 17*23?", "--rounds", "2", "--max-tokens", "48", "--base-url", base_url, "--output", str(out)
    )
    return out


def hostile_reply(body: dict[str, Any], attempt: int) -> dict[str, Any] | int:
    """q1: three answers of 391 and one of 400, and its fourth request fails; hostile: every conclusion is HTML
    with a script; q3: a reply cut by the length limit. Syntheses agree on 391."""
    text = str(body["messages"][-1]["content"])
    if "Reference Responses" in text:
        return {"content": "Reading the references: \\boxed{391}."}
    if "hostile" in text:
        return {"content": f"{HOSTILE} (draft {attempt})"}
    if "17*23" in text:
        if attempt == 4:
            return 500
        return {"content": f"17*23 = \\boxed{{{400 if attempt == 2 else 391}}}"}
    if attempt == 1:
        return {"content": "The count goes on and on", "finish_reason": "length"}
    return {"content": "\\boxed{12}"}


def run_folder(out: Path, mock_server: Any) -> list[dict[str, Any]]:
    """Three problems through ``RunFolder`` over real HTTP; returns every request the server got."""
    from pacore_graph import PaCoReConfig, Problem, RunFolder
    from pacore_graph.config import RetryPolicy
    from pacore_graph.models.openai_compatible import OpenAICompatibleChatModel

    problems = [
        Problem("q1", [("system", "Answer in a box."), ("user", "What is 17*23?")]),
        Problem("hostile", "Say something hostile."),
        Problem("q3", "Count the lattice points."),
    ]
    config = PaCoReConfig(rounds=[4], retry=RetryPolicy(max_attempts=1))

    async def go(server: Any) -> None:
        model = OpenAICompatibleChatModel(base_url=server.base_url, model="mock-model")
        try:
            async with RunFolder(out, fingerprint={"model": "mock-model", "rounds": [4]}, progress=False) as folder:
                await folder.run(model, config, problems, concurrency=1)
        finally:
            await model.aclose()

    with mock_server(hostile_reply) as server:
        asyncio.run(go(server))
        return list(server.requests)


def math_data(path: Path, count: int = 6, solvable: int = 4) -> Path:
    """A small math dataset for the serving emulator: the gold answer of the first ``solvable`` problems is the
    answer most of the emulator's trajectories reach (so single, vote and PaCoRe score apart), the others' gold
    is one it never favours."""
    from pacore_benchmarks.math.data import Problem as MathProblem
    from pacore_emulator import EmulatorConfig
    from pacore_emulator.replies import majority_answer

    rows = []
    for number in range(1, count + 1):
        problem = MathProblem(id=f"toy-{number}", problem=f"Count the tilings of board number {number}.", answer="0")
        majority = majority_answer(EmulatorConfig(), problem.prompt())
        gold = majority if number <= solvable else (majority + 500) % 1000
        rows.append({"id": problem.id, "problem": problem.problem, "answer": str(gold)})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def math_folder(out: Path) -> Path:
    """``pacore bench math`` on the serving emulator: 6 problems, single, vote@4 and PaCoRe [4, 2], 2 samples."""
    from pacore_emulator import Emulator, EmulatorConfig

    data = math_data(out.parent / f"{out.name}-data.jsonl")
    with Emulator(EmulatorConfig(ttft=0.01, token_delay=0.0, output_tokens=(20, 60))) as emulator:
        pacore(
            "bench", "math", "--data", str(data), "--rounds", "4,2", "--samples", "2",
            "--base-url", emulator.base_url, "--no-progress", "--output", str(out),
        )  # fmt: skip
    return out


def multichallenge_folder(out: Path) -> Path:
    """``pacore bench multichallenge`` on its loopback mock (responder and judge): 4 conversations, [4]."""
    from multichallenge_mock import MockServer, write_data

    data = out.parent / f"{out.name}-data.jsonl"
    write_data(data, 4)
    with MockServer() as server:
        pacore(
            "bench", "multichallenge", "--data", str(data), "--base-url", server.url, "--rounds", "4",
            "--max-tokens", "32", "--output", str(out),
        )  # fmt: skip
    return out


def swe_folder(out: Path, mock_server: Any) -> Path:
    """``pacore swe run`` on the local task pacore__roman-1, [2] and a synthesis, episodes in local sandboxes,
    the model a scripted tool-calling server on loopback (tests/agents/test_swe_pacore.py's script)."""
    sys.path.insert(0, str(TESTS / "agents"))
    from test_swe_pacore import pacore_script

    from pacore_agents.swe.tasks import load_tasks

    row = load_tasks("local", instances=[ROMAN])[0]
    with mock_server(pacore_script(row["patch"])) as server:
        pacore(
            "swe", "run", "--dataset", "local", "--instances", ROMAN, "--base-url", server.base_url,
            "--model", "scripted", "--rounds", "2", "--runtime", "local", "--output", str(out),
        )  # fmt: skip
    return out


def swe_eval(run: Path) -> Path:
    """``pacore swe eval`` of the run's predictions in Docker, its logs written inside the run's folder."""
    out = run / "eval"
    pacore(
        "swe", "eval", "--dataset", "local", "--instances", ROMAN, "--predictions", str(run / "predictions.jsonl"),
        "--run-id", "check", "--output", str(out),
    )  # fmt: skip
    return out


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
