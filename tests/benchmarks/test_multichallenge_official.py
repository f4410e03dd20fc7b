"""The official MultiChallenge judge, end to end: ``pacore bench multichallenge`` against two mock OpenAI
servers (responder, judge). Every judge request must equal, byte for byte once keys are sorted, the request
the official evaluator's client (the openai SDK's ``beta.chat.completions.parse`` with the official
``JudgeResponse``) sends for the same response and TARGET_QUESTION, built from the official prompt text
kept in ``fixtures/multichallenge/official_judge_prompt.txt``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

from openai import OpenAI
from pydantic import BaseModel

from pacore_benchmarks.multichallenge.cli import cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "multichallenge"
DATA = FIXTURES / "benchmark_questions.jsonl"
OFFICIAL_PROMPT = (FIXTURES / "official_judge_prompt.txt").read_text(encoding="utf-8")
OFFICIAL_MODEL = "gpt-4o-2024-08-06"


class JudgeResponse(BaseModel):  # the official one (src/evaluator.py); a docstring would enter its schema
    reasoning: str
    verdict: Literal["YES", "NO"]


def responder(body: dict, attempt: int) -> dict:
    digest = hashlib.sha256(body["messages"][-1]["content"].encode()).hexdigest()[:8]
    return {"content": f"Here is my answer ({digest}).\nIt keeps every constraint you gave."}


def judge(body: dict, attempt: int) -> dict:
    content = body["messages"][-1]["content"]
    verdict = "YES" if int(hashlib.sha256(content.encode()).hexdigest(), 16) % 2 else "NO"
    return {"content": json.dumps({"reasoning": "Checked strictly against the criteria.", "verdict": verdict})}


def _rows(output: Path) -> list[dict]:
    return [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines()]


def _canonical(body: dict) -> str:
    return json.dumps(body, sort_keys=True)


def test_default_judge_requests_are_the_official_ones(mock_server, tmp_path, capsys):
    output = tmp_path / "out"
    with mock_server(responder, model="mock-responder") as answers, mock_server(judge, model=OFFICIAL_MODEL) as grader:
        code = cli(
            ["--data", str(DATA), "--limit", "3", "--rounds", "0", "--output", str(output)]
            + ["--base-url", answers.base_url, "--model", "mock-responder", "--api-key", "sk-responder"]
            + ["--judge-base-url", grader.base_url, "--judge-model", OFFICIAL_MODEL, "--judge-api-key", "sk-judge"]
        )
        printed = capsys.readouterr()
        assert code == 0, printed.out + printed.err
        ours = list(grader.requests)
        rows = _rows(output)
        assert len(ours) == len(rows) == 3
        # What the official evaluator sends for the same (response, TARGET_QUESTION), to the same server.
        client = OpenAI(api_key="sk-judge", base_url=grader.base_url)
        for row in rows:
            prompt = OFFICIAL_PROMPT.format(row["response"], row["target_question"])
            client.beta.chat.completions.parse(
                model=OFFICIAL_MODEL,
                messages=[{"role": "user", "content": prompt}],
                temperature=float(0),
                response_format=JudgeResponse,
            )
        official = grader.requests[len(ours) :]
    assert sorted(map(_canonical, ours)) == sorted(map(_canonical, official))
    expected = sorted(OFFICIAL_PROMPT.format(row["response"], row["target_question"]) for row in rows)
    assert sorted(body["messages"][0]["content"] for body in ours) == expected
    for body in ours:
        assert [message["role"] for message in body["messages"]] == ["user"]
        assert "Be VERY STRICT!" in body["messages"][0]["content"] and "<CRITERIA>" in body["messages"][0]["content"]
        assert body["temperature"] == 0 and "max_tokens" not in body
        assert body["response_format"]["json_schema"]["schema"]["required"] == ["reasoning", "verdict"]
    assert set(grader.keys) == {"sk-judge"} and set(answers.keys) == {"sk-responder"}
    for row in rows:
        assert row["judge_format"] == "json_schema" and row["verdict"] in ("YES", "NO")
        assert row["passed"] == (row["verdict"] == row["pass_criteria"])
        assert row["judge_reasoning"] == "Checked strictly against the criteria."

    # The judge is recorded in the results settings and the report; its key is written nowhere.
    settings = json.loads((output / "run.json").read_text())["settings"]
    assert settings["judge_base_url"] == grader.base_url and settings["judge_model"] == OFFICIAL_MODEL
    assert settings["judge_prompt"] == "official"
    report = (output / "report.md").read_text()
    assert f"Judge: `{OFFICIAL_MODEL}` at {grader.base_url}, the official MultiChallenge judge prompt" in report
    assert "structured output json_schema (3 rows)" in report
    assert "warning" not in printed.err.lower() and "Warning" not in report
    for path in output.iterdir():
        if path.suffix in (".json", ".md", ".jsonl"):
            assert "sk-judge" not in path.read_text() and "sk-responder" not in path.read_text()


def test_a_judge_that_is_the_responder_is_warned_about_loudly(mock_server, tmp_path, capsys):
    def both(body: dict, attempt: int) -> dict:
        return judge(body, attempt) if "<MODEL_RESPONSE>" in body["messages"][-1]["content"] else responder(body, 1)

    output = tmp_path / "out"
    with mock_server(both, model="one-model") as server:
        code = cli(
            ["--data", str(DATA), "--limit", "2", "--rounds", "0", "--base-url", server.base_url]
            + ["--output", str(output)]
        )
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    assert "pacore: warning: the judge is the responder itself" in " ".join(printed.err.split())
    assert "not comparable with published MultiChallenge figures" in " ".join(printed.out.split())
    report = (output / "report.md").read_text()
    assert "**Warning:** the judge is the responder itself" in report
    assert len([b for b in server.requests if "<MODEL_RESPONSE>" in b["messages"][-1]["content"]]) == 2


def test_the_project_prompt_stays_an_option(mock_server, tmp_path, capsys):
    def project_judge(body: dict, attempt: int) -> dict:
        assert body["messages"][0]["role"] == "system" and "<reply>" in body["messages"][1]["content"]
        return {"content": json.dumps({"reasoning": "r", "verdict": "YES"})}

    output = tmp_path / "out"
    with mock_server(responder, model="r") as answers, mock_server(project_judge, model="j") as grader:
        args = ["--data", str(DATA), "--limit", "1", "--rounds", "0", "--output", str(output)]
        args += ["--base-url", answers.base_url, "--judge-base-url", grader.base_url]
        code = cli([*args, "--judge-prompt", "project"])
        assert code == 0, capsys.readouterr().err
        assert len(grader.requests) == 1
    assert json.loads((output / "run.json").read_text())["settings"]["judge_prompt"] == "project"
    assert "the project's own judge prompt (not the official one)" in (output / "report.md").read_text()
    # Switching the judge prompt on the same folder would mix two judges in one score: refused.
    assert cli(args) == 2
    assert "judge_prompt: folder has 'project', this run 'official'" in " ".join(capsys.readouterr().err.split())
