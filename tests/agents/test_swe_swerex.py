"""Sandboxes on SWE-ReX servers (``--runtime swerex --hosts FILE``), tested on real servers.

The fast tests check the hosts file's refusals. The docker tests start SWE-ReX servers of their own, each in a
capped host-network container on a loopback port of its own (two hosts, each reached only at its address), and
run ``pacore swe run`` / ``pacore swe eval`` over them as a user would, with a scripted tool-calling model: a round
spread over both hosts, one host killed mid-round, the sandbox bounds on the remote backend, and the Docker-host
kind (a container per episode with the server inside, reached through the Docker API).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from mock_openai import MockOpenAIServer
from rex_hosts import hosts_file
from test_swe_sandbox_caps import DETACHED, EIGHT_GIB, ROMAN, containers_of, edit_then, run_pacore
from waits import wait_until

from pacore_agents.swe.hosts import load_hosts
from pacore_agents.swe.rex_images import has_rex_server
from pacore_agents.swe.run import PREDICTIONS_FILE, trajectory_path
from pacore_graph.extend import UsageError

# Each slow command counts itself in a file outside the repository (a remote server keeps it between episodes); on
# a server marked as a victim, the second one waits to be killed.
COUNTED = (
    "n=$(cat /var/tmp/slow 2>/dev/null || echo 0); echo $((n + 1)) > /var/tmp/slow; "
    "if [ $n = 1 ] && [ -f /var/tmp/victim ]; then sleep 300; fi; sleep 2; echo slept"
)


KILLS_ITS_SUPERVISOR = "setsid sleep 1000 >/dev/null 2>&1 </dev/null & kill -9 $PPID"


# ------------------------------------------------------------------------------------------ the hosts file


@pytest.mark.parametrize(
    ("host", "refusal"),
    [
        ({"kind": "remote", "url": "http://10.1.2.3:8000", "token_env": "T"}, "plain HTTP off loopback"),
        ({"kind": "remote", "url": "http://127.0.0.1:8000", "token": "x"}, "never written in the hosts file"),
        ({"kind": "remote", "url": "http://127.0.0.1:8000"}, "exactly one of `token_file` or `token_env`"),
        ({"kind": "docker", "url": "tcp://10.1.2.3:2375"}, "unencrypted tcp:// off loopback"),
        ({"kind": "docker", "url": "http://10.1.2.3:2375"}, "unix://, ssh:// or tcp://"),
    ],
    ids=["plain-http", "inline-token", "no-token", "plain-tcp", "bad-scheme"],
)
def test_the_hosts_file_refuses_what_is_unsafe_in_one_line(tmp_path, host, refusal):
    path = hosts_file(tmp_path / "hosts.json", [{"name": "h", **host}])
    with pytest.raises(UsageError) as raised:
        load_hosts(path)
    assert refusal in str(raised.value) and "\n" not in str(raised.value)


def test_opting_in_to_plain_http_and_yaml_files(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text(
        "- {name: lab, kind: remote, urls: ['http://10.1.2.3:8000', 'https://rex.example:443'], token_env: T,"
        " allow_plaintext: true}\n- {name: box, kind: docker, url: 'ssh://me@build', slots: 6}\n"
    )
    hosts = load_hosts(path).hosts
    assert [host.name for host in hosts] == ["lab", "box"]
    assert hosts[0].urls == ["http://10.1.2.3:8000", "https://rex.example:443"]


def test_building_images_of_swe_bench_rows_needs_their_ids_and_snapshots(tmp_path):
    rows = str(Path(__file__).parents[1] / "fixtures" / "swe" / "verified_rows.jsonl")
    for extra, refusal in (
        ([], "--instances is required for SWE-bench rows"),
        (["--instances", "psf__requests-1142"], "--repos DIR is required for SWE-bench rows (psf__requests-1142)"),
    ):
        done, _ = run_pacore("swe", "images", "build", "--dataset", rows, *extra)
        assert done.returncode == 2
        [line] = [line for line in done.stderr.splitlines() if line.startswith("pacore: error")]
        assert refusal in line


# ------------------------------------------------------------------------------------------ on real servers


@pytest.fixture(scope="module")
def row(local_tasks) -> dict:
    [task] = local_tasks(ROMAN)
    return task


slow_then_submit = edit_then(COUNTED)  # edit, then a counted slow command, then submit


def killer(ready, *servers) -> threading.Thread:
    """A thread (not started) that kills the servers' containers once ``ready()`` holds."""

    def kill() -> None:
        wait_until(ready, 120, what="the episodes to kill")
        for server in servers:
            server.container.kill()

    return threading.Thread(target=kill, daemon=True)


