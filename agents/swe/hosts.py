"""The hosts file of ``--runtime swerex``: where episodes' sandboxes may run, and how pacore reaches each.

A JSON or YAML file holding a list of hosts (or ``{"hosts": [...]}``), each with a ``name`` and a ``kind``:

* ``docker``: a Docker daemon (this machine's by default, or ``url``: ``unix://``, ``ssh://user@machine``,
  ``tcp://machine:2376`` with ``tls``). pacore starts one fresh container per episode on it, from the row's
  image, with SWE-ReX's server inside; ``slots`` containers at once.
* ``remote``: pre-started SWE-ReX servers (``urls``; one sandbox each, so as many slots as URLs), each in a
  container holding one task's repository; pacore resets it to the base commit between episodes.
* ``modal``, ``fargate``, ``daytona``: a service that makes one sandbox per episode, through SWE-ReX's own
  deployment config (``deployment``: its fields as SWE-ReX names them), ``slots`` at once.

Security: a remote server's token is read from ``token_file`` or the environment variable ``token_env``,
never from the hosts file, a command line, a log or a trajectory; a host reached over plain HTTP, or a
Docker daemon over ``tcp://`` without TLS, off loopback is refused unless the host says
``allow_plaintext: true``.
"""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pacore_graph.extend import UsageError

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"


class _Host(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="how records, trajectories and `pacore show` name it")


class DockerTLS(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ca: str = Field(description="CA certificate that signed the daemon's certificate")
    cert: str = Field(description="client certificate")
    key: str = Field(description="client key")


class DockerHost(_Host):
    """A Docker daemon on which pacore starts one container per episode, SWE-ReX's server inside."""

    kind: Literal["docker"]
    url: str | None = Field(None, description="unix://, ssh:// or tcp://; None: this machine's daemon (DOCKER_HOST)")
    tls: DockerTLS | None = None
    slots: int = Field(4, ge=1, description="containers at once")
    allow_plaintext: bool = Field(False, description="accept tcp:// without TLS to a machine off loopback")

    @model_validator(mode="after")
    def _secure(self) -> DockerHost:
        if self.url is None:
            return self
        scheme = urlsplit(self.url).scheme
        if scheme not in ("unix", "ssh", "tcp"):
            raise ValueError(f"url {self.url!r}: a Docker daemon is reached by unix://, ssh:// or tcp://")
        if scheme == "tcp" and self.tls is None and not self.allow_plaintext and not is_loopback(self.url):
            raise ValueError(
                f"url {self.url!r} is unencrypted tcp:// off loopback (anyone on the path can run containers on "
                "it): give `tls` (ca, cert, key), use ssh://, or opt in with `allow_plaintext: true`"
            )
        return self


class RemoteHost(_Host):
    """Pre-started SWE-ReX servers: one sandbox each, reset to the base commit between episodes."""

    kind: Literal["remote"]
    urls: list[str] = Field(min_length=1, description="http(s)://machine:port of each server")
    token_file: str | None = Field(None, description="a file holding the servers' token")
    token_env: str | None = Field(None, description="an environment variable holding the servers' token")
    ca: str | None = Field(None, description="CA certificate for https:// servers with a private CA")
    allow_plaintext: bool = Field(False, description="accept http:// to a machine off loopback")
    workdir: str = Field("/testbed", description="the repository in each server's container")

    @model_validator(mode="before")
    @classmethod
    def _one_url(cls, data: Any) -> Any:
        if isinstance(data, dict) and "url" in data:
            data = dict(data)
            data["urls"] = [data.pop("url"), *data.get("urls", [])]
        if isinstance(data, dict) and "token" in data:
            raise ValueError(
                "a token is never written in the hosts file: put it in a file (`token_file`) or an environment "
                "variable (`token_env`)"
            )
        return data

    @model_validator(mode="after")
    def _secure(self) -> RemoteHost:
        if (self.token_file is None) == (self.token_env is None):
            raise ValueError("give exactly one of `token_file` or `token_env` (every SWE-ReX server needs a token)")
        for url in self.urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname or not parts.port:
                raise ValueError(f"url {url!r}: give http(s)://machine:port")
            if parts.scheme == "http" and not self.allow_plaintext and not is_loopback(url):
                raise ValueError(
                    f"url {url!r} is plain HTTP off loopback (the token and every command would cross the network "
                    "in clear): serve it behind TLS (https://), or opt in with `allow_plaintext: true`"
                )
        return self

    def token(self) -> str:
        """The servers' token, read now (never kept in a record)."""
        if self.token_file is not None:
            try:
                token = Path(self.token_file).expanduser().read_text().strip()
            except OSError as exc:
                raise UsageError(
                    f"host {self.name}: cannot read token_file {self.token_file} ({exc.strerror})"
                ) from None
            where = f"token_file {self.token_file}"
        else:
            token = os.environ.get(self.token_env or "", "").strip()
            where = f"environment variable {self.token_env}"
        if not token:
            raise UsageError(f"host {self.name}: {where} is empty (every SWE-ReX server needs a token)")
        return token


class ServiceHost(_Host):
    """A service making one sandbox per episode through SWE-ReX's deployment config (not tested here)."""

    kind: Literal["modal", "fargate", "daytona"]
    slots: int = Field(4, ge=1, description="sandboxes at once")
    deployment: dict[str, Any] = Field(
        default_factory=dict, description="SWE-ReX's deployment config for this kind, less its `type`"
    )


Host = Annotated[DockerHost | RemoteHost | ServiceHost, Field(discriminator="kind")]


class HostsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hosts: list[Host] = Field(min_length=1)

    @model_validator(mode="after")
    def _distinct(self) -> HostsFile:
        names = [host.name for host in self.hosts]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"host names must differ: {', '.join(twice)} appear(s) twice")
        return self


def host_slots(host: DockerHost | RemoteHost | ServiceHost) -> int:
    return len(host.urls) if isinstance(host, RemoteHost) else host.slots


def is_loopback(url: str) -> bool:
    """Whether ``url``'s machine is this one's loopback (127.0.0.0/8, ::1, localhost)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_hosts(path: str | Path) -> HostsFile:
    """Read and check a hosts file; a ``UsageError`` in one line saying what is wrong."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"--hosts {path}: {exc.strerror}") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as exc:  # json and yaml raise their own types
        kind = "YAML" if path.suffix in (".yaml", ".yml") else "JSON"
        raise UsageError(f"--hosts {path}: not valid {kind} ({exc})") from None
    if isinstance(data, list):
        data = {"hosts": data}
    try:
        return HostsFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UsageError(f"--hosts {path}: {where}: {first['msg'].removeprefix('Value error, ')}") from None
