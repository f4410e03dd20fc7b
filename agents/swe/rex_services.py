"""Sandboxes that a service makes (Modal, AWS Fargate, Daytona), through SWE-ReX's own deployments.

pacore builds the host's SWE-ReX deployment config (its ``deployment`` fields, the row's image unless the
config names one: ``{image}`` and ``{instance_id}`` are filled in), starts it, and speaks to the runtime
SWE-ReX hands back; the service's credentials are SWE-ReX's business (Modal's token file, AWS's
environment, Daytona's key), never the hosts file's. Not tested here: these services cannot be reached
from the machines this project is built on; they work as SWE-ReX makes them work.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from pacore_agents.swe.rex_http import HostUnreachable, RemoteFailure

if TYPE_CHECKING:
    from pacore_agents.swe.hosts import ServiceHost

SECRET_WORDS = ("key", "token", "secret", "password")


def check_service_config(host: ServiceHost) -> None:
    """Refuse credentials written into the hosts file (they belong to the service's own configuration)."""
    for field in host.deployment:
        if any(word in field.lower() for word in SECRET_WORDS):
            raise ValueError(
                f"host {host.name}: deployment.{field} looks like a credential: give it to {host.kind} the way "
                "SWE-ReX reads it (its environment variables or token files), not in the hosts file"
            )


class DeploymentTransport:
    """SWE-ReX's API on a runtime of a started deployment (each call on a fresh event loop: SWE-ReX's remote
    runtime opens a new HTTP session for every request anyway)."""

    def __init__(self, host: ServiceHost, row: dict[str, Any]):
        from swerex.deployment.config import DaytonaDeploymentConfig, FargateDeploymentConfig, ModalDeploymentConfig

        configs = {
            "modal": ModalDeploymentConfig,
            "fargate": FargateDeploymentConfig,
            "daytona": DaytonaDeploymentConfig,
        }
        fields = dict(host.deployment)
        image = str(fields.get("image", "{image}"))
        fields["image"] = image.format(image=row["image"], instance_id=row["instance_id"])
        self.where = f"{host.kind} sandbox of host {host.name}"
        self._deployment = configs[host.kind](**fields).get_deployment()
        try:
            asyncio.run(self._deployment.start())
        except Exception as exc:
            raise HostUnreachable(f"{self.where} did not start ({type(exc).__name__}: {exc})") from None
        self._runtime = self._deployment.runtime

    def call(self, endpoint: str, payload: dict[str, Any] | None, *, timeout: float) -> dict[str, Any]:
        from swerex.runtime.abstract import Command, WriteFileRequest

        async def request() -> Any:
            if endpoint == "execute":
                return await self._runtime.execute(Command(**(payload or {})))
            if endpoint == "write_file":
                return await self._runtime.write_file(WriteFileRequest(**(payload or {})))
            if endpoint == "is_alive":
                return await self._runtime.is_alive()
            raise ValueError(f"no such endpoint here: {endpoint}")

        try:
            answer = asyncio.run(asyncio.wait_for(request(), timeout))
        except (TimeoutError, OSError) as exc:
            raise HostUnreachable(f"{self.where} did not answer ({type(exc).__name__}: {exc})") from None
        except Exception as exc:
            raise RemoteFailure(f"{self.where} /{endpoint}: {type(exc).__name__}: {exc}") from None
        data: dict[str, Any] = answer.model_dump()
        return data

    def close(self) -> None:
        try:
            asyncio.run(self._deployment.stop())
        except Exception:  # the service ends it on its own timeout anyway
            pass
