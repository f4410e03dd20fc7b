"""The overhead benchmark: the floor sends what the operator sends, and a tiny run reports every key.

No timing is asserted: speed targets are benchmark results, not test conditions.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
from collections import Counter

import pytest

from pacore_benchmarks.perf import overhead_cli
from pacore_benchmarks.perf.floor import render_synthesis, run_floor
from pacore_benchmarks.perf.overhead import Measurement, OverheadReport, OverheadSettings, Pair, expected_trajectories
from pacore_benchmarks.perf.overhead_worker import WorkerSpec, make_problems, measure
from pacore_emulator import Emulator, EmulatorConfig
from pacore_graph.command_kit import run_parsed
from pacore_graph.graph.gc_policy import FULL_PASS_THRESHOLD
from pacore_graph.synthesis.prompt import render_synthesis_prompt

TINY_EMULATOR = {"ttft": 0.01, "token_delay": 0.0005, "output_tokens": (20, 60)}


@pytest.mark.parametrize("references", [[], ["only one"], ["a", "b\nwith lines", "  spaced  ", "\\boxed{3}"]])
def test_floor_template_is_byte_identical_to_the_operators(references):
    original = "Find $x$ such that\n$x^2 = 4$."
    assert render_synthesis(original, references) == render_synthesis_prompt(original, references)


def _bodies(log_path) -> list[dict]:
    """Every request body the emulator received, in arrival order."""
    bodies = [json.loads(line)["body"] for line in log_path.read_text().splitlines()]
    return bodies


def _shape(body: dict) -> tuple:
    """Everything of a request but the synthesis text, plus the sorted references it carries."""
    last = body["messages"][-1]["content"]
    references = []
    if "Reference Responses:" in last:
        tail = last.split("Reference Responses:\n", 1)[1].rsplit("\n\nNow, based on", 1)[0]
        references = sorted(part.split(":\n", 1)[1].rstrip("\n") for part in tail.split("\nReference ")[1:])
    rest = {k: v for k, v in body.items() if k != "messages"}
    head = json.dumps([body["messages"][:-1], rest], sort_keys=True)
    return head, body["messages"][-1]["role"], tuple(references)


async def test_floor_sends_the_same_requests_as_the_operator(tmp_path):
    """Same bodies, same rounds: the comparison measures client cost, not a different workload."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    from pacore_graph import PaCoReConfig, PaCoReNode, chat_model

    problems = make_problems(3)
    rounds = [3, 2]
    shapes = {}
    for client in ("floor", "operator"):
        log = tmp_path / f"{client}.jsonl"
        # reasoning inside <think> makes every content length distinct, so the reference order is fixed
        config = EmulatorConfig(reasoning="think", request_log=str(log), **TINY_EMULATOR)
        with Emulator(config) as emu:
            if client == "floor":
                result = await run_floor(emu.base_url, config.model, problems, rounds)
                assert result.failures == 0
            else:
                llm = chat_model(base_url=emu.base_url, model=config.model)
                builder = StateGraph(MessagesState)
                builder.add_node("pacore", PaCoReNode(llm, config=PaCoReConfig(rounds=rounds)))
                builder.add_edge(START, "pacore")
                builder.add_edge("pacore", END)
                app = builder.compile()
                for problem in problems:
                    await app.ainvoke({"messages": problem})
                await llm.aclose()
        shapes[client] = Counter(_shape(body) for body in _bodies(log))
    assert sum(shapes["floor"].values()) == expected_trajectories(rounds, len(problems))
    assert shapes["floor"] == shapes["operator"]
    reference_counts = Counter(len(shape[2]) for shape in shapes["floor"].elements())
    assert reference_counts == {0: 9, 3: 6, 2: 3}  # 3 problems x (3 first-round, 2 middle, 1 final)


@pytest.mark.parametrize("client", ["floor", "operator", "proxy"])
async def test_worker_counts_every_trajectory_of_the_schedule(client):
    with Emulator(EmulatorConfig(**TINY_EMULATOR)) as emu:
        spec = WorkerSpec(
            client=client, base_url=emu.base_url, model=emu.config.model, rounds=[4, 2], problems=3, stream=True
        )
        result = await measure(spec)
        stats = emu.stats()
    assert result.trajectories == expected_trajectories([4, 2], 3) == 3 * 7
    assert result.failures == 0 and result.answered == 3
    assert stats["completed"] == result.trajectories + 2  # plus the unmeasured warm-up ([1]: two calls)
    assert result.cpu_s > 0 and result.peak_rss_mb > 0