def swe_run(server, out, hosts, *extra):
    return run_pacore(
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
        "--output",
        str(out),
        "--runtime",
        "swerex",
        "--hosts",
        str(hosts),
        *extra,
    )


def slow_count(container) -> int:
    """How many slow commands the server's container has started (it may have been killed)."""
    import io
    import tarfile

    try:
        stream, _ = container.get_archive("/var/tmp/slow")
    except Exception:  # none started there
        return 0
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
        member = archive.next()
        handle = archive.extractfile(member) if member else None
        return int(handle.read().decode().strip()) if handle else 0


@pytest.mark.docker
def test_images_build_makes_a_local_tasks_image_with_the_server_and_no_snapshots(row, client):
    """What a host needs, built in one command: no --repos (local tasks carry their repositories)."""
    done, _ = run_pacore("swe", "images", "build", "--dataset", "local", "--instances", ROMAN, "--rebuild")
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"building {row['image']}" in done.stderr
    assert done.stdout.splitlines()[0] == f"{ROMAN}\t{row['image']}"
    assert json.loads(done.stdout.splitlines()[-1])["images"] == {ROMAN: row["image"]}
    assert has_rex_server(client, row["image"])


@pytest.mark.docker
def test_a_round_spreads_over_two_hosts_and_a_host_lost_mid_round_costs_only_its_own_episode(
    row, rex_servers, tmp_path
):
    """8 episodes and a synthesis over two remote servers; the second is killed while it runs its second episode:
    that episode starts again on the first, its finished one is kept, none is run twice."""
    a, b = rex_servers.start(row["image"], 2)
    hosts = hosts_file(
        tmp_path / "hosts.json",
        [
            {"name": "a", "kind": "remote", "url": a.url, "token_file": str(rex_servers.token_file)},
            {"name": "b", "kind": "remote", "url": b.url, "token_file": str(rex_servers.token_file)},
        ],
    )
    out = tmp_path / "run"
    b.container.exec_run(["touch", "/var/tmp/victim"])  # its second slow command waits to be killed
    kill_b = killer(lambda: slow_count(b.container) >= 2, b)
    with MockOpenAIServer(slow_then_submit) as server:
        kill_b.start()
        done, pid = swe_run(server, out, hosts, "--rounds", "8")
    kill_b.join(5)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "host b (" in done.stderr and "left out until it answers again" in done.stderr
    trajectory = json.loads(trajectory_path(out, ROMAN).read_text())
    episodes = trajectory["episodes"]
    assert len(episodes) == 9 and all(e["stop_reason"] == "submitted" for e in episodes)
    assert {e["host"] for e in episodes} == {"a", "b"}
    [move] = trajectory["moves"]
    assert move["from_host"] == "b" and move["to_host"] == "a" and "did not answer" in move["reason"]
    moved = next(e for e in episodes if (e["round_index"], e["index"]) == (move["round_index"], move["index"]))
    assert moved["host"] == "a" and moved["moves"] == [
        {k: v for k, v in move.items() if k not in ("round_index", "index")}
    ]
    assert trajectory["hosts"] == {"a": 8, "b": 1}
    # every slow command started was one episode's: the moved one twice (on b, then on a), no other again
    assert slow_count(a.container) + slow_count(b.container) == len(episodes) + 1
    prediction = json.loads((out / PREDICTIONS_FILE).read_text())
    assert prediction["model_patch"].endswith("+# edited by the episode\n")
    assert rex_servers.token_file.read_text() not in trajectory_path(out, ROMAN).read_text() + done.stderr
    shown = run_pacore("show", str(out))[0]
    assert "episodes per host: a 8, b 1; moved 1" in shown.stdout


