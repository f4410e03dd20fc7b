"""Docker's multiplexed exec stream (an attached ``docker exec`` without a TTY), read with the socket's own ``recv``.

Each frame is an 8-byte header (the stream: 1 stdout, 2 stderr; the size, big-endian, in bytes 4 to 8) and then
the bytes. docker-py's readers poll the file descriptor before each read, which never wakes for bytes a TLS
socket has already decrypted: on a daemon reached over ``tcp://`` with TLS they wait until the exec ends, or for
ever. ``recv`` reads those bytes first, and the socket's timeout bounds every wait.
"""

from __future__ import annotations

from typing import Any

STDOUT = 1


def exec_socket(connection: Any) -> Any:
    """The socket under what ``exec_start(..., socket=True)`` returns (a socket, a TLS socket, or an SSH channel)."""
    return getattr(connection, "_sock", connection)


def read_frame(sock: Any) -> tuple[int, bytes] | None:
    """The next frame's stream and bytes; None at the end of the stream."""
    header = _exactly(sock, 8)
    if len(header) < 8:
        return None
    size = int.from_bytes(header[4:8], "big")
    data = _exactly(sock, size)
    return (header[0], data) if len(data) == size else None


def _exactly(sock: Any, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return bytes(data)