@pytest.mark.parametrize("client", ["floor", "operator"])
@pytest.mark.parametrize("setting", ["default", "spaced"])
async def test_every_client_runs_under_the_gc_setting_it_is_given(client, setting):
    """spaced: the floor gets around its run the thresholds the operator's PaCoReConfig(spaced_gc=True) sets
    around its runs; default: the collector is left alone. Each result records what was in force."""
    before = gc.get_threshold()
    gc.set_threshold(50, 10, 10)  # collections every 50 allocations, so even a tiny run records some
    try:
        with Emulator(EmulatorConfig(**TINY_EMULATOR)) as emu:
            spec = WorkerSpec(
                client=client,
                base_url=emu.base_url,
                model=emu.config.model,
                rounds=[3],
                problems=2,
                gc=setting,
                full_pass_threshold=FULL_PASS_THRESHOLD,
            )
            result = await measure(spec)
        after = gc.get_threshold()
    finally:
        gc.set_threshold(*before)
    assert after == (50, 10, 10)  # put back when the run ended
    spaced = f"50,10,{FULL_PASS_THRESHOLD}"
    if setting == "spaced":
        assert spaced in result.gc_thresholds_seen
    else:
        assert set(result.gc_thresholds_seen) == {"50,10,10"} and result.gc_thresholds == [50, 10, 10]
    if client == "floor":  # its whole measured span is its run
        assert result.gc_thresholds == ([50, 10, FULL_PASS_THRESHOLD] if setting == "spaced" else [50, 10, 10])


def test_gc_is_a_setting_of_the_command_default_unless_asked():
    parser = argparse.ArgumentParser()
    overhead_cli.register(parser.add_subparsers())
    assert overhead_cli.settings_from_args(parser.parse_args(["overhead", "--quick"])).gc == "default"
    assert overhead_cli.settings_from_args(parser.parse_args(["overhead", "--gc", "spaced"])).gc == "spaced"
    with pytest.raises(SystemExit):
        parser.parse_args(["overhead", "--gc", "off"])


def test_tiny_overhead_run_prints_the_json_verdict_last(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    overhead_cli.register(parser.add_subparsers())
    args = parser.parse_args(
        [
            "overhead",
            "--problems",
            "2",
            "--rounds",
            "2",
            "--rounds",
            "2,2",
            "--ttft",
            "0.01",
            "--token-delay",
            "0.0005",
            "--output-tokens",
            "20-60",
            "--no-scaling",
            "--gc",
            "spaced",
            "--output",
            str(tmp_path),
        ]
    )
    assert args.func(args) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    last = printed[-1]
    assert max(len(line) for line in printed[:-1]) <= 100
    assert any("(target <= 1.5 ms: " in line for line in printed)  # each target printed with its figure and side
    summary = json.loads(last)
    assert summary["gc"]["setting"] == "spaced" and summary["gc"]["full_pass_threshold"] == FULL_PASS_THRESHOLD
    for name in ("wall", "cpu", "stream"):
        target = summary["targets"][name]
        assert set(target) == {"figure", "value", "target", "met"}
        assert target["value"] == summary[target["figure"]]  # the figure the target is on, by its key
    assert summary["targets"]["cpu"]["figure"] == "cpu_ms_per_trajectory"
    for key in ("wall_ratio", "cpu_ratio", "cpu_ms_per_trajectory", "stream_ratio", "peak_rss_mb", "targets_met"):
        assert key in summary
    expected = expected_trajectories([2], 2) + expected_trajectories([2, 2], 2)
    assert summary["trajectories"] == summary["floor_trajectories"] == summary["expected_trajectories"] == expected
    assert summary["failures"] == 0
    assert summary["stream_ratio"] > 0 and summary["checkpoint_bytes_per_problem"] > 0
    assert set(summary["wall_ratios"]) == {"[2]", "[2, 2]"}
    assert summary["proxy_wall_ratio"] > 0 and summary["proxy_added_cpu_ms_per_trajectory"] is not None
    markdown = (tmp_path / "overhead.md").read_text()
    assert "[2, 2]" in markdown and "Checkpoints" in markdown and "Streaming" in markdown
    assert "GC spaced on every client" in markdown and "| floor | spaced (" in markdown
    assert "[16] via endpoint" in markdown and "The endpoint adds" in markdown
    saved = json.loads((tmp_path / "overhead.json").read_text())
    kit = {
        "command": "bench overhead",
        "exit_code": 0,
        "output": str(tmp_path),
        "counts": {"problems": 2, "schedules": 2, "repeats": 1},
    }  # the command kit's envelope
    assert summary == {**kit, **saved["summary"]}


def test_bad_schedules_are_refused_with_a_clear_message(capsys):
    parser = argparse.ArgumentParser()
    overhead_cli.register(parser.add_subparsers())
    with pytest.raises(SystemExit):
        parser.parse_args(["overhead", "--schedules", "4;x"])
    assert "schedules look like" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["overhead", "--schedules", "4;0"])


