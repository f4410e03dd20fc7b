"""Real SWE-bench Verified rows, built offline and graded end to end (fixtures: tests/fixtures/swe).

`pacore swe images build` makes each row's image from its snapshot: a debootstrap Debian base, wheels
that this host's pip fetches from PyPI, the repository at the base commit installed as swebench's
recipe says. Then `pacore swe eval` grades the gold patch (resolved) and no patch (FAIL_TO_PASS fails)
with the row's own eval_script and log parser. Needs Docker, PyPI and a Debian mirror (as CI has).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rex_hosts import hosts_file

from pacore_agents.swe.docker_sandbox import DockerSandbox
from pacore_agents.swe.offline_images import offline_image_name
from pacore_agents.swe.snapshots import SnapshotError, extract_snapshot, find_snapshot, tree_digest
from pacore_agents.swe.specs import UnsupportedRowError, debian_release, spec_for
from pacore_agents.swe.tasks import listed_tests, load_tasks
from pacore_agents.swe.wheelhouse import (
    download_wheels,
    merge_requirements,
    missing_requirement,
    read_requirement_file,
    stand_in_wheel,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "swe"
ROWS = FIXTURES / "verified_rows.jsonl"
REPOS = FIXTURES / "repos"
IDS = ["psf__requests-1142", "pytest-dev__pytest-5262"]
ROOT = Path(__file__).resolve().parents[2]


def pacore(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pacore_graph.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=1800
    )


@pytest.fixture(scope="module")
def built(client) -> list[dict]:
    done = pacore("swe", "images", "build", "--dataset", str(ROWS), "--instances", *IDS, "--repos", str(REPOS))
    assert done.returncode == 0, done.stderr[-4000:]
    rows = load_tasks(str(ROWS))
    *built_lines, last = done.stdout.splitlines()  # ID<TAB>image per row, then the JSON summary
    assert [line.split("\t") for line in built_lines] == [[row["instance_id"], offline_image_name(row)] for row in rows]
    summary = json.loads(last)
    assert summary["command"] == "swe images build" and summary["exit_code"] == 0
    assert summary["counts"] == {"total": len(rows), "done": len(rows), "failed": 0}
    assert summary["images"] == {row["instance_id"]: offline_image_name(row) for row in rows}
    return rows


@pytest.mark.docker
def test_images_hold_the_repository_at_the_base_commit_with_the_recipes_python(built, client):
    for row in built:
        with DockerSandbox(row) as box:
            assert box.image == offline_image_name(row)  # the row names swebench's image; ours is found instead
            base = row["base_commit"]
            checks = box.run(
                f"git cat-file -t {base}; git diff {base} --stat | wc -l; git status --porcelain | wc -l;"
                " python --version; command -v python"
            )
            assert checks.output.split("\n")[:5] == ["commit", "0", "0", "Python 3.9.2", "/opt/pacore/venv/bin/python"]
            assert box.run("python -m pip download -q --no-deps -d /tmp/w setuptools").exit_code == 0
            absent = box.run("python -m pip download --no-deps -d /tmp/w numpy 2>&1")
            assert "No matching distribution found for numpy" in absent.output  # pip sees only the image's wheels
            assert client.api.inspect_container(box.container_id)["HostConfig"]["NetworkMode"] == "none"
        labels = client.images.get(offline_image_name(row)).labels
        assert labels["pacore.instance_id"] == row["instance_id"]


def grade(kind: str, output: Path, *runtime: str) -> dict[str, dict]:
    """`pacore swe eval` of the gold patches or of no patch; each row's test statuses."""
    done = pacore(
        "swe", "eval", "--dataset", str(ROWS), "--predictions", kind, "--run-id", kind, "--output", str(output),
        "--instances", *IDS, *runtime,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    reports = {i: json.loads((output / kind / kind / i / "report.json").read_text())[i] for i in IDS}
    return {i: {"resolved": report["resolved"], **report["tests_status"]} for i, report in reports.items()}


@pytest.mark.docker
def test_gold_resolves_and_no_patch_leaves_fail_to_pass_failing_locally_and_on_sandbox_hosts(
    built, tmp_path, rex_servers
):
    """Graded locally: gold resolves, no patch leaves FAIL_TO_PASS failing. The images carry SWE-ReX's server on an
    interpreter of its own (these rows run on bullseye's Python 3.9), so `swe eval --runtime swerex` grades them on a
    Docker host, and on remote servers (one per row's image, each reused for the gold patch then no patch): every
    test gets the status the local grading gives it."""
    local = {kind: grade(kind, tmp_path / "local") for kind in ("gold", "no-patch")}
    gold = json.loads((tmp_path / "local" / "gold" / "summary.json").read_text())
    assert gold["resolved_ids"] == IDS
    nothing = json.loads((tmp_path / "local" / "no-patch" / "summary.json").read_text())
    assert nothing["unresolved_ids"] == IDS and nothing["error_ids"] == []
    for row in built:
        status = local["no-patch"][row["instance_id"]]
        assert sorted(status["FAIL_TO_PASS"]["failure"]) == sorted(listed_tests(row, "FAIL_TO_PASS"))
        assert sorted(status["PASS_TO_PASS"]["success"]) == sorted(listed_tests(row, "PASS_TO_PASS"))

    servers = {row["instance_id"]: rex_servers.start(offline_image_name(row), 1)[0] for row in built}
    token = str(rex_servers.token_file)
    remote = [
        {"name": i.split("__")[0], "kind": "remote", "url": s.url, "token_file": token} for i, s in servers.items()
    ]
    hosts = {
        "docker": hosts_file(tmp_path / "docker.json", [{"name": "d", "kind": "docker", "slots": 2}]),
        "remote": hosts_file(tmp_path / "remote.json", remote),
    }
    for where, path in hosts.items():
        for kind, statuses in local.items():
            assert grade(kind, tmp_path / where, "--runtime", "swerex", "--hosts", str(path)) == statuses, (kind, where)


@pytest.mark.docker
def test_rows_without_a_recipe_or_a_snapshot_get_one_clear_line(tmp_path, client):
    [row] = load_tasks(str(ROWS), instances=["psf__requests-1142"])
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        json.dumps({**row, "instance_id": "astropy__astropy-1", "repo": "astropy/astropy"})
        + "\n"
        + json.dumps({**row, "instance_id": "psf__requests-99999"})
        + "\n"
    )
    done = pacore(
        "swe",
        "images",
        "build",
        "--dataset",
        str(rows),
        "--instances",
        "astropy__astropy-1",
        "psf__requests-99999",
        "--repos",
        str(REPOS),
    )
    assert done.returncode == 1
    assert "astropy__astropy-1: FAILED: astropy__astropy-1: no offline recipe for astropy/astropy" in done.stderr
    assert "psf__requests-99999: FAILED: psf__requests-99999: no snapshot in" in done.stderr
    missing = pacore("swe", "images", "build", "--dataset", str(rows), "--instances", "nope", "--repos", str(REPOS))
    assert missing.returncode == 2 and missing.stderr.startswith("pacore: error: ")
    assert "no such instance(s): nope" in missing.stderr