@pytest.mark.docker
def test_every_host_lost_mid_round_ends_the_instance_in_one_line_and_the_next_run_completes_it(
    row, rex_servers, tmp_path
):
    """Both servers are killed while each runs its second episode of a round of 4: the instance ends with one line
    naming both hosts and why, no prediction. With both still down a rerun is refused before anything runs; with one
    back (the other left out) the rerun completes the instance, the round's two finished episodes not run again."""
    a, b = rex_servers.start(row["image"], 2)
    token = str(rex_servers.token_file)
    hosts = hosts_file(
        tmp_path / "hosts.json",
        [
            {"name": "a", "kind": "remote", "url": a.url, "token_file": token},
            {"name": "b", "kind": "remote", "url": b.url, "token_file": token},
        ],
    )
    out = tmp_path / "run"
    for server in (a, b):
        server.container.exec_run(["touch", "/var/tmp/victim"])  # their second slow commands wait to be killed
    kill_both = killer(lambda: slow_count(a.container) >= 2 and slow_count(b.container) >= 2, a, b)
    with MockOpenAIServer(slow_then_submit) as server:
        kill_both.start()
        done, _ = swe_run(server, out, hosts, "--rounds", "4")
        kill_both.join(5)
        assert done.returncode == 1, done.stderr[-3000:]
        [line] = [line for line in done.stderr.splitlines() if line.startswith(f"{ROMAN}: ")]
        assert line.startswith(f"{ROMAN}: failed (every sandbox host is down, {ROMAN} is tried again on the next run: ")
        assert f"host a ({a.url}) did not answer" in line and f"host b ({b.url}) did not answer" in line, line
        assert not (out / PREDICTIONS_FILE).exists() or (out / PREDICTIONS_FILE).read_text() == ""
        trajectory = json.loads(trajectory_path(out, ROMAN).read_text())
        finished = [e for e in trajectory["episodes"] if e["stop_reason"] == "submitted"]
        assert sorted(e["host"] for e in finished) == ["a", "b"] and trajectory["error"] in line

        still_down, _ = swe_run(server, out, hosts, "--rounds", "4")
        assert still_down.returncode == 2
        [refusal] = [line for line in still_down.stderr.splitlines() if line.startswith("pacore: error")]
        assert "no sandbox host answers: host a (" in refusal and "; host b (" in refusal

        a.container.start()
        rex_servers.wait(a.url)
        again, _ = swe_run(server, out, hosts, "--rounds", "4")
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"host b ({b.url}) left out until it answers again" in again.stderr
    prediction = json.loads((out / PREDICTIONS_FILE).read_text())
    assert prediction["model_patch"].endswith("+# edited by the episode\n")
    episodes = json.loads(trajectory_path(out, ROMAN).read_text())["episodes"]
    assert [(e["round_index"], e["host"]) for e in episodes if e["round_index"] == 1] == [(1, "a")]
    assert [e["index"] for e in episodes if e["round_index"] == 0] == [e["index"] for e in finished]
    # slow commands started: 2 per host before the kill (the second ones cut), then only the synthesis's
    assert (slow_count(a.container), slow_count(b.container)) == (3, 2)


@pytest.mark.docker
def test_a_wrong_token_is_refused_in_one_line_before_anything_runs(row, rex_servers, tmp_path):
    [server_a] = rex_servers.start(row["image"], 1)
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-token")
    hosts = hosts_file(
        tmp_path / "hosts.json", [{"name": "a", "kind": "remote", "url": server_a.url, "token_file": str(wrong)}]
    )
    with MockOpenAIServer(slow_then_submit) as server:
        done, _ = swe_run(server, tmp_path / "run", hosts)
        assert server.requests == []
    assert done.returncode == 2
    [line] = [line for line in done.stderr.splitlines() if line.startswith("pacore: error")]
    assert "refused pacore's token (401" in line and str(wrong) in line