STAND_IN_EXP = '''
"""A stand-in with the reference's interface (stepfun-ai/PaCoRe cannot be fetched in a test): class
settings, a final round of 1 appended, one request per trajectory, rows with round_responses; a young
collection per request, so the worker records the GC thresholds in force however small the run."""
import asyncio, gc, json
import aiohttp

class Exp:
    model_name = "default"
    api_base = ""
    data_path = "data.jsonl"
    output_dir = "outputs"
    max_tokens = 131072
    stream = False
    num_responses_per_round = [4]
    max_concurrent = 64
    random_seed = 42

    def __init__(self):
        self.num_responses_per_round = self.num_responses_per_round + [1]

    async def _call(self, session, messages):
        body = {"model": self.model_name, "messages": messages, "temperature": 1.0, "top_p": 1.0}
        async with session.post(self.api_base, json=body) as response:
            data = await response.json()
        gc.collect(0)
        return {"content": data["choices"][0]["message"]["content"], "reasoning_content": ""}

    async def process_single(self, messages, request_id=""):
        rounds = []
        async with aiohttp.ClientSession() as session:
            for num in self.num_responses_per_round:
                rounds.append(await asyncio.gather(*(self._call(session, messages) for _ in range(num))))
        return {"request_id": request_id, "final_response": rounds[-1][0]["content"], "round_responses": rounds}

    async def async_run(self):
        rows = [json.loads(line) for line in open(self.data_path)]
        return await asyncio.gather(*(self.process_single(r["messages"], r["id"]) for r in rows))
'''


def stand_in_reference(folder):
    """A folder laid out as a checkout of stepfun-ai/PaCoRe, importable from PYTHONPATH."""
    (folder / "pacore" / "batch_inference").mkdir(parents=True)
    (folder / "pyproject.toml").write_text('[project]\nname = "pacore"\nversion = "0"\n')
    (folder / "pacore" / "__init__.py").write_text("")
    (folder / "pacore" / "utils.py").write_text("")
    (folder / "pacore" / "batch_inference" / "__init__.py").write_text("")
    (folder / "pacore" / "batch_inference" / "base_exp.py").write_text(STAND_IN_EXP)
    return folder


def test_the_reference_pipeline_runs_as_a_third_client_in_the_rotation(tmp_path, monkeypatch):
    """The worker measures the reference's own Exp on the same problems and emulator as the other two
    clients, under their GC setting; the report and the JSON verdict put the operator beside it, each ratio
    with its target."""
    import sys

    from pacore_benchmarks.perf import overhead
    from pacore_benchmarks.perf.overhead_report import render_markdown

    checkout = stand_in_reference(tmp_path / "reference")
    monkeypatch.setenv("PYTHONPATH", str(checkout))
    settings = overhead.OverheadSettings(
        problems=2,
        schedules=[[3, 2]],
        stream=False,
        checkpoint=False,
        proxy=False,
        scaling=False,
        output_dir=str(tmp_path / "out"),
        reference=str(checkout),
        gc="spaced",
        emulator=EmulatorConfig(**TINY_EMULATOR),
    )
    monkeypatch.setattr("pacore_benchmarks.perf.reference.reference_python", lambda checkout: sys.executable)
    report = overhead.run_overhead(settings)
    pair = report.schedules[0]
    assert pair.reference is not None and pair.reference.client == "reference"
    expected = expected_trajectories([3, 2], 2)
    assert pair.reference.trajectories == pair.operator.trajectories == pair.floor.trajectories == expected
    assert pair.reference.requests == pair.operator.requests == expected + 2  # plus the unmeasured warm-up ([1])
    assert pair.reference.answered == 2
    assert pair.reference.cpu_s > 0 and pair.reference.peak_rss_mb > 0
    assert pair.reference.gc == pair.operator.gc == pair.floor.gc == "spaced"
    default_young = gc.get_threshold()[0]  # the worker's interpreter is this one: the same defaults
    assert pair.reference.gc_thresholds == [default_young, 10, FULL_PASS_THRESHOLD]  # the operator's, applied
    summary = overhead.summarise(report)
    assert summary["gc"]["setting"] == "spaced"
    assert summary["gc"]["thresholds"]["reference"] == [default_young, 10, FULL_PASS_THRESHOLD]
    ratios = summary["reference"]["per_schedule"]["[3, 2]"]
    assert set(ratios) == {"wall", "cpu", "rss"} and all(value > 0 for value in ratios.values())
    cpu = summary["targets"]["reference_cpu"]
    assert {"reference_wall", "reference_cpu", "reference_rss"} <= set(summary["targets"])
    assert cpu["figure"] == "reference.worst.cpu" and cpu["value"] == summary["reference"]["worst"]["cpu"]
    assert cpu["target"] == "<= 0.8" and cpu["met"] == (cpu["value"] <= 0.8)
    markdown = render_markdown(report, summary, None)
    assert "| reference | spaced (" in markdown.replace("  ", " ") and "Operator vs the reference pipeline" in markdown
    side = "met" if cpu["met"] else "missed"
    assert f"client CPU, operator / reference, worst schedule: {cpu['value']:.3f}x (target <= 0.8x: {side})" in markdown