# ------------------------------------------------------------------------------------------ pieces


def test_a_snapshot_may_be_an_archive_a_folder_or_a_clone(tmp_path):
    [row] = load_tasks(str(ROWS), instances=["psf__requests-1142"])
    archive = find_snapshot(REPOS, row)
    assert archive == REPOS / "psf__requests-1142.tar.gz"
    extract_snapshot(archive, row, tmp_path / "from-archive")
    assert (tmp_path / "from-archive" / "requests" / "__init__.py").exists()  # the archive's prefix is dropped
    digest = tree_digest(tmp_path / "from-archive")

    repos = tmp_path / "repos"
    shutil.copytree(tmp_path / "from-archive", repos / row["instance_id"])
    assert find_snapshot(repos, row) == repos / row["instance_id"]
    extract_snapshot(repos / row["instance_id"], row, tmp_path / "from-folder")
    assert tree_digest(tmp_path / "from-folder") == digest

    clone = repos / "psf__requests"
    shutil.move(repos / row["instance_id"], clone)
    git = ["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(git + args, check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    (clone / "later.txt").write_text("a later commit")  # a checkout elsewhere: the base commit is what counts
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "later"], check=True)
    cloned_row = {**row, "base_commit": head}
    assert find_snapshot(repos, cloned_row) == clone
    extract_snapshot(clone, cloned_row, tmp_path / "from-clone")
    assert tree_digest(tmp_path / "from-clone") == digest
    with pytest.raises(SnapshotError, match="cannot read commit"):
        extract_snapshot(clone, {**row, "base_commit": "0" * 40}, tmp_path / "bad")
    with pytest.raises(SnapshotError, match="no snapshot in"):
        find_snapshot(tmp_path / "empty", row)


def test_recipes_pick_the_python_and_refuse_what_they_do_not_cover():
    [requests, pytest_row] = load_tasks(str(ROWS))
    assert spec_for(requests).release == "bullseye" and spec_for(requests).install == "python -m pip install ."
    assert "pluggy==0.11.0" in spec_for(pytest_row).packages
    assert [debian_release(v) for v in ("3.6", "3.9", "3.10", "3.11", "3.12")] == [
        "bullseye",
        "bullseye",
        "bookworm",
        "bookworm",
        "trixie",
    ]
    with pytest.raises(UnsupportedRowError, match="no offline recipe for django/django"):
        spec_for({**requests, "repo": "django/django"})
    with pytest.raises(UnsupportedRowError, match="version 9.9"):
        spec_for({**requests, "version": "9.9"})


