"""Issue 25's check, as an independent user would run it: ``python -m pacore_benchmarks.perf.serve_probe``.

Against real ``pacore serve`` processes in front of the serving emulator, and real ``pacore solve`` runs, on
loopback only:

- **refusals**: each bad request is refused in OpenAI's error shape, one short line without URLs, with zero
  upstream requests (the emulator's own count);
- **connections**: idle and trickling sockets are closed while other clients are served; under an
  open-file limit of 1024, 1,050 idle sockets neither kill the server nor keep it from serving once they
  are closed; a 40 MB body is a 413 and leaves the server's memory where it was;
- **deadline**: a hung upstream gets a plain client a 504 after ``--request-timeout`` and every upstream
  request is closed;
- **the CLI**: a foreign folder and a user's results file are left byte for byte as they were; bad
  input is refused at once in one line, with nothing sent upstream;
- **load**: 200 concurrent clients (100 plain, 100 streamed) answered with exactly K+1 upstream requests
  each; ``--max-concurrency 16`` holds the upstream at 16 in flight; 100 + 100 clients that disconnect
  in round 1 get every upstream request closed (the time until the emulator saw the last close), five
  waves in a row: each wave reaching all 800 of its trajectories in flight upstream (under a 1024 limit)
  shows the limiter kept no slot of the wave before; the server's memory (RSS, before each wave and after
  the last) stays flat once the chat model's memo of 256 message lists is full.

Prints one line per check, then a JSON summary as the last line; exits 1 if any check failed. Takes a
minute or two on 2 busy cores. Figures measured with it are in docs/serving.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from pacore_emulator import Emulator, EmulatorConfig, FaultRates

USAGE = 2  # the exit status of a refused input (docs/commands.md)
K = 4  # trajectories of the schedule the load runs ([4]: K + 1 upstream requests per answer)
RESULTS: list[dict[str, Any]] = []


def check(name: str, ok: bool, **figures: Any) -> bool:
    RESULTS.append({"check": name, "ok": bool(ok), **figures})
    shown = ", ".join(f"{key}={value}" for key, value in figures.items())
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + shown if shown else ''}", flush=True)
    return ok


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextmanager
def pacore_serve(
    emu: Emulator, *flags: str, file_limit: int | None = None
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A ``pacore serve`` process in front of ``emu``; (base URL, process). Stopped with Ctrl-C (killed if it
    does not stop)."""
    port = free_port()

    def limit_files() -> None:
        if file_limit:
            resource.setrlimit(resource.RLIMIT_NOFILE, (file_limit, file_limit))

    process = subprocess.Popen(
        [sys.executable, "-m", "pacore_graph.cli", "serve", "--base-url", emu.base_url, "--port", str(port), *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit_files,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pacore serve did not start: {process.stderr.read() if process.stderr else ''}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/v1", process
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def port_of(base: str) -> int:
    return int(base.rsplit(":", 1)[1].split("/")[0])


def send_large_body(port: int, size: int, chunked: bool) -> int:
    """POST ``size`` bytes of body (declared by Content-Length, or chunked); the status the server answered
    (0: none). With Content-Length the head alone is sent first: the answer must not need the body."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % size
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s\r\n\r\n" % framing
        )
        if chunked:
            piece = b"x" * (1 << 20)
            try:
                for _ in range(size >> 20):
                    sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            except OSError:
                pass  # the server answered and closed once past its limit
        try:
            head = sock.recv(65536)
        except OSError:
            return 0
    return int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0


def problem(number: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Problem {number}: what is {17 + number}*23?"}]


# --------------------------------------------------------------------------------------------- refusals

TOOL = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
BAD_JSON: dict[str, dict[str, Any]] = {
    "tool_choice names no offered tool": {
        "tools": [TOOL],
        "tool_choice": {"type": "function", "function": {"name": "rm"}},
    },
    "tool_choice required without tools": {"tool_choice": "required"},
    "tool parameters not a schema": {"tools": [{"type": "function", "function": {"name": "b", "parameters": 5}}]},
    "empty user content": {"messages": [{"role": "user", "content": ""}]},
    "null user content": {"messages": [{"role": "user", "content": None}]},
    "image-only user content": {
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}
        ]
    },
    "rounds ['2']": {"pacore": {"rounds": ["2"]}},
    "rounds [true]": {"pacore": {"rounds": [True]}},
    "rounds [100000]": {"pacore": {"rounds": [100000]}},
    "assistant tool_calls of the wrong type": {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": "x"},
            {"role": "user", "content": "x"},
        ]
    },
    "messages an object": {"messages": {"role": "user", "content": "hi"}},
    "temperature a string": {"temperature": "0.5"},
}
BAD_BYTES = {
    "Infinity": b'{"model": "M", "messages": [{"role": "user", "content": "x"}], "presence_penalty": Infinity}',
    "NaN": b'{"model": "M", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
    "lone surrogate": b'{"model": "M", "messages": [{"role": "user", "content": "\\ud800"}]}',
    "JSON nested 100,000 deep": b'{"model": "M", "messages": [], "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "not JSON": b"{nope",
}


def probe_refusals(emu: Emulator) -> None:
    emu.reset()
    with pacore_serve(emu, "--rounds", str(K)) as (base, _):
        model = emu.config.model
        bodies = {
            name: json.dumps({"model": model, "messages": problem(0), **fields}).encode()
            for name, fields in BAD_JSON.items()
        }
        bodies.update({name: raw.replace(b'"M"', json.dumps(model).encode()) for name, raw in BAD_BYTES.items()})
        for name, body in bodies.items():
            response = httpx.post(
                f"{base}/chat/completions", content=body, timeout=30, headers={"Content-Type": "application/json"}
            )
            try:
                error = response.json()["error"]
                shaped = set(error) == {"message", "type", "param", "code"}
            except (ValueError, KeyError, TypeError):
                error, shaped = {"message": response.text[:80]}, False
            message = error.get("message") or ""
            check(
                f"refused: {name}",
                400 <= response.status_code < 500
                and shaped
                and "\n" not in message
                and len(message) < 400
                and not re.search(r"https?://", message),
                status=response.status_code,
                message=message[:90],
            )
        status = send_large_body(port_of(base), 40 << 20, chunked=False)
        check("refused: a 40 MB body, on its Content-Length alone", status == 413, status=status)
    check(
        "nothing sent upstream for any refused request",
        emu.stats()["requests"] == 0,
        upstream_requests=emu.stats()["requests"],
    )


def probe_upstream_errors() -> None:
    with Emulator(EmulatorConfig(ttft=0.01, faults=FaultRates(http_503=1.0))) as emu:
        with pacore_serve(emu, "--rounds", "2") as (base, _):
            response = httpx.post(
                f"{base}/chat/completions", timeout=120, json={"model": emu.config.model, "messages": problem(0)}
            )
    error = response.json().get("error", {})
    message = error.get("message", "")
    check(
        "an upstream failing every trajectory: a short 502 without URLs",
        response.status_code == 502 and len(message) < 400 and "127.0.0.1" not in message and "emulated" not in message,
        status=response.status_code,
        message=message[:100],
    )


def probe_password(emu: Emulator) -> None:
    url = emu.base_url.replace("http://", "http://alice:s3cr3t@")
    run = subprocess.run(
        [sys.executable, "-m", "pacore_graph.cli", "serve", "--base-url", url, "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    check(
        "a --base-url password is never printed",
        "s3cr3t" not in run.stderr + run.stdout and "alice" in run.stderr,
        stderr=run.stderr.strip()[-90:],
    )


# ------------------------------------------------------------------------------------------ connections


def wait_closed(sockets: list[socket.socket], seconds: float) -> int:
    """How many of ``sockets`` the server closed (EOF or reset) within ``seconds``."""
    closed: set[int] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and len(closed) < len(sockets):
        for position, sock in enumerate(sockets):
            if position in closed:
                continue
            try:
                if sock.recv(65536, socket.MSG_DONTWAIT) == b"":
                    closed.add(position)
            except BlockingIOError:
                pass
            except OSError:
                closed.add(position)
        time.sleep(0.05)
    return len(closed)


def probe_connections(emu: Emulator) -> None:
    emu.reset()
    with pacore_serve(emu, "--rounds", str(K), "--header-timeout", "2") as (base, process), ExitStack() as stack:
        port = port_of(base)
        idle = [stack.enter_context(socket.create_connection(("127.0.0.1", port))) for _ in range(300)]
        trickle = stack.enter_context(socket.create_connection(("127.0.0.1", port)))
        trickle.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")
        started = time.monotonic()
        served = [
            httpx.post(
                f"{base}/chat/completions", timeout=60, json={"model": emu.config.model, "messages": problem(n)}
            ).status_code
            for n in range(5)
        ]
        for _ in range(10):  # a header line every 0.3 s would keep a plain keep-alive timer going
            try:
                trickle.sendall(b"X-Slow: 1\r\n")
            except OSError:
                break
            time.sleep(0.3)
        closed = wait_closed([*idle, trickle], 10)
        check(
            "300 idle sockets and a trickling one closed while 5 others were served",
            closed == 301 and served == [200] * 5,
            closed=closed,
            served=served,
            seconds=round(time.monotonic() - started, 1),
        )
        before = rss_mb(process.pid)
        statuses = [send_large_body(port, 40 << 20, chunked=True) for _ in range(5)]
        after = rss_mb(process.pid)
        check(
            "five chunked 40 MB bodies: 413s, the server's memory stays",
            statuses == [413] * 5 and after - before < 20,
            statuses=statuses,
            rss_mb_before=round(before),
            rss_mb_after=round(after),
        )
    check(
        "each answer cost K+1 upstream requests",
        emu.stats()["requests"] == 5 * (K + 1),
        upstream_requests=emu.stats()["requests"],
    )

    with pacore_serve(emu, "--rounds", str(K), "--header-timeout", "3", file_limit=1024) as (base, process):
        port = port_of(base)
        with ExitStack() as stack:
            flood = []
            for _ in range(1050):
                try:
                    flood.append(stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5)))
                except OSError:
                    break
            time.sleep(0.5)
            refused = sum(1 for sock in flood if _answered_503(sock))
            closed = wait_closed(flood, 10)
            deadline = time.monotonic() + 20
            status = 0
            while time.monotonic() < deadline and status != 200:
                try:
                    status = httpx.post(
                        f"{base}/chat/completions", timeout=60, json={"model": emu.config.model, "messages": problem(9)}
                    ).status_code
                except httpx.TransportError:
                    time.sleep(0.2)
        check(
            "open-file limit 1024: 1,050 idle sockets, the excess refused 503, all closed, then served",
            process.poll() is None and status == 200 and closed == len(flood) and refused > 0,
            opened=len(flood),
            refused_503=refused,
            closed=closed,
            status=status,
        )


def _answered_503(sock: socket.socket) -> bool:
    try:
        data = sock.recv(4096, socket.MSG_DONTWAIT)
    except (BlockingIOError, OSError):
        return False
    return data.startswith(b"HTTP/1.1 503") and b'"too_many_connections"' in data


def probe_deadline() -> None:
    with Emulator(EmulatorConfig(ttft=3600)) as emu:  # an upstream that never answers
        with pacore_serve(emu, "--rounds", str(K), "--request-timeout", "2") as (base, _):
            started = time.monotonic()
            response = httpx.post(
                f"{base}/chat/completions", timeout=60, json={"model": emu.config.model, "messages": problem(0)}
            )
            waited = time.monotonic() - started
            deadline = time.monotonic() + 5
            while emu.stats()["active"] and time.monotonic() < deadline:
                time.sleep(0.02)
            stats = emu.stats()
    check(
        "a hung upstream: 504 after --request-timeout 2, every upstream request closed",
        response.status_code == 504
        and response.json()["error"]["code"] == "request_timeout"
        and stats["active"] == 0
        and stats["cancelled"] == K,
        status=response.status_code,
        seconds=round(waited, 2),
        cancelled=stats["cancelled"],
    )


# ------------------------------------------------------------------------------------------------ the CLI


def pacore(*argv: str, env: dict[str, str] | None = None) -> tuple[int, list[str], float]:
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "pacore_graph.cli", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    return run.returncode, lines, time.monotonic() - started


def refused_in_one_line(code: int, lines: list[str]) -> bool:
    """The command kit's refusal: exit status 2 and one stderr line ``pacore: error: ...``."""
    return code == USAGE and len(lines) == 1 and lines[0].startswith("pacore: error: ")


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def probe_cli(emu: Emulator, scratch: Path) -> None:
    emu.reset()
    base = ["--base-url", emu.base_url, "--model", emu.config.model]
    foreign = scratch / "foreign"
    foreign.mkdir()
    (foreign / "results.jsonl").write_text('{"id": "problem", "answer": "not mine", "ttc": 1}\n')
    before = snapshot(foreign)
    code, lines, _ = pacore("solve", "What is 2+2?", *base, "--output", str(foreign))
    check(
        "solve --output into a foreign folder: refused, untouched",
        refused_in_one_line(code, lines) and snapshot(foreign) == before,
        line=lines[-1][:100] if lines else "",
    )

    ours = scratch / "ours"
    code, _, _ = pacore("solve", "What is 2+2?", *base, "--rounds", "2", "--output", str(ours))
    results = ours / "results.jsonl"
    results.write_text(results.read_text() + "not a row\n" + '{"id": "other", "answer": "x"}\n')
    before = snapshot(ours)
    code2, lines, _ = pacore("solve", "What is 2+2?", *base, "--rounds", "2", "--output", str(ours))
    after = snapshot(ours)
    changed = sorted(name for name in {*before, *after} if before.get(name) != after.get(name))
    check(
        "a results file with an unreadable line: refused, every file but the lock's holder pid untouched",
        code == 0 and code2 == 1 and len(lines) == 1 and changed in ([], [".lock"]),
        changed=changed,
        line=lines[-1][:100] if lines else "",
    )
    sent = emu.stats()["requests"]

    messages = scratch / "object.json"
    messages.write_text('{"role": "user", "content": "hi"}')
    pair = scratch / "pair.json"
    pair.write_text("[1, 2]")
    for name, argv, env in [
        ("--messages-file holding an object", ["solve", "--messages-file", str(messages), *base], None),
        ("--messages-file holding [1, 2]", ["solve", "--messages-file", str(pair), *base], None),
        ("--rounds 1000000", ["solve", "q", "--rounds", "1000000", *base], None),
        ("serve --port 99999", ["serve", "--port", "99999", "--base-url", emu.base_url], None),
        ("PACORE_API_KEY=''", ["serve", "--base-url", emu.base_url], {"PACORE_API_KEY": ""}),
    ]:
        code, lines, seconds = pacore(*argv, env=env)
        check(
            f"CLI refuses {name} in one line",
            refused_in_one_line(code, lines),
            seconds=round(seconds, 1),
            line=lines[-1][:90] if lines else "",
        )
    check(
        "nothing sent upstream for bad CLI input",
        emu.stats()["requests"] == sent,
        upstream_requests=emu.stats()["requests"] - sent,
    )


# ---------------------------------------------------------------------------------------------------- load


async def ask(client: httpx.AsyncClient, base: str, model: str, number: int, stream: bool) -> bool:
    body = {"model": model, "messages": problem(number), "stream": stream}
    if not stream:
        response = await client.post(f"{base}/chat/completions", json=body)
        return response.status_code == 200 and bool(response.json()["choices"][0]["message"]["content"])
    async with client.stream("POST", f"{base}/chat/completions", json=body) as response:
        lines = [line async for line in response.aiter_lines() if line.startswith("data: ")]
    return response.status_code == 200 and lines[-1] == "data: [DONE]" and '"error"' not in "".join(lines)


async def crowd(base: str, model: str, clients: int, first: int = 0) -> list[bool]:
    limits = httpx.Limits(max_connections=clients + 10, max_keepalive_connections=clients + 10)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        return await asyncio.gather(*(ask(client, base, model, first + n, stream=n % 2 == 1) for n in range(clients)))


def raw_request(port: int, model: str, number: int, stream: bool) -> socket.socket:
    payload = json.dumps({"model": model, "messages": problem(number), "stream": stream}).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
    )
    return sock


def probe_load() -> None:
    config = EmulatorConfig(ttft=0.05, token_delay=0.001, output_tokens=(20, 60))
    with Emulator(config) as emu:
        model = emu.config.model
        with pacore_serve(emu, "--rounds", str(K), "--max-concurrency", "1024") as (base, _):
            started = time.monotonic()
            answered = asyncio.run(crowd(base, model, 200))
            seconds = time.monotonic() - started
            stats = emu.stats()
        check(
            "200 concurrent clients (100 plain, 100 streamed) all answered with K+1 upstream requests each",
            all(answered) and stats["requests"] == 200 * (K + 1),
            answered=sum(answered),
            upstream_requests=stats["requests"],
            seconds=round(seconds, 1),
        )

        emu.reset()
        with pacore_serve(emu, "--rounds", str(K), "--max-concurrency", "16") as (base, _):
            answered = asyncio.run(crowd(base, model, 200, first=500))
            stats = emu.stats()
        check(
            "--max-concurrency 16 holds the upstream at 16 in flight under 200 clients",
            all(answered) and stats["peak_active"] == 16 and stats["requests"] == 200 * (K + 1),
            peak_in_flight=stats["peak_active"],
            upstream_requests=stats["requests"],
        )

    with Emulator(EmulatorConfig(ttft=3600)) as hung:  # round 1 stays in flight until its clients leave
        with pacore_serve(hung, "--rounds", str(K), "--max-concurrency", "1024") as (base, process):
            port, memory = port_of(base), []
            for wave in range(5):  # the chat model's memo of 256 message lists fills in the first two
                memory.append(rss_mb(process.pid))
                sockets = [raw_request(port, hung.config.model, 1000 * wave + n, stream=n % 2 == 1) for n in range(200)]
                deadline = time.monotonic() + 60
                while hung.stats()["active"] < 200 * K and time.monotonic() < deadline:
                    time.sleep(0.02)
                in_flight, cancelled = hung.stats()["active"], hung.stats()["cancelled"]
                gone = time.monotonic()
                for sock in sockets:
                    sock.close()
                while hung.stats()["active"] and time.monotonic() - gone < 30:
                    time.sleep(0.002)
                seconds = time.monotonic() - gone
                check(
                    f"disconnect wave {wave + 1}: 100 plain + 100 streamed clients leave in round 1, every upstream "
                    "request closed",
                    in_flight == 200 * K
                    and hung.stats()["active"] == 0
                    and hung.stats()["cancelled"] - cancelled == 200 * K,
                    in_flight=in_flight,
                    all_closed_within_s=round(seconds, 3),
                )
            memory.append(rss_mb(process.pid))
        check(
            "server memory flat over the disconnect waves (once the memo is full)",
            memory[-1] - memory[3] < 10,
            rss_mb=[round(value) for value in memory],
        )


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="pacore-serve-probe-") as scratch:
        with Emulator(EmulatorConfig(ttft=0.02, token_delay=0.0005, output_tokens=(20, 60))) as emu:
            probe_refusals(emu)
            probe_password(emu)
            probe_connections(emu)
            probe_cli(emu, Path(scratch))
        probe_upstream_errors()
        probe_deadline()
        probe_load()
    failed = [result["check"] for result in RESULTS if not result["ok"]]
    print(json.dumps({"checks": len(RESULTS), "failed": failed, "results": RESULTS}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
