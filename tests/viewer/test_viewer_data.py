"""What ``pacore view`` reads of each kind of folder and what its server serves, checked against the folders'
own files (made by the project's commands on real servers: tests/viewer/viewer_folders.py), without a browser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from viewer_folders import HOSTILE, ROMAN, ROOT, jsonl, pacore
from viewer_serving import served

from pacore_emulator import Emulator, EmulatorConfig
from pacore_graph.viewer.kinds import open_folder

STATIC = ROOT / "pacore_graph" / "viewer" / "static"


def fetch(url: str, *, method: str = "GET", host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def pacore_view(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pacore_graph.cli", "view", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


# -------------------------------------------------------------------------------------------- kinds and refusals


def test_each_kind_of_folder_is_recognised(run_dir, math_dir, multichallenge_dir, swe_dir):
    kinds = {folder: open_folder(folder).kind for folder in (run_dir[0], math_dir, multichallenge_dir, swe_dir)}
    assert list(kinds.values()) == ["run", "math", "multichallenge", "swe-run"]


def test_a_folder_that_is_not_a_run_folder_is_refused_in_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    refused = pacore_view(str(tmp_path))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == (
        f"pacore: error: {tmp_path} is not a run folder (it has no run.json, and no swe eval summary.json): "
        "give the folder a run wrote\n"
    )
    missing = pacore_view(str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "is not a folder" in missing.stderr
    unknown = tmp_path / "other"
    unknown.mkdir()
    (unknown / "run.json").write_text(json.dumps({"fingerprint": {}}))
    (unknown / "results.jsonl").write_text(json.dumps({"name": "x", "value": 1}) + "\n")
    odd = pacore_view(str(unknown))
    assert (
        odd.returncode == 2
        and odd.stderr.startswith("pacore: error: ")
        and "rows the viewer does not know" in odd.stderr
    )


# -------------------------------------------------------------------------------------------- a PaCoRe run folder


def test_a_run_folder_index_and_problem_say_what_its_rows_say(run_dir):
    folder, _ = run_dir
    rows = {row["id"]: row for row in jsonl(folder / "results.jsonl")}
    view = open_folder(folder)
    index = view.index()
    assert [entry["key"] for entry in index["problems"]] == list(rows)
    for entry in index["problems"]:
        row = rows[entry["key"]]
        assert entry["tokens"] == row["ttc"] and entry["failures"] == len(row["failures"])
        assert entry["calls"] == sum(r["k"] for r in row["rounds"])
    q1 = view.problem("q1")
    assert q1["messages"] == [
        {"role": "system", "content": "Answer in a box."},
        {"role": "user", "content": "What is 17*23?"},
    ]
    first = q1["run"]["rounds"][0]
    assert first["failed"] == 1 and first["agreement"] == "2/3 agree on 391" and first["groups"] == ["391"]
    failed = [cell for cell in first["trajectories"] if cell.get("error")]
    assert len(failed) == 1 and "500" in failed[0]["error"] and failed[0]["usable"] is False
    recorded = {t["index"]: t["conclusion"] for t in rows["q1"]["rounds"][0]["trajectories"]}
    assert {cell["index"]: cell["conclusion"] for cell in first["trajectories"]} == recorded
    q3 = view.problem("q3")["run"]["rounds"][0]
    assert q3["truncated"] == 1 and any(cell.get("truncated") for cell in q3["trajectories"])


def test_the_rebuilt_prompt_of_a_later_round_is_the_one_the_server_received(run_dir):
    folder, requests = run_dir
    second = open_folder(folder).problem("q1")["run"]["rounds"][1]
    sent = [body["messages"] for body in requests if "Reference Responses" in str(body["messages"][-1]["content"])]
    q1_sent = [messages for messages in sent if messages[0]["content"] == "Answer in a box."]
    assert len(q1_sent) == 1
    assert second["prompt"] == q1_sent[0]
    row = next(row for row in jsonl(folder / "results.jsonl") if row["id"] == "q1")
    by_index = {t["index"]: t["conclusion"] for t in row["rounds"][0]["trajectories"]}
    assert [ref["text"] for ref in second["given"]] == [by_index[i] for i in row["rounds"][0]["reference_order"]]


def test_a_row_being_written_is_skipped_and_read_once_it_is_whole(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir[0], copy)
    results = copy / "results.jsonl"
    whole = results.read_bytes().splitlines(keepends=True)
    results.write_bytes(b"".join(whole[:-1]) + whole[-1][:40])  # the last row half written
    before = results.read_bytes()
    view = open_folder(copy)
    index = view.index()
    assert len(index["problems"]) == 2 and any("being written" in note for note in index["notes"])
    assert results.read_bytes() == before, "the viewer wrote to the folder"
    with results.open("ab") as handle:
        handle.write(whole[-1][40:])  # the run finishes the row
    again = view.index()
    assert len(again["problems"]) == 3 and again["notes"] == []


def test_a_solve_folder_shows_its_problem_from_run_json(solve_dir):
    view = open_folder(solve_dir)
    (entry,) = view.index()["problems"]
    problem = view.problem(entry["key"])
    assert problem["messages"][-1]["content"] == "What is 17*23?"
    assert [r["k"] for r in problem["run"]["rounds"]] == [2, 1]
    row = jsonl(solve_dir / "results.jsonl")[0]
    assert problem["run"]["answer"] == row["answer"] and entry["tokens"] == row["ttc"]


def test_a_panel_folder_continued_at_medium_shows_each_cells_member_and_what_was_reused(tmp_path, monkeypatch):
    """``pacore solve --panel`` at low, then at medium into the same folder: each cell names its panel member, and
    the 4 trajectories bought at low are marked reused."""
    monkeypatch.setenv("OPENAI_API_KEY", "unused-by-the-emulator")
    with Emulator(EmulatorConfig(ttft=0.0, token_delay=0.0, output_tokens=20, strict_model=False)) as emu:
        members = {name: {"base_url": emu.base_url, "weight": w} for name, w in [("small", 3), ("strong", 1)]}
        panel = tmp_path / "panel.json"
        panel.write_text(json.dumps({"models": members, "synthesizer": "strong"}))
        out = tmp_path / "out"
        for preset in ("low", "medium"):
            pacore("solve", "What is 17*23?", "--panel", str(panel), "--preset", preset, "--output", str(out))
    view = open_folder(out)
    (entry,) = view.index()["problems"]
    first, last = view.problem(entry["key"])["run"]["rounds"]
    assert len(first["trajectories"]) == 16 and sum(1 for c in first["trajectories"] if c.get("reused")) == 4
    (synthesis,) = last["trajectories"]
    assert {c["model"] for c in first["trajectories"]} == {"small", "strong"} and synthesis["model"] == "strong"
    assert "reused" not in synthesis


# -------------------------------------------------------------------------------------------- benchmarks


def test_a_math_folder_has_per_setting_scores_rounds_pool_and_curve(math_dir):
    view = open_folder(math_dir)
    index = view.index()
    rows = jsonl(math_dir / "results.jsonl")
    labels = [c["title"] for c in index["columns"] if c["type"] == "score"]
    assert labels == ["single", "vote@4", "pacore[4,2]"]
    assert {e["key"] for e in index["problems"]} == {r["problem_id"] for r in rows}
    for entry in index["problems"]:
        for number, label in enumerate(labels):
            marks = [r["correct"] for r in rows if r["problem_id"] == entry["key"] and r["label"] == label]
            assert entry[f"s{number}"] == sum(marks) / len(marks)
    summary = json.loads((math_dir / "summary.json").read_text())
    assert [row[0] for row in index["summary"]["tables"][0]["rows"]] == [p["label"] for p in summary["points"]]
    points = [point for series in index["summary"]["chart"]["series"] for point in series["points"]]
    assert sorted(p["label"] for p in points) == sorted(p["label"] for p in summary["points"])
    key = index["problems"][0]["key"]
    problem = view.problem(key)
    pacore_units = [u for u in problem["units"] if u["label"] == "pacore[4,2]"]
    assert len(pacore_units) == 2 and all([r["k"] for r in u["run"]["rounds"]] == [4, 2, 1] for u in pacore_units)
    pool = [r for r in jsonl(math_dir / "pool.jsonl") if r["problem_id"] == key]
    assert [c["conclusion"] for c in problem["pool"]["trajectories"]] == [r["content"] for r in pool]
    asked = next(row for row in jsonl(math_dir.parent / "math-data.jsonl") if row["id"] == key)["problem"]
    assert problem["messages"][-1]["role"] == "user" and problem["messages"][-1]["content"].endswith(asked)


def test_a_multichallenge_folder_has_conversation_verdict_reason_and_scores(multichallenge_dir):
    view = open_folder(multichallenge_dir)
    index = view.index()
    rows = {f"{r['question_id']}#{r['sample']}": r for r in jsonl(multichallenge_dir / "results.jsonl")}
    assert {e["key"] for e in index["problems"]} == set(rows)
    problem = view.problem("q1#0")
    row = rows["q1#0"]
    assert problem["messages"] == [
        {"role": "user", "content": "c1"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "follow-up 1"},
    ]
    assert problem["judge"]["verdict"] == row["verdict"] == "YES" and problem["judge"]["reasoning"] == "fine"
    assert problem["run"]["answer"] == row["response"] and [r["k"] for r in problem["run"]["rounds"]] == [4, 1]
    axes = [r[0] for r in index["summary"]["tables"][0]["rows"]]
    assert axes == ["INFERENCE_MEMORY", "SELF_COHERENCE", "OVERALL"]


# -------------------------------------------------------------------------------------------- SWE


def test_a_swe_run_shows_episodes_steps_patches_and_the_kept_patch(swe_dir):
    view = open_folder(swe_dir)
    (entry,) = view.index()["problems"]
    assert entry["key"] == ROMAN and entry["patch"] == "yes"
    trajectory = json.loads((swe_dir / "trajectories" / f"{ROMAN}.json").read_text())
    problem = view.problem(ROMAN)
    assert problem["swe"]["patch"] == trajectory["model_patch"] and problem["swe"]["moves"] == []
    cells = [cell for round_ in problem["run"]["rounds"] for cell in round_["trajectories"]]
    assert len(cells) == 3 and all(cell["episode"]["messages"] for cell in cells)
    episodes = {(e["round_index"], e["index"]): e for e in trajectory["episodes"]}
    for number, round_ in enumerate(problem["run"]["rounds"]):
        for cell in round_["trajectories"]:
            episode = episodes[(number, cell["index"])]
            assert cell["episode"]["patch"] == episode["patch"] and cell["episode"]["sandbox"] == episode["sandbox"]
            assert cell["episode"].get("host") == episode.get("host")  # the sandbox's host, as the record names it
            commands = [
                c["args"]["command"]
                for m in cell["episode"]["messages"]
                for c in m.get("tool_calls", [])
                if c["name"] == "bash"
            ]
            assert commands and commands == [
                c["args"]["command"]
                for m in episode["messages"]
                for c in m.get("tool_calls", [])
                if c["name"] == "bash"
            ]
    assert problem["run"]["rounds"][0]["agreement"] == "all 2 answers differ"  # two candidate patches, each its own


def test_a_host_per_episode_and_moves_are_shown_when_a_trajectory_file_has_them(swe_dir, tmp_path):
    copy = tmp_path / "swe"
    shutil.copytree(swe_dir, copy)
    path = copy / "trajectories" / f"{ROMAN}.json"
    trajectory = json.loads(path.read_text())
    for number, episode in enumerate(trajectory["episodes"]):
        episode["host"] = f"host-{number % 2}"
    # as `pacore swe run --runtime swerex` writes them: episodes per host, and each episode moved off a lost host
    trajectory["hosts"] = {"host-0": 2, "host-1": 1}
    trajectory["moves"] = [
        {
            "round_index": 0,
            "index": 1,
            "from_host": "host-1",
            "to_host": "host-0",
            "reason": "host host-1 (http://127.0.0.1:8102) did not answer ([Errno 111] Connection refused)",
            "steps": 2,
        }
    ]
    path.write_text(json.dumps(trajectory))
    problem = open_folder(copy).problem(ROMAN)
    hosts = [cell["episode"]["host"] for round_ in problem["run"]["rounds"] for cell in round_["trajectories"]]
    assert sorted(hosts) == ["host-0", "host-0", "host-1"]
    assert problem["swe"]["moves"] == trajectory["moves"]
    assert ["episodes per host", "host-0 2, host-1 1; 1 moved off a lost host"] in problem["facts"]


@pytest.mark.docker
def test_a_swe_run_with_its_evaluation_inside_shows_each_tests_result(swe_eval_dir):
    view = open_folder(swe_eval_dir)
    (entry,) = view.index()["problems"]
    assert entry["eval"] == "resolved" and entry["resolved"] == 1.0
    evaluation = view.problem(ROMAN)["eval"]
    report = json.loads((swe_eval_dir / "eval" / "check" / "scripted" / ROMAN / "report.json").read_text())[ROMAN]
    passed = {name for groups in report["tests_status"].values() for name in groups["success"]}
    assert {t["name"] for t in evaluation["tests"] if t["passed"]} == passed and passed
    assert {f["name"] for f in evaluation["files"]} >= {"patch.diff", "test_output.txt", "run_instance.log"}
    alone = open_folder(swe_eval_dir / "eval")  # the evaluation's own folder is a folder to view too
    assert alone.kind == "swe-eval" and alone.index()["problems"][0]["status"] == "resolved"
    assert alone.problem(ROMAN)["eval"]["tests"] == evaluation["tests"]


def test_the_viewer_names_swe_files_as_the_swe_agent_does():
    from pacore_agents.swe.output_paths import folder_name as agents_name
    from pacore_graph.viewer.paths import folder_name

    for text in [ROMAN, "django__django-11099", "../../etc", "A/B c", "x" * 300, "sympy__sympy-20428", "ÄÖ"]:
        assert folder_name(text) == agents_name(text)


# -------------------------------------------------------------------------------------------- the server


def test_the_server_serves_the_folder_read_only_on_loopback_and_nothing_outside_it(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir[0], copy)
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-CONTENT")
    (copy / "link").symlink_to(secret)
    (copy / "linked-dir").symlink_to(tmp_path)
    before = {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file() and not p.is_symlink()}
    with served(copy) as url:
        status, headers, body = fetch(url + "files/run.json")
        assert status == 200 and json.loads(body)["fingerprint"]["model"] == "mock-model"
        assert headers["Content-Type"].startswith("text/plain") and headers["X-Content-Type-Options"] == "nosniff"
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        for path in ["files/../secret.txt", "files/%2E%2E/secret.txt", "files/..%2Fsecret.txt", "files/link",
                     "files/linked-dir/secret.txt", "files//etc/passwd", "files/%2Fetc%2Fpasswd"]:  # fmt: skip
            status, _, body = fetch(url + path)
            assert status == 403 and b"SECRET-CONTENT" not in body, path
        assert fetch(url + "files/nothing.txt")[0] == 404
        assert fetch(url + "api/index", method="POST")[0] == 405
        assert fetch(url + "api/index", method="DELETE")[0] == 405
        assert fetch(url + "api/index", host="attacker.example:80")[0] == 403  # DNS rebinding
        assert fetch(url + "api/problem?key=nosuch")[0] == 404
        status, _, body = fetch(url + "api/problem?key=hostile")
        cells = json.loads(body)["run"]["rounds"][0]["trajectories"]
        assert status == 200 and all(HOSTILE in cell["conclusion"] for cell in cells)
    after = {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file() and not p.is_symlink()}
    assert after == before


def test_the_page_is_plain_files_with_no_html_insertion_and_no_address_elsewhere():
    script = (STATIC / "viewer.js").read_text()
    for forbidden in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert forbidden not in script, forbidden
    page = "\n".join(path.read_text() for path in STATIC.iterdir())
    addresses = set(re.findall(r"https?://[^\s\"')]+", page))
    assert addresses == {"http://www.w3.org/2000/svg"}  # the SVG namespace: a name, never fetched


def test_the_self_contained_report_holds_every_problem_and_no_text_can_close_its_blocks(run_dir, tmp_path):
    out = tmp_path / "report.html"
    written = pacore_view(str(run_dir[0]), "--html", str(out))
    assert written.returncode == 0, written.stderr
    assert written.stdout == "" and f"wrote {out}: 3 problem(s)" in written.stderr
    html = out.read_text()
    assert "<script>window.pwned" not in html and "\\u003cscript\\u003ewindow.pwned" in html
    assert html.count("<script") == html.count("</script>") == 2 + 3  # the app, the index, three problems
    assert "Content-Security-Policy" in html and "script-src 'sha256-" in html
    assert not re.search(r"""(src|href)=["']?https?:""", html)