def test_requirement_files_are_read_with_includes_and_pins_win(tmp_path):
    (tmp_path / "tests.txt").write_text("pytest==7.2.2\n# comment\n-e .\n")
    (tmp_path / "dev.txt").write_text("-r tests.txt\nclick==8.1.2  # via flask\n--hash=sha256:abc\ntox\n")
    lines = read_requirement_file(tmp_path / "dev.txt")
    assert lines == ["pytest==7.2.2", "click==8.1.2", "tox"]
    assert merge_requirements(lines, ["Click==8.1.3"]) == ["pytest==7.2.2", "tox", "Click==8.1.3"]


@pytest.mark.network  # pip downloads from PyPI
def test_wheels_are_chosen_for_the_images_python_markers_included(tmp_path):
    """pip runs with the image's marker environment: `python_version < "3.11"` holds for bullseye's 3.9."""
    wanted = ['tomli==2.0.1; python_version < "3.11"', "six==1.16.0"]
    old = download_wheels(wanted, dest=tmp_path / "old", python="3.9.2", release="bullseye", machine="x86_64")
    new = download_wheels(wanted, dest=tmp_path / "new", python="3.13.5", release="trixie", machine="x86_64")
    assert sorted(p.name for p in old) == ["six-1.16.0-py2.py3-none-any.whl", "tomli-2.0.1-py3-none-any.whl"]
    assert [p.name for p in new] == ["six-1.16.0-py2.py3-none-any.whl"]


@pytest.mark.network  # pip downloads from PyPI
def test_a_stand_in_lets_pip_resolve_a_project_it_cannot_build_here(tmp_path):
    """The repository is resolved from its metadata alone: its requirements, its extras, its own version."""
    metadata = {
        "name": "demo-project",
        "version": "1.0.dev3",
        "provides_extra": ["test"],
        "requires_dist": ["six==1.16.0", 'tomli==2.0.1; extra == "test"'],
    }
    stand_in = stand_in_wheel(tmp_path / "stand-in", metadata)
    assert stand_in.name == "demo_project-1.0.dev3-py3-none-any.whl"
    plain = download_wheels(
        [str(stand_in)], dest=tmp_path / "plain", python="3.9.2", release="bullseye", machine="x86_64"
    )
    tested = download_wheels(
        [f"{stand_in}[test]"], dest=tmp_path / "tested", python="3.9.2", release="bullseye", machine="x86_64"
    )
    assert {p.name for p in plain} == {stand_in.name, "six-1.16.0-py2.py3-none-any.whl"}
    assert {p.name for p in tested} == {p.name for p in plain} | {"tomli-2.0.1-py3-none-any.whl"}


def test_the_package_pip_lacks_a_wheel_for_is_read_from_its_report():
    direct = "ERROR: No matching distribution found for atomicwrites==1.4.1\n"
    assert missing_requirement(direct) == "atomicwrites==1.4.1"
    conflict = (  # pip 26's report when the only candidates are source distributions (pylint 2.10's astroid)
        "The conflict is caused by:\n    astroid 2.6.6 depends on wrapt<1.13 and >=1.11\n\n"
        "Additionally, some packages in these conflicts have no matching distributions available for your "
        "environment:\n    wrapt\n\nTo fix this you could try to:\n"
    )
    assert missing_requirement(conflict) == "wrapt<1.13,>=1.11"
    assert missing_requirement("ERROR: Could not install packages due to an OSError") is None


def test_pypi_before_checks_pip_first_and_says_in_one_line_what_to_do(tmp_path, monkeypatch, capsys):
    """A fresh venv's pip (23.x: ensurepip's own wheel, no index needed) has no --uploaded-prior-to: the build
    says so in one line, before any image or container, instead of failing in pip after the base images."""
    from pacore_agents.swe.wheelhouse import WheelhouseError, check_pip_date_filter
    from pacore_graph.cli import main

    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "old")], check=True)
    old_python = str(tmp_path / "old" / "bin" / "python")
    with pytest.raises(WheelhouseError, match=r"pip 26.0 or newer; this Python's pip is 2[0-5]\."):
        check_pip_date_filter(old_python)
    check_pip_date_filter()  # the pip this project installs (constraints.txt) knows it

    monkeypatch.setattr(sys, "executable", old_python)  # the CLI downloads wheels with sys.executable's pip
    code = main(
        [
            "swe",
            "images",
            "build",
            "--dataset",
            str(ROWS),
            "--instances",
            IDS[0],
            "--repos",
            str(REPOS),
            "--pypi-before",
            "2024-08-01",
        ]
    )
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and line.startswith("pacore: error: --pypi-before needs a pip that knows --uploaded-prior-to")
    assert f"run `{old_python} -m pip install -U 'pip>=26'`, or pass --pypi-before now" in line
