"""Run the reference pipeline (stepfun-ai/PaCoRe) and the operator with ``compat="reference"`` against the
same scripted server, and compare what each sent, request for request.

The reference pipeline is not a dependency: install it into a scratch virtual environment and name its
interpreter::

    git clone https://github.com/stepfun-ai/PaCoRe /tmp/pacore-ref   # or any copy of it
    python -m venv /tmp/pacore-ref-venv && /tmp/pacore-ref-venv/bin/pip install /tmp/pacore-ref
    .venv/bin/python scripts/reference_parity.py --reference-python /tmp/pacore-ref-venv/bin/python

The scripted replies (a function of the prompt and of how often it was asked) hold the odd cases where the
two differ by default: an empty text after ``</think>``, an unclosed ``<think>``, whitespace, a reply whose
content is empty beside its reasoning, a 5xx and a 4xx that are retried, a round in which every trajectory
fails, a prompt refused as too long (``max_tokens`` dropped) and one refused even without it. Each
pipeline gets a fresh server; the request bodies are compared as multisets (arrival order differs), and
the answers problem by problem. The reference's retry sleeps are set to 0 (they decide when, not what,
it sends). Exit code 0 when both sent the same requests and gave the same answers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from mock_openai import MockOpenAIServer  # noqa: E402

from pacore_graph import PaCoReConfig, asolve, chat_model  # noqa: E402
from pacore_graph.extend import RetryPolicy  # noqa: E402

ROUNDS = [4, 2]
MAX_TOKENS = 4096
TOO_LONG = (
    "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens "
    "(4904 in the messages, 4096 in the completion). Please reduce the length of the messages or completion."
)
PROBLEMS = {
    "odd-replies": [{"role": "user", "content": "Odd replies: what is 2+3?"}],
    "all-fail": [{"role": "user", "content": "All fail: what is 4+4?"}],
    "too-long": [{"role": "user", "content": "Too long: what is 6*7?"}],
    "refused-final": [{"role": "user", "content": "Refused final: what is 9-2?"}],
    "reasoning-fields": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi."},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Reasoning fields: what is 3*3?"},
    ],
}


def which_round(body: dict) -> int:
    """0 for the caller's prompt, 1 for the middle round's synthesis, 2 for the final one (its references
    are middle-round replies, which all say R2)."""
    text = body["messages"][-1]["content"]
    if not text.startswith("You are given a problem"):
        return 0
    return 2 if "R2" in text else 1


def problem_of(body: dict) -> str:
    text = body["messages"][-1]["content"]
    return next(name for name, messages in PROBLEMS.items() if messages[-1]["content"] in text)


def reply(body: dict, attempt: int):
    """The scripted server: ``attempt`` counts requests with this exact message list, so the n-th arrival
    gets the n-th reply whichever trajectory sent it; texts grow with n, so no two replies of a round have
    the same length (the reference breaks ties by finishing order)."""
    problem, round_index = problem_of(body), which_round(body)
    pad = "." * attempt
    if (problem == "too-long" and "max_tokens" in body) or (problem == "refused-final" and round_index == 2):
        return (400, TOO_LONG)
    if round_index == 2:
        return {"content": f"<think>final reasoning</think>Final answer{pad}"}
    if round_index == 1:
        if problem == "odd-replies" and attempt == 2:
            return (400, "bad request: unknown field")  # the reference retries any status
        return {"content": f"<think>weighing</think>R2 synthesis{pad}"}
    if problem == "all-fail":
        return 503
    if problem == "odd-replies":
        odd = {
            1: {"content": "<think>R1 nothing after the tag</think>"},
            2: {"content": "<think>R1 unclosed reasoning cut by the limit", "finish_reason": "length"},
            3: 500,
            4: {"content": "   "},
        }
        return odd.get(attempt, {"content": f"<think>R1 sums</think>R1 it is 5{pad}"})
    if problem == "reasoning-fields" and attempt == 1:
        return {"content": "", "reasoning_content": "R1 thought until the limit", "finish_reason": "length"}
    if problem == "reasoning-fields":
        return {"content": f"R1 nine{pad}", "reasoning_content": "R1 three threes"}
    return {"content": f"<think>R1 work</think>R1 answer{pad}"}


REFERENCE_RUNNER = textwrap.dedent(
    """
    import random, sys
    from pacore.batch_inference.base_exp import Exp

    random.uniform = lambda low, high: 0.0  # the retry sleeps: they decide when, not what, it sends
    url, data, output, stream = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "stream"

    class Parity(Exp):
        model_name = "mock-model"
        api_base = url + "/chat/completions"
        data_path = data
        output_dir = output
        max_tokens = {max_tokens}
        num_responses_per_round = {rounds}

    Parity.stream = stream
    Parity().run()
    """
).format(max_tokens=MAX_TOKENS, rounds=ROUNDS)


def run_reference(python: str, stream: bool, folder: Path) -> tuple[list[dict], dict[str, str]]:
    data = folder / "problems.jsonl"
    data.write_text("".join(json.dumps({"id": name, "messages": m}) + "\n" for name, m in PROBLEMS.items()))
    runner = folder / "parity.py"
    runner.write_text(REFERENCE_RUNNER)
    with MockOpenAIServer(reply) as server:
        command = [python, str(runner), server.base_url, str(data), str(folder / "out"), "stream" if stream else "-"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise SystemExit(f"the reference pipeline failed:\n{done.stderr[-3000:]}")
        requests = list(server.requests)
    rows = [json.loads(line) for line in (folder / "out" / "parity" / "results.jsonl").read_text().splitlines()]
    return requests, {row["request_id"]: row.get("final_response", row.get("error")) for row in rows}


async def run_operator(stream: bool) -> tuple[list[dict], dict[str, str]]:
    config = PaCoReConfig(
        rounds=ROUNDS,
        max_tokens=MAX_TOKENS,
        compat="reference",
        stream=stream,
        retry=RetryPolicy(max_attempts=5, initial_delay=0, max_delay=0),
    )
    with MockOpenAIServer(reply) as server:
        model = chat_model(server.base_url, model="mock-model")
        results = await asyncio.gather(*(asolve(model, messages, config) for messages in PROBLEMS.values()))
        await model.aclose()
        requests = list(server.requests)
    return requests, {name: result.answer for name, result in zip(PROBLEMS, results, strict=True)}


def multiset(requests: list[dict], ignore: tuple[str, ...]) -> Counter[str]:
    return Counter(json.dumps({k: v for k, v in body.items() if k not in ignore}, sort_keys=True) for body in requests)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference-python", required=True, help="interpreter of a venv with the reference installed")
    args = parser.parse_args()
    same = True
    for stream in (False, True):
        with tempfile.TemporaryDirectory() as folder:
            reference_requests, reference_answers = run_reference(args.reference_python, stream, Path(folder))
        operator_requests, operator_answers = asyncio.run(run_operator(stream))
        # streamed: the operator's client also asks for usage (stream_options), the reference's does not
        ignore = ("stream_options",) if stream else ()
        theirs, ours = multiset(reference_requests, ignore), multiset(operator_requests, ignore)
        label = "streamed" if stream else "plain"
        print(
            f"{label}: reference sent {len(reference_requests)} requests, the operator {len(operator_requests)}; "
            f"equal as multisets: {theirs == ours}" + (" (stream_options aside)" if stream else "")
        )
        for body, count in (theirs - ours).items():
            print(f"  only the reference ({count}x): {body[:300]}")
        for body, count in (ours - theirs).items():
            print(f"  only the operator ({count}x): {body[:300]}")
        for name in PROBLEMS:
            match = reference_answers[name] == operator_answers[name]
            print(
                f"  {name}: answers {'equal' if match else 'DIFFER'}: {reference_answers[name]!r}"
                + ("" if match else f" vs {operator_answers[name]!r}")
            )
            same = same and match
        same = same and theirs == ours
    print(json.dumps({"same_requests_and_answers": same}))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