def test_the_big_folder_generator_writes_rows_of_a_real_run_format(run_dir, tmp_path):
    from pacore_benchmarks.perf.viewer_folder import make_folder

    generated = jsonl(make_folder(tmp_path / "generated", 2, [4]) / "results.jsonl")[0]
    real = jsonl(run_dir[0] / "results.jsonl")[0]
    assert set(generated) == set(real)
    assert set(generated["rounds"][0]) == set(real["rounds"][0])
    assert set(generated["rounds"][0]["trajectories"][0]) == set(real["rounds"][0]["trajectories"][0])
    assert [r["k"] for r in generated["rounds"]] == [4, 1]


def test_port_and_open_options_and_a_port_in_use(run_dir, tmp_path, monkeypatch):
    import socket

    from waits import wait_until

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = pacore_view(str(run_dir[0]), "--port", str(port))
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1
        assert refused.stderr.startswith(f"pacore: error: cannot listen on 127.0.0.1:{port}")
    opened = tmp_path / "opened.txt"
    # webbrowser runs $BROWSER with the URL in place of %s: a "browser" that writes down what it was asked to open
    monkeypatch.setenv(
        "BROWSER", f"{sys.executable} -c \"import sys; open({str(opened)!r}, 'w').write(sys.argv[1])\" %s"
    )
    with served(run_dir[0], "--port", str(port), "--open") as url:
        assert url == f"http://127.0.0.1:{port}/"
        wait_until(lambda: opened.exists() and opened.read_text() == url, 30, what="the browser asked to open the page")
