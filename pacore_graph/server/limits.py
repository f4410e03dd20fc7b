"""What one client can hold of the endpoint: bytes, seconds, connections. Every default is documented in
docs/serving.md; ``pacore serve`` takes the main ones as flags.

Why each bound: a request body is buffered and sent upstream once per trajectory (``max_request_bytes``);
a client that connects and sends nothing, or trickles its head or body, would otherwise hold a socket and a
file descriptor forever (``header_timeout``, ``body_timeout``, ``keep_alive_timeout``, ``max_connections``);
an upstream that hangs would hold a plain client forever (``request_timeout``, after which the run's
upstream requests are closed).
"""

from __future__ import annotations

import resource
import sys

from pydantic import BaseModel, ConfigDict, Field

RESERVED_FILES = 64  # descriptors kept for the listening socket, logs, the upstream session's spares


class ServerLimits(BaseModel):
    """The endpoint's bounds on a client. Invalid values fail at construction."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_request_bytes: int = Field(
        8 * 2**20, ge=1024, description="largest request body; a larger one is a 413, read no further"
    )
    request_timeout: float | None = Field(
        3600.0,
        gt=0,
        description="seconds a request's PaCoRe run may take; then its upstream requests are closed "
        "and the client gets a 504 (None: no limit)",
    )
    header_timeout: float = Field(
        30.0,
        gt=0,
        description="seconds a connection may take to send a request's head, from its opening or "
        "from the previous reply; then it is closed",
    )
    body_timeout: float = Field(60.0, gt=0, description="seconds a client may take to send a request's body")
    keep_alive_timeout: float = Field(5.0, gt=0, description="seconds an idle keep-alive connection stays open")
    max_connections: int = Field(
        1024,
        ge=1,
        description="open client connections at most; one more is answered 503 and closed (lowered to "
        "fit the open-file limit)",
    )


def raise_open_file_limit() -> int:
    """Raise this process's soft open-file limit to its hard limit (as the serving emulator does); the new soft
    limit. For ``pacore serve``, which owns its process: a library user's process is left as it is."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return soft if soft != resource.RLIM_INFINITY else sys.maxsize
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError):
        return soft
    return wanted


def connection_limit(limits: ServerLimits, upstream_slots: int) -> int:
    """``max_connections``, lowered so that the client connections, one upstream socket per trajectory in
    flight and a reserve fit the open-file limit: past it every new request would fail at accept()."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limits.max_connections
    return max(1, min(limits.max_connections, soft - upstream_slots - RESERVED_FILES))