@pytest.mark.docker
@pytest.mark.parametrize(
    ("command", "note"),
    [
        (DETACHED, "process(es) the command left running were stopped"),
        (EIGHT_GIB, None),
        (KILLS_ITS_SUPERVISOR, "the command ended the supervisor pacore runs it under"),
    ],
    ids=["300-detached-processes", "8-GiB-in-one-fast-command", "a-command-that-kills-its-supervisor"],
)
def test_an_episode_whose_last_command_broke_a_cap_keeps_its_patch_on_a_remote_server(
    row, rex_servers, tmp_path, command, note
):
    [remote] = rex_servers.start(row["image"], 1)
    hosts = hosts_file(
        tmp_path / "hosts.json",
        [{"name": "r", "kind": "remote", "url": remote.url, "token_file": str(rex_servers.token_file)}],
    )
    out = tmp_path / "run"
    with MockOpenAIServer(edit_then(command)) as server:
        done, _ = swe_run(server, out, hosts, "--rounds", "0")
    assert done.returncode == 0, done.stderr[-3000:]
    prediction = json.loads((out / PREDICTIONS_FILE).read_text())
    assert prediction["model_patch"].endswith("+# edited by the episode\n") and len(prediction["model_patch"]) < 10_000
    [episode] = json.loads(trajectory_path(out, ROMAN).read_text())["episodes"]
    assert episode["host"] == "r" and episode["stop_reason"] == "submitted"
    if note:
        assert any(note in line for line in episode["sandbox_notes"]), episode["sandbox_notes"]
    left = remote.container.exec_run(["sh", "-c", "cat /proc/[0-9]*/comm | grep -c '^sleep$'"]).output
    assert int(left.decode().strip()) == 0  # nothing the episode started outlived it


@pytest.mark.docker
def test_a_docker_host_runs_each_episode_in_a_container_of_its_own_and_grades_as_locally(row, tmp_path):
    """The Docker-host kind: one container per episode, SWE-ReX's server inside, reached through the Docker API;
    the run leaves no container, and `swe eval` on the host grades as the local grading does."""
    hosts = hosts_file(tmp_path / "hosts.json", [{"name": "d", "kind": "docker", "slots": 2}])
    out = tmp_path / "run"
    with MockOpenAIServer(edit_then(DETACHED)) as server:
        done, pid = swe_run(server, out, hosts, "--rounds", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    trajectory = json.loads(trajectory_path(out, ROMAN).read_text())
    assert trajectory["hosts"] == {"d": 3}
    ids = {e["sandbox"]["id"] for e in trajectory["episodes"]}
    assert len(ids) == 3 and None not in ids  # a fresh container each
    assert all(any("stopped" in n for n in e["sandbox_notes"]) for e in trajectory["episodes"])
    assert containers_of(pid) == []
    predictions = str(out / PREDICTIONS_FILE)
    for source in ("gold", "no-patch", predictions):
        graded = {}
        for runtime in (["--runtime", "swerex", "--hosts", str(hosts)], []):
            result, _ = run_pacore(
                "swe",
                "eval",
                "--dataset",
                "local",
                "--instances",
                ROMAN,
                "--predictions",
                source,
                "--run-id",
                "r",
                "--output",
                str(tmp_path / f"eval-{len(runtime)}-{len(graded)}"),
                *runtime,
            )
            assert result.returncode == 0, result.stderr[-2000:]
            graded[bool(runtime)] = json.loads(result.stdout.splitlines()[-1])["resolved_ids"]
        assert graded[True] == graded[False], source
        assert graded[True] == ([ROMAN] if source == "gold" else [])
