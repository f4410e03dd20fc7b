"""``pacore view`` in a real browser: Debian's Chromium, headless, driven by Playwright from PyPI. Pages of a run
folder of each kind render; clicking problem -> round -> trajectory shows the folder's own texts; a conclusion
holding ``<script>`` stays text; the 1,000-problem [32, 4] folder's first load fetches its index alone. Each page
kind leaves a screenshot in the session's screenshot folder (conftest.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from viewer_folders import HOSTILE, ROMAN, jsonl
from viewer_serving import served

pytestmark = pytest.mark.browser


def open_index(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-ready=index]")


def open_problem(page, key: str) -> None:
    page.click(f"#problems tr[data-key='{key}']")
    page.wait_for_selector(f"body[data-problem='{key}'][data-ready=problem]")


def open_trajectory(page, round_index: int, index: int) -> str:
    page.click(f"#run .round[data-round='{round_index}'] .tile[data-index='{index}']")
    page.wait_for_selector("#drawer")
    return page.inner_text("#drawer .conclusion") if page.locator("#drawer .conclusion").count() else ""


def only_its_own_origin(page, url: str) -> None:
    origin = urlsplit(url).netloc
    elsewhere = [u for u in page.requests if not u.startswith("data:") and urlsplit(u).netloc != origin]
    assert not elsewhere, f"the page reached beyond its server: {elsewhere}"
    assert not page.errors, page.errors


def shot(page, screenshots: Path, name: str, *, full: bool = False) -> None:
    page.screenshot(path=str(screenshots / f"{name}.png"), full_page=full)


# -------------------------------------------------------------------------------------------- a PaCoRe run


def test_problem_round_trajectory_of_a_run_folder_show_its_own_texts(run_dir, page, screenshots):
    folder, _ = run_dir
    rows = {row["id"]: row for row in jsonl(folder / "results.jsonl")}
    with served(folder) as url:
        open_index(page, url)
        assert page.locator("#problems tbody tr").count() == 3
        shot(page, screenshots, "run-problems")

        page.fill("input[type=search]", "failures>0")
        assert page.locator("#problems tbody tr").all_inner_texts()[0].startswith("q1")
        assert page.locator("#problems tbody tr").count() == 1
        page.fill("input[type=search]", "")
        page.click("th[data-key=tokens]")  # numbers sort largest first
        shown = [int(t.replace(",", "")) for t in page.locator("#problems tbody tr td:nth-child(5)").all_inner_texts()]
        assert shown == sorted((row["ttc"] for row in rows.values()), reverse=True)

        open_problem(page, "q1")
        row = rows["q1"]
        assert row["answer"] in page.inner_text("table.facts")
        assert page.locator("#run .round").count() == 2
        shot(page, screenshots, "run-problem", full=True)

        page.click("#run .round[data-round='1'] .round-head")
        page.wait_for_selector("#round-panel")
        by_index = {t["index"]: t["conclusion"] for t in row["rounds"][0]["trajectories"]}
        references = page.locator("#round-panel .col:first-child .reference pre").all_inner_texts()
        assert references == [by_index[i] for i in row["rounds"][0]["reference_order"]]
        assert page.inner_text("#round-panel .col:last-child pre") == row["rounds"][1]["trajectories"][0]["conclusion"]
        shot(page, screenshots, "run-round", full=True)

        usable = next(t for t in row["rounds"][0]["trajectories"] if not t["error"])
        assert open_trajectory(page, 0, usable["index"]) == usable["conclusion"]
        assert "Answer in a box." in page.inner_text("#drawer")  # the messages it was sent
        failed = next(t for t in row["rounds"][0]["trajectories"] if t["error"])
        open_trajectory(page, 0, failed["index"])
        assert "scripted 500" in page.inner_text("#drawer")
        open_trajectory(page, 1, 0)
        drawer = page.inner_text("#drawer")
        assert "Reference Responses:" in drawer and "Reference 3:" in drawer  # the synthesis prompt, rebuilt
        shot(page, screenshots, "run-trajectory")
        page.keyboard.press("Escape")
        page.wait_for_selector("#drawer", state="detached")
        only_its_own_origin(page, url)


def test_a_conclusion_holding_a_script_stays_text_everywhere(run_dir, page, tmp_path):
    folder, _ = run_dir
    with served(folder) as url:
        page.goto(url + "#/p/hostile/r/1")
        page.wait_for_selector("#round-panel")
        assert HOSTILE in page.inner_text("#round-panel")
        conclusion = open_trajectory(page, 0, 0)
        assert conclusion.startswith(HOSTILE)
        assert page.evaluate("window.pwned") is None
        assert page.locator("#app script, #drawer script, #app img, #drawer img").count() == 0
        only_its_own_origin(page, url)

    report = tmp_path / "report.html"
    from viewer_folders import pacore

    pacore("view", str(folder), "--html", str(report))
    page.requests.clear()
    page.goto(report.as_uri() + "#/p/hostile/r/0/t/1")
    page.wait_for_selector("#drawer .conclusion")
    assert page.inner_text("#drawer .conclusion").startswith(HOSTILE)
    assert page.evaluate("window.pwned") is None and not page.errors
    assert all(u.startswith("file://") for u in page.requests), page.requests


def test_the_self_contained_report_clicks_through_like_the_served_page(run_dir, page, tmp_path):
    from viewer_folders import pacore

    report = tmp_path / "report.html"
    pacore("view", str(run_dir[0]), "--html", str(report))
    open_index(page, report.as_uri())
    open_problem(page, "q3")
    assert page.locator("#run .tile.truncated").count() == 1
    page.click("#run .round[data-round='0'] .round-head")
    page.wait_for_selector("#round-panel")
    assert [u for u in page.requests if not u.startswith("file://")] == [] and not page.errors


# -------------------------------------------------------------------------------------------- benchmarks


def test_a_math_benchmark_folder_shows_settings_rounds_pool_and_its_curve(math_dir, page, screenshots):
    rows = jsonl(math_dir / "results.jsonl")
    with served(math_dir) as url:
        open_index(page, url)
        shot(page, screenshots, "math-problems")
        page.click("nav.tabs a[href='#/summary']")
        page.wait_for_selector("#chart svg")
        points = json.loads((math_dir / "summary.json").read_text())["points"]
        assert page.locator("#chart circle.point").count() == len(points)
        page.hover("#chart circle.point >> nth=0")
        assert page.locator("#chart .tip").is_visible() and "tokens" in page.inner_text("#chart .tip")
        shot(page, screenshots, "math-summary")
        page.click("#chart .series-toggle >> nth=0")  # a series hidden, then shown again
        assert page.locator("#chart circle.point").count() < len(points)
        page.click("#chart .series-toggle >> nth=0")

        page.click("nav.tabs a[href='#/']")
        key = rows[0]["problem_id"]
        page.wait_for_selector("body[data-ready=index]")
        open_problem(page, key)
        unit = next(r for r in rows if r["problem_id"] == key and r["method"] == "pacore")
        page.click(f"tr.unit[data-key='{unit['label']}|{key}|{unit['sample']}']")
        page.wait_for_selector("#run .round")
        record = unit["records"][1]["trajectories"][0]
        assert open_trajectory(page, 1, 0) == record["conclusion"]
        shot(page, screenshots, "math-problem", full=True)
        pool = next(r for r in jsonl(math_dir / "pool.jsonl") if r["problem_id"] == key and r["index"] == 0)
        page.keyboard.press("Escape")
        page.click("#pool .tile[data-index='0']")
        page.wait_for_selector("#drawer .conclusion")
        assert page.inner_text("#drawer .conclusion") == pool["content"]
        only_its_own_origin(page, url)


def test_a_multichallenge_folder_shows_the_conversation_and_the_judges_verdict(multichallenge_dir, page, screenshots):
    row = next(r for r in jsonl(multichallenge_dir / "results.jsonl") if r["question_id"] == "q2")
    with served(multichallenge_dir) as url:
        open_index(page, url)
        shot(page, screenshots, "multichallenge-problems")
        open_problem(page, "q2#0")
        judge = page.inner_text("#judge")
        assert row["verdict"] in judge and row["judge_reasoning"] in judge and row["target_question"] in judge
        assert "follow-up 2" in page.inner_text("details")  # the conversation
        assert open_trajectory(page, 1, 0) == row["response"]
        shot(page, screenshots, "multichallenge-problem", full=True)
        page.goto(url + "#/summary")
        page.wait_for_selector("#chart svg")
        shot(page, screenshots, "multichallenge-summary")
        only_its_own_origin(page, url)


# -------------------------------------------------------------------------------------------- SWE


def test_a_swe_run_shows_each_episodes_steps_patch_and_sandbox(swe_dir, page, screenshots):
    trajectory = json.loads((swe_dir / "trajectories" / f"{ROMAN}.json").read_text())
    with served(swe_dir) as url:
        open_index(page, url)
        open_problem(page, ROMAN)
        assert trajectory["model_patch"].splitlines()[0] in page.inner_text("#swe")
        episode = next(e for e in trajectory["episodes"] if e["round_index"] == 0 and e["index"] == 1)
        open_trajectory(page, 0, 1)
        drawer = page.inner_text("#drawer")
        first_command = next(m for m in episode["messages"] if m.get("tool_calls"))["tool_calls"][0]["args"]["command"]
        assert first_command in drawer and episode["sandbox"]["workdir"] in drawer
        assert page.locator("#drawer .diff .add").count() > 0
        outputs = page.locator("#drawer details:has(summary:text-matches('output'))")
        assert outputs.count() >= 2 and not outputs.first.get_attribute("open")  # outputs come folded
        shot(page, screenshots, "swe-episode")
        page.keyboard.press("Escape")
        page.click("#run .round[data-round='1'] .round-head")
        page.wait_for_selector("#round-panel")
        assert "Patch:" in page.inner_text("#round-panel .col:first-child")  # the patches the synthesis was given
        shot(page, screenshots, "swe-problem", full=True)
        only_its_own_origin(page, url)


@pytest.mark.docker
def test_a_swe_evaluation_shows_each_tests_result(swe_eval_dir, page, screenshots):
    report = json.loads((swe_eval_dir / "eval" / "check" / "scripted" / ROMAN / "report.json").read_text())[ROMAN]
    tests = sum(len(g["success"]) + len(g["failure"]) for g in report["tests_status"].values())
    with served(swe_eval_dir) as url:
        open_index(page, url)
        assert "resolved" in page.inner_text("#problems")
        open_problem(page, ROMAN)
        assert page.locator("#tests tbody tr").count() == tests
        assert page.locator("#tests .test-pass").count() == sum(
            len(g["success"]) for g in report["tests_status"].values()
        )
        shot(page, screenshots, "swe-eval", full=True)
        only_its_own_origin(page, url)
    page.requests.clear()
    with served(swe_eval_dir / "eval") as url:  # the evaluation's own folder
        open_index(page, url)
        shot(page, screenshots, "swe-eval-problems")
        open_problem(page, ROMAN)
        page.click("#eval details:has(summary:text-matches('test_output'))")
        assert "passed" in page.inner_text("#eval")
        shot(page, screenshots, "swe-eval-instance", full=True)
        page.click("nav.tabs a[href='#/summary']")
        page.wait_for_selector("body[data-ready=summary]")
        assert "check" in page.inner_text("main")
        only_its_own_origin(page, url)


@pytest.mark.embedded
def test_a_solve_folder_of_the_embedded_model_renders(solve_dir, page, screenshots):
    row = jsonl(solve_dir / "results.jsonl")[0]
    with served(solve_dir) as url:
        open_index(page, url)
        open_problem(page, row["id"])
        assert "What is 17*23?" in page.inner_text("details")
        assert open_trajectory(page, 1, 0) == row["rounds"][1]["trajectories"][0]["conclusion"]
        shot(page, screenshots, "solve-trajectory")
        only_its_own_origin(page, url)


# -------------------------------------------------------------------------------------------- a big folder


def test_the_1000_problem_folder_loads_its_index_alone_then_one_problem_at_a_time(big_dir, page, screenshots):
    """Structural, not timed: the first load is the page, its script and style, and the index, within a bound of
    bytes per problem; opening a problem is one request. The timings are written beside the screenshots
    (benchmarks/perf/viewer_bench.py measures them properly)."""
    sizes: dict[str, int] = {}
    page.on("response", lambda response: sizes.__setitem__(urlsplit(response.url).path, len(response.body())))
    with served(big_dir) as url:
        started = time.perf_counter()
        open_index(page, url)
        opened = time.perf_counter() - started
        paths = [urlsplit(u).path for u in page.requests]
        assert paths == ["/", "/app/viewer.css", "/app/viewer.js", "/api/index"], paths
        assert sizes["/api/index"] < 400 * 1000, sizes
        assert "1,000 problems" in page.inner_text(".toolbar")
        assert page.locator("#problems tbody tr").count() == 200  # the table grows as it is scrolled
        page.locator("#more-rows").scroll_into_view_if_needed()
        page.locator("#problems tbody tr").nth(399).wait_for()  # (the page's policy forbids wait_for_function's eval)
        assert page.locator("#problems tbody tr").count() == 400
        page.fill("input[type=search]", "gen-0099")
        assert page.locator("#problems tbody tr").all_inner_texts()[0].startswith("gen-00990")
        assert page.locator("#problems tbody tr").count() == 10 and not page.is_visible("#more-rows")
        page.fill("input[type=search]", "")
        shot(page, screenshots, "big-problems")
        page.fill("input[type=search]", "gen-00151")
        page.requests.clear()
        started = time.perf_counter()
        open_problem(page, "gen-00151")
        page.wait_for_selector("#run .round[data-round='2']")
        problem_opened = time.perf_counter() - started
        assert [urlsplit(u).path for u in page.requests] == ["/api/problem"]
        assert page.locator("#run .round[data-round='0'] .tile").count() == 32
        row = next(json.loads(line) for line in (big_dir / "results.jsonl").open() if '"gen-00151"' in line[:30])
        assert all(any(t[field] for t in row["rounds"][0]["trajectories"]) for field in ("error", "cut", "truncated"))
        for number, round_ in enumerate(row["rounds"]):  # failed, cut and truncated trajectories are marked
            for mark, field in (("failed", "error"), ("cut", "cut"), ("truncated", "truncated")):
                marked = page.locator(f"#run .round[data-round='{number}'] .tile.{mark}").count()
                assert marked == sum(1 for t in round_["trajectories"] if t[field]), (number, mark)
        shot(page, screenshots, "big-problem")
        only_its_own_origin(page, url)
    timings = {
        "index_bytes": sizes["/api/index"],
        "page_open_s": round(opened, 3),
        "problem_open_s": round(problem_opened, 3),
    }
    (screenshots / "big-folder-timings.json").write_text(json.dumps(timings, indent=1) + "\n")
