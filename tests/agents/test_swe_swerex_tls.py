"""A `docker` sandbox host reached over ``tcp://`` with TLS (``--runtime swerex``), on a second Docker daemon this
test starts: a socket, data root and exec root of its own, TLS on a loopback port, certificates made here (a CA,
the daemon's, pacore's). The daemon holds only the task's image, moved there as docs/swe-sandboxes.md says (``docker
save | docker load``): pacore builds nothing there, runs every episode there, and leaves no container behind.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
from mock_openai import MockOpenAIServer
from rex_hosts import hosts_file
from test_swe_sandbox_caps import EDIT, ROMAN, edit_then
from test_swe_swerex import row, swe_run  # noqa: F401 - the module's fixture
from waits import wait_until

from pacore_agents.swe.rex_local import free_port
from pacore_agents.swe.run import trajectory_path

pytestmark = pytest.mark.docker


@dataclass
class TLSDaemon:
    url: str
    tls: dict[str, str]
    client: docker.DockerClient


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certificates(folder: Path) -> None:
    """A CA, the daemon's certificate for 127.0.0.1 and a client certificate, all signed by the CA."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "1",
            "-subj", "/CN=pacore test CA", cwd=folder)  # fmt: skip
    for name, subject, usage in (("server", "/CN=127.0.0.1", "serverAuth"), ("client", "/CN=pacore", "clientAuth")):
        extensions = f"extendedKeyUsage={usage}\n" + ("subjectAltName=IP:127.0.0.1\n" if name == "server" else "")
        (folder / f"{name}.ext").write_text(extensions)
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}-key.pem", "-out", f"{name}.csr",
                "-subj", subject, cwd=folder)  # fmt: skip
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
                "-out", f"{name}.pem", "-days", "1", "-extfile", f"{name}.ext", cwd=folder)  # fmt: skip


@pytest.fixture
def tls_daemon(row):  # noqa: F811 - the module's fixture, imported above
    """A second dockerd on TLS at a loopback port, holding the task's image; stopped and removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="pacore-dockerd-", dir="/tmp"))  # short: containerd's socket paths
    make_certificates(folder)
    (folder / "daemon.json").write_text("{}")  # not the machine's /etc/docker/daemon.json
    port, socket = free_port(), folder / "docker.sock"
    daemon = subprocess.Popen(
        ["dockerd", "--config-file", str(folder / "daemon.json"), "--data-root", str(folder / "data"),
         "--exec-root", str(folder / "exec"), "--pidfile", str(folder / "dockerd.pid"), "-H", f"unix://{socket}",
         "-H", f"tcp://127.0.0.1:{port}", "--tlsverify", "--tlscacert", str(folder / "ca.pem"),
         "--tlscert", str(folder / "server.pem"), "--tlskey", str(folder / "server-key.pem"),
         "--bridge=none", "--iptables=false", "--ip6tables=false"],
        stdout=(folder / "dockerd.log").open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    local = None
    try:
        wait_until(lambda: _answers(socket), 60, what="the second dockerd")
        local = docker.DockerClient(base_url=f"unix://{socket}")
        save = subprocess.Popen(["docker", "save", row["image"]], stdout=subprocess.PIPE)
        subprocess.run(["docker", "-H", f"unix://{socket}", "load", "-q"], stdin=save.stdout, check=True)
        assert save.wait() == 0
        tls = {"ca": str(folder / "ca.pem"), "cert": str(folder / "client.pem"), "key": str(folder / "client-key.pem")}
        yield TLSDaemon(f"tcp://127.0.0.1:{port}", tls, local)
    finally:
        if local is not None:
            local.close()
        if daemon.poll() is None and _answers(socket):
            left = docker.DockerClient(base_url=f"unix://{socket}")
            for container in left.containers.list(all=True):
                container.remove(force=True)
            left.close()
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _answers(socket: Path) -> bool:
    try:
        client = docker.DockerClient(base_url=f"unix://{socket}")
    except Exception:  # still starting
        return False
    try:
        return bool(client.ping())
    finally:
        client.close()


def test_a_docker_host_over_tls_runs_the_episodes_on_its_daemon_with_only_the_image_there(tls_daemon, tmp_path):
    images_before = {tag for image in tls_daemon.client.images.list() for tag in image.tags}
    hosts = hosts_file(
        tmp_path / "hosts.json", [{"name": "far", "kind": "docker", "url": tls_daemon.url, "tls": tls_daemon.tls}]
    )
    since = int(time.time()) - 1
    out = tmp_path / "run"
    with MockOpenAIServer(edit_then("git status --short")) as server:
        done, _ = swe_run(server, out, hosts, "--rounds", "2")
        assert done.returncode == 0, done.stderr[-3000:]
        trajectory = json.loads(trajectory_path(out, ROMAN).read_text())
        assert trajectory["hosts"] == {"far": 3}
        created = {
            event["id"]
            for event in tls_daemon.client.api.events(
                since=since, until=int(time.time()) + 1, filters={"type": "container", "event": "create"}, decode=True
            )
        }
        assert {episode["sandbox"]["id"] for episode in trajectory["episodes"]} <= created  # made on that daemon
        assert tls_daemon.client.containers.list(all=True) == []
        assert {tag for image in tls_daemon.client.images.list() for tag in image.tags} == images_before
        assert EDIT.split("'")[1] in json.loads((out / "predictions.jsonl").read_text())["model_patch"]

        # The same daemon without the client certificate: refused before anything runs, in one line.
        plain = hosts_file(tmp_path / "plain.json", [{"name": "far", "kind": "docker", "url": tls_daemon.url}])
        refused, _ = swe_run(server, tmp_path / "refused", plain)
    assert refused.returncode == 2
    [line] = [line for line in refused.stderr.splitlines() if line.startswith("pacore: error")]
    assert line.startswith("pacore: error: no sandbox host answers: host far: its Docker daemon does not answer")
