"""One placement for the whole run: every episode of every round of every instance in flight goes to the
host with the most free slots, so an instance's K episodes may span hosts.

A host that stops answering (its server killed, its machine gone, a request silent past its bound) is left
out until its health check passes again; a prober checks it every ``PROBE_S`` seconds meanwhile. The
episodes it was running start again from the base commit elsewhere (``repair_episode.py``); when no host
that can serve an instance answers, opening a sandbox fails at once with :class:`NoHostAvailable`, and the
instance is left to the next run. A ``remote`` server serves the one repository its container holds: it
is offered only episodes of instances whose base commit it has (asked once per server and commit).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pacore_agents.swe.hosts import DockerHost, HostsFile, RemoteHost, ServiceHost, host_slots
from pacore_agents.swe.rex_http import HostUnreachable, RexConnection, TokenRefused, tcp_connector
from pacore_agents.swe.rex_sandbox import HostLost, RexSandbox
from pacore_agents.swe.sandbox import BaseSandbox, SandboxError
from pacore_graph.extend import UsageError

log = logging.getLogger(__name__)

PROBE_S = 2.0  # between health checks of a host left out
MIN_DOCKER_API = "1.24"  # the oldest Engine API a daemon still answers; only to ask it for its own
HEALTH_TIMEOUT_S = 5.0
_NOT_SERVED = "not-served"


class NoHostAvailable(SandboxError):
    """No host that can serve the instance answers: the instance is left to the next run."""


class NotServed(SandboxError):
    """A remote server's repository lacks the instance's base commit."""


@dataclass
class Slot:
    """One sandbox place: a container on a Docker host or service, or one remote server."""

    host: HostState
    index: int
    busy: bool = False
    down: str | None = None  # remote servers fail one by one
    url: str | None = None
    connection: RexConnection | None = None  # a remote server's, kept between its episodes
    serves: dict[str, bool] = field(default_factory=dict)  # base commit -> whether it has it


@dataclass
class HostState:
    spec: DockerHost | RemoteHost | ServiceHost
    slots: list[Slot] = field(default_factory=list)
    down: str | None = None
    client: Any = None  # a Docker host's docker-py client
    token: str = ""  # a remote host's, read once; never written anywhere

    @property
    def name(self) -> str:
        return self.spec.name

    def usable(self) -> list[Slot]:
        return [slot for slot in self.slots if self.down is None and slot.down is None]


class HostPool:
    """The hosts of a ``--hosts`` file, their free slots and health; :meth:`open` is the sandbox opener."""

    def __init__(
        self,
        hosts: HostsFile,
        *,
        caps: dict[str, Any] | None = None,
        log: Callable[[str], None] = print,
    ):
        self.say = log
        self.caps = caps or {}
        self.hosts = [HostState(spec) for spec in hosts.hosts]
        for host in self.hosts:
            host.slots = [Slot(host, n) for n in range(host_slots(host.spec))]
            if isinstance(host.spec, RemoteHost):
                for slot, url in zip(host.slots, host.spec.urls, strict=True):
                    slot.url = url
        self._lock = threading.Condition()
        self._probing: set[str] = set()
        self._closed = False
        self.placed: dict[str, int] = {host.name: 0 for host in self.hosts}

    @property
    def total_slots(self) -> int:
        return sum(len(host.slots) for host in self.hosts)

    # ------------------------------------------------------------------------------------------ start

    def connect(self) -> None:
        """Reach every host once, before anything is spent: a wrong token or an unreadable one is a
        ``UsageError`` in one line; a host that does not answer is left out (said once) until it does;
        no host answering at all is a ``UsageError``."""
        from pacore_agents.swe.rex_services import check_service_config

        for host in self.hosts:
            if isinstance(host.spec, RemoteHost):
                host.token = host.spec.token()
            if isinstance(host.spec, ServiceHost):
                try:
                    check_service_config(host.spec)
                except ValueError as exc:
                    raise UsageError(str(exc)) from None
        for host in self.hosts:
            for failure in self._health(host, starting=True):
                self._left_out(host, failure)
        if not any(host.usable() for host in self.hosts):
            raise UsageError(f"no sandbox host answers: {'; '.join(self._why_down(host) for host in self.hosts)}")

    def _health(self, host: HostState, *, starting: bool = False) -> list[tuple[Slot | None, str]]:
        """What fails a health check now: (the slot, or None for the whole host; why)."""
        spec = host.spec
        if isinstance(spec, DockerHost):
            try:
                host.client = host.client or docker_client_for(spec)
                host.client.ping()
            except Exception as exc:  # docker-py raises many unrelated types here
                return [(None, f"its Docker daemon does not answer ({_short(exc)})")]
            return []
        if isinstance(spec, RemoteHost):
            failures: list[tuple[Slot | None, str]] = []
            for slot in host.slots:
                if slot.busy:
                    continue  # a server running a command answers nothing else: its episode tells
                probe = RexConnection(tcp_connector(slot.url or "", ca=spec.ca), host.token, where=_where(host, slot))
                try:
                    probe.call("is_alive", None, timeout=HEALTH_TIMEOUT_S)
                except TokenRefused as exc:
                    if starting:
                        raise UsageError(f"{exc}: check {_token_source(spec)}") from None
                    failures.append((slot, str(exc)))
                except (HostUnreachable, SandboxError) as exc:
                    failures.append((slot, str(exc)))
                finally:
                    probe.close()
            return failures
        return []  # a service: its deployments say when they fail

    # ------------------------------------------------------------------------------------------ placement

    def open(self, row: dict[str, Any]) -> BaseSandbox:
        """A fresh sandbox for ``row`` on the host with the most free slots (waiting for one if all are taken);
        a host that fails while opening is left out and the next one tried."""
        while True:
            slot = self._acquire(row)
            try:
                sandbox = self._open_on(slot, row)
            except NotServed:
                with self._lock:
                    slot.serves[row["base_commit"]] = False
                self._release(slot)
                continue
            except HostLost as exc:
                self._release(slot)
                self.lost(exc.host, exc.reason, slot=slot)
                continue
            except BaseException:
                self._release(slot)
                raise
            with self._lock:
                self.placed[slot.host.name] += 1
            return sandbox

    def _acquire(self, row: dict[str, Any]) -> Slot:
        base = row["base_commit"]
        with self._lock:
            while True:
                if self._closed:
                    raise NoHostAvailable("the run is ending")
                able = [s for host in self.hosts for s in host.usable() if s.serves.get(base) is not False]
                free = [slot for slot in able if not slot.busy]
                if free:
                    slot = max(
                        free, key=lambda s: (sum(not o.busy for o in s.host.usable()), -self.hosts.index(s.host))
                    )
                    slot.busy = True
                    return slot
                if not able:
                    raise NoHostAvailable(self._none_message(row))
                self._lock.wait(1.0)

    def _none_message(self, row: dict[str, Any]) -> str:
        base = row["base_commit"]
        serving = [h for h in self.hosts if any(s.serves.get(base) is not False for s in h.slots)]
        if not serving:
            return (
                f"no sandbox host serves {row['instance_id']} (no remote server's repository has its base commit "
                f"{base}): tried again on the next run"
            )
        every = "every sandbox host" if len(serving) == len(self.hosts) else "every sandbox host that can serve it"
        reasons = "; ".join(self._why_down(host) for host in serving)
        return f"{every} is down, {row['instance_id']} is tried again on the next run: {reasons}"

    def _why_down(self, host: HostState) -> str:
        """``host NAME ...: why`` for a message (a remote server's reason names its host and address already)."""
        reason = self._reason(host)
        return reason if reason.startswith(f"host {host.name} ") else f"host {host.name}: {reason}"

    def _open_on(self, slot: Slot, row: dict[str, Any]) -> BaseSandbox:
        host, spec = slot.host, slot.host.spec

        def release(_: BaseSandbox) -> None:
            self._release(slot)

        def lost(reason: str) -> None:  # before the sandbox closes: its slot is never handed out meanwhile
            self.lost(host.name, reason, slot=slot)

        if isinstance(spec, DockerHost):
            from pacore_agents.swe.rex_docker import RexDockerSandbox

            try:
                return RexDockerSandbox(
                    row, host=host.name, client=host.client, on_close=release, on_lost=lost, **self.caps
                )
            except SandboxError:
                if self._health(host):  # the daemon went away while the container was made
                    raise HostLost(host.name, "its Docker daemon stopped answering") from None
                raise
        if isinstance(spec, RemoteHost):
            if slot.connection is None:
                slot.connection = RexConnection(
                    tcp_connector(slot.url or "", ca=spec.ca), host.token, where=_where(host, slot)
                )
            if row["base_commit"] not in slot.serves:
                slot.serves[row["base_commit"]] = _has_commit(
                    slot.connection, spec.workdir, row["base_commit"], host.name
                )
                if not slot.serves[row["base_commit"]]:
                    raise NotServed(f"{_where(host, slot)} lacks {row['base_commit']}")
            return RexSandbox(
                row,
                slot.connection,
                host=host.name,
                workdir=spec.workdir,
                fsize=_disk_bytes(self.caps),
                reset=True,
                on_close=release,
                on_lost=lost,
            )
        from pacore_agents.swe.rex_services import DeploymentTransport

        try:
            transport = DeploymentTransport(spec, row)
        except HostUnreachable as exc:
            raise HostLost(host.name, str(exc)) from None

        def finish(sandbox: BaseSandbox) -> None:
            transport.close()
            self._release(slot)

        return RexSandbox(
            row,
            transport,
            host=host.name,
            workdir=str(spec.deployment.get("workdir", "/testbed")),
            fsize=_disk_bytes(self.caps),
            on_close=finish,
            on_lost=lost,
        )

    def _release(self, slot: Slot) -> None:
        with self._lock:
            slot.busy = False
            self._lock.notify_all()

    # ------------------------------------------------------------------------------------------ health

    def lost(self, host_name: str, reason: str, *, slot: Slot | None = None) -> None:
        """A host (or one remote server of it) stopped answering: leave it out and probe it until it answers."""
        host = next(h for h in self.hosts if h.name == host_name)
        with self._lock:
            if isinstance(host.spec, RemoteHost):
                if slot is None or slot.down is not None:
                    return
                slot.down = reason
                if slot.connection is not None:
                    slot.connection.close()
                    slot.connection = None
            elif host.down is not None:
                return
            else:
                host.down = reason
        self._left_out(host, (slot, reason) if isinstance(host.spec, RemoteHost) else (None, reason))

    def _left_out(self, host: HostState, failure: tuple[Slot | None, str]) -> None:
        slot, reason = failure
        with self._lock:
            if slot is not None:
                slot.down = slot.down or reason
            else:
                host.down = host.down or reason
        what = f"host {host.name}" + (f" ({slot.url})" if slot is not None and slot.url else "")
        self.say(f"{what} left out until it answers again: {reason}"[:400])
        with self._lock:
            if host.name in self._probing or self._closed:
                return
            self._probing.add(host.name)
        threading.Thread(target=self._probe, args=(host,), name=f"pacore-probe-{host.name}", daemon=True).start()

    def _probe(self, host: HostState) -> None:
        while True:
            time.sleep(PROBE_S)
            with self._lock:
                if self._closed:
                    self._probing.discard(host.name)
                    return
            failures = self._health(host)
            failing = {id(slot) for slot, _ in failures if slot is not None}
            whole = any(slot is None for slot, _ in failures)
            with self._lock:
                back = []
                if host.down is not None and not whole:
                    host.down = None
                    back.append(host.name)
                for slot in host.slots:
                    if slot.down is not None and id(slot) not in failing:
                        slot.down = None
                        back.append(slot.url or host.name)
                if back:
                    self._lock.notify_all()
                still = host.down is not None or any(slot.down is not None for slot in host.slots)
                if not still:
                    self._probing.discard(host.name)
            if back:
                self.say(f"host {host.name} answers again: back in the placement ({', '.join(back)})")
            if not still:
                return

    def _reason(self, host: HostState) -> str:
        if host.down:
            return host.down
        reasons = [slot.down for slot in host.slots if slot.down]
        return reasons[0] if reasons else "busy"

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()
            for host in self.hosts:
                for slot in host.slots:
                    if slot.connection is not None:
                        slot.connection.close()
                        slot.connection = None


def docker_client_for(spec: DockerHost) -> Any:
    """A docker-py client for the host's daemon (its TLS files, or SSH through the ssh command)."""
    import docker

    if spec.url is None:
        from pacore_agents.swe.images import docker_client

        return docker_client()
    if spec.tls is None:
        return docker.DockerClient(
            base_url=spec.url, timeout=600, use_ssh_client=spec.url.startswith("ssh://"), max_pool_size=64
        )
    # requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE (set on many machines) replace a session's own CA
    # (psf/requests#3829): the daemon would be checked against the system's CAs, not the host's `ca`. So the
    # client ignores the environment, and asks the daemon's API version itself before it is made.
    tls = docker.tls.TLSConfig(client_cert=(spec.tls.cert, spec.tls.key), ca_cert=spec.tls.ca, verify=True)
    probe = docker.APIClient(base_url=spec.url, tls=tls, version=MIN_DOCKER_API, timeout=30)
    probe.trust_env = False
    try:
        version = probe.version(api_version=False)["ApiVersion"]
    finally:
        probe.close()
    client = docker.DockerClient(base_url=spec.url, tls=tls, version=version, timeout=600, max_pool_size=64)
    client.api.trust_env = False
    return client


def _has_commit(connection: RexConnection, workdir: str, commit: str, host: str) -> bool:
    try:
        answer = connection.call(
            "execute",
            # rev-parse, not cat-file -e: a repository built from a snapshot names its base commit by a replace ref
            {
                "command": ["git", "-C", workdir, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"],
                "timeout": 60,
            },
            timeout=70,
        )
    except (HostUnreachable, TokenRefused) as exc:
        raise HostLost(host, str(exc)) from None
    return answer.get("exit_code") == 0


def _disk_bytes(caps: dict[str, Any]) -> int:
    from pacore_agents.swe.docker_sandbox import parse_size

    return parse_size(str(caps.get("disk", "4g")))


def _where(host: HostState, slot: Slot) -> str:
    return f"host {host.name} ({slot.url})" if slot.url else f"host {host.name}"


def _token_source(spec: RemoteHost) -> str:
    return f"token_file {spec.token_file}" if spec.token_file else f"the environment variable {spec.token_env}"


def _short(exc: BaseException) -> str:
    """The error in a line; a long one (docker-py nests the cause at the end) keeps its start and its end."""
    text = (str(exc) or type(exc).__name__).splitlines()[0]
    return text if len(text) <= 240 else f"{text[:80]} ... {text[-150:]}"