def test_a_wrong_reference_path_fails_at_once_with_one_line(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    overhead_cli.register(parser.add_subparsers())
    args = parser.parse_args(["overhead", "--quick", "--reference", str(tmp_path), "--output", str(tmp_path)])
    assert run_parsed(args) == 2  # a refused path
    err = capsys.readouterr().err
    assert "not a checkout of stepfun-ai/PaCoRe" in err and "base_exp.py" in err
    assert not (tmp_path / "overhead.md").exists()  # nothing ran


def _measurement(
    client: str, rounds: list[int], wall: float, cpu: float, rss: float, problems: int = 256, stream: bool = False
) -> Measurement:
    trajectories = expected_trajectories(rounds, problems)
    return Measurement(
        client=client,
        wall_s=wall,
        cpu_s=cpu,
        trajectories=trajectories,
        failures=0,
        answered=problems,
        peak_rss_mb=rss,
        gc_full_passes=123,
        gc_longest_pause_ms=1234.5,
        gc_thresholds=[700, 10, 100],
        gc_thresholds_seen={"700,10,100": 51234, "700,10,10": 12},
        gc="spaced",
        rounds=rounds,
        problems=problems,
        stream=stream,
        requests=trajectories,
        tokens_out=1_234_567,
        emulator_cpu_s=123.45,
        peak_active=1024,
    )


def _pair(
    label: str,
    rounds: list[int],
    clients: tuple[str, str] = ("floor", "operator"),
    reference: bool = False,
    stream: bool = False,
) -> Pair:
    floor = _measurement(clients[0], rounds, 108.9, 10.2, 62, stream=stream)
    ref = _measurement("reference", rounds, 110.0, 21.0, 64, stream=stream) if reference else None
    return Pair(
        label=label,
        floor=floor,
        operator=_measurement(clients[1], rounds, 109.3, 15.5, 1119, stream=stream),
        reference=ref,
    )


def test_every_printed_table_fits_in_100_columns_and_every_ratio_says_its_target():
    """All sections at once, with wide numbers: each table's natural width (on a 200-column console) is at
    most 100 columns, and each operator / reference ratio says whether it met its target."""
    from rich.console import Console

    from pacore_benchmarks.perf.overhead import summarise
    from pacore_benchmarks.perf.overhead_report import rich_tables, target_lines

    report = OverheadReport(
        settings=OverheadSettings(gc="spaced", reference="/tmp/pacore-ref"),
        schedules=[_pair(label, rounds, reference=True) for label, rounds in (("[4]", [4]), ("[32, 4]", [32, 4]))],
        streaming=[_pair("[32, 4]", [32, 4], stream=True)],
        proxy=[_pair("[16] via endpoint", [16], clients=("operator", "proxy"))],
        scaling_k=[_pair(f"K={k}", [k]) for k in (4, 256)],
        scaling_problems=[_pair("P=256", [4])],
    )
    summary = summarise(report)
    out = io.StringIO()
    console = Console(file=out, width=200)
    for table in rich_tables(report):
        console.print(table)
    for line in target_lines(report, summary):
        console.print(line)
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 100
    text = out.getvalue()
    for title in (
        "Schedules",
        "Streaming",
        "Through the endpoint",
        "Scaling with K",
        "Scaling with problems",
        "Operator / reference pipeline",
        "What each run got done",
    ):
        assert f"{title}" in text
    assert "GC spaced on every client" in text and "spaced" in lines[5]
    assert "0.994x missed" in text and "0.738x met" in text and "17.484x missed" in text  # wall, CPU, RSS vs reference
    assert "wall, operator / reference, worst schedule: 0.994x (target <= 0.95x: missed)" in text
    assert "peak RSS, operator / reference, worst schedule: 17.484x (target <= 2x: missed)" in text
