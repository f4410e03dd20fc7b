"""A vLLM-like OpenAI-compatible server in its own process, for benchmarks and tests without a GPU.

    with Emulator(EmulatorConfig(ttft=0.5, token_delay=0.005, output_tokens=300)) as emu:
        llm = chat_model(base_url=emu.base_url, model=emu.config.model)

It runs in a child process so that its CPU never counts as the client's, and the client's event loop
never slows it down. The child exits when its parent goes away (it watches its stdin).

Command line: ``python -m pacore_emulator --port 8000 --ttft 0.5 --fault http_500=0.05``;
``--gpu-replica 2`` serves as replica 2 of an emulated GPU cluster (:meth:`EmulatorConfig.gpu_replica`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import select
import subprocess
import sys
import time
import urllib.request
from typing import Any

from pacore_emulator.config import AnswerMix, EmulatorConfig, FaultRates

READY = "EMULATOR READY port="
__all__ = ["AnswerMix", "Emulator", "EmulatorConfig", "FaultRates", "main"]


class EmulatorError(RuntimeError):
    """The emulator process did not start or stopped unexpectedly."""


class Emulator:
    """Start the emulator process on a free loopback port; stop it on exit."""

    def __init__(self, config: EmulatorConfig | None = None, *, start_timeout: float = 30.0):
        self.config = config or EmulatorConfig()
        self.start_timeout = start_timeout
        self.process: subprocess.Popen[str] | None = None
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (ends in /v1), as clients expect it."""
        return f"{self.root_url}/v1"

    @property
    def root_url(self) -> str:
        if self.port is None:
            raise EmulatorError("the emulator is not running")
        return f"http://{self.config.host}:{self.port}"

    def start(self) -> Emulator:
        if self.config.host not in ("127.0.0.1", "localhost", "::1"):
            raise EmulatorError(f"the emulator serves loopback only, not {self.config.host!r}")
        command = [
            sys.executable,
            "-m",
            "pacore_emulator",
            "--config-json",
            self.config.model_dump_json(),
            "--exit-with-stdin",
        ]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [], 0.1)
            if ready:
                line = self.process.stdout.readline()
                if line.startswith(READY):
                    self.port = int(line[len(READY) :].strip())
                    return self
                if not line:
                    break
            if self.process.poll() is not None:
                break
        self.stop()
        raise EmulatorError(f"the emulator did not start within {self.start_timeout:.0f} s")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        try:
            if process.stdin is not None:
                process.stdin.close()  # the child exits on stdin EOF
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        finally:
            if process.stdout is not None:
                process.stdout.close()
            self.port = None

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ control (tests, benchmarks)

    def stats(self) -> dict[str, Any]:
        """Counters since start or the last reset: requests, completed, faults, peak_active, cpu_s..."""
        with urllib.request.urlopen(self.root_url + "/emulator/stats", timeout=10) as response:
            counters: dict[str, Any] = json.loads(response.read())
        return counters

    def reset(self) -> None:
        """Zero the counters and forget seen prompts, so the next run gets the same replies as a fresh one."""
        request = urllib.request.Request(self.root_url + "/emulator/reset", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass


# ----------------------------------------------------------------------------------------- child process


def _raise_file_limit() -> None:
    """Thousands of open sockets need more than the usual 1024 descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))


async def _serve(config: EmulatorConfig, exit_with_stdin: bool) -> None:
    from pacore_emulator.server import EmulatorServer

    server = EmulatorServer(config)
    port = await server.start()
    print(READY + str(port), flush=True)
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    if exit_with_stdin:
        loop.add_reader(sys.stdin.fileno(), lambda: _on_stdin(stop))
    try:
        await stop
    finally:
        if server.server is not None:
            server.server.close()


def _on_stdin(stop: asyncio.Future[None]) -> None:
    data = os.read(sys.stdin.fileno(), 4096)
    if not data and not stop.done():
        stop.set_result(None)


def _parse_length(text: str) -> int | tuple[int, int]:
    if "-" in text:
        low, high = text.split("-", 1)
        return int(low), int(high)
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pacore_emulator", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config-json", help="a whole EmulatorConfig as JSON (other flags override it)")
    parser.add_argument(
        "--gpu-replica",
        type=int,
        metavar="N",
        help="start from replica N of an emulated GPU cluster: prefix cache, prefill cost, "
        "PaCoRe-sized conclusions (other flags override it)",
    )
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--model")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--ttft", type=float, help="seconds to first token")
    parser.add_argument("--token-delay", type=float, help="seconds per token")
    parser.add_argument("--output-tokens", type=_parse_length, help="N or MIN-MAX")
    parser.add_argument("--answer-tokens", type=_parse_length, help="conclusion tokens: N or MIN-MAX")
    parser.add_argument("--prefill-token-time", type=float, help="seconds per uncached prompt token")
    parser.add_argument("--prefix-cache-tokens", type=int, help="prefix cache capacity in tokens (0: none)")
    parser.add_argument("--block-size", type=int, help="tokens per prefix-cache block")
    parser.add_argument("--reasoning", choices=["reasoning", "reasoning_content", "both", "think", "none"])
    parser.add_argument("--no-usage", action="store_true", help="omit token usage")
    parser.add_argument("--slots", type=int, help="requests served at once; the rest queue")
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument(
        "--clamp-max-tokens",
        action="store_true",
        help="shorten a reply to what the window leaves (vLLM 0.32) instead of HTTP 400",
    )
    parser.add_argument("--mix", metavar="KIND=WEIGHT,...", help="share of easy, split and hard problems")
    parser.add_argument("--minority-length", type=float, help="length factor of replies off the majority answer")
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KIND=RATE",
        help=f"inject a fault, KIND one of {', '.join(FaultRates.model_fields)}",
    )
    parser.add_argument("--request-log", help="append every request body to this JSON lines file")
    parser.add_argument("--exit-with-stdin", action="store_true", help=argparse.SUPPRESS)
    return parser


def config_from_args(args: argparse.Namespace) -> EmulatorConfig:
    data: dict[str, Any] = {}
    if args.gpu_replica is not None:
        data = EmulatorConfig.gpu_replica(args.gpu_replica).model_dump()
    data.update(json.loads(args.config_json) if args.config_json else {})
    for name in (
        "host",
        "port",
        "model",
        "seed",
        "ttft",
        "token_delay",
        "output_tokens",
        "answer_tokens",
        "reasoning",
        "slots",
        "max_model_len",
        "request_log",
        "prefill_token_time",
        "prefix_cache_tokens",
        "block_size",
    ):
        value = getattr(args, name)
        if value is not None:
            data[name] = value
    if args.no_usage:
        data["usage"] = False
    if args.clamp_max_tokens:
        data["clamp_max_tokens"] = True
    answers = dict(data.get("answers") or {})
    if args.mix is not None:
        try:
            answers["weights"] = AnswerMix.parse_weights(args.mix)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
    if args.minority_length is not None:
        answers["minority_length"] = args.minority_length
    data["answers"] = answers
    faults = dict(data.get("faults") or {})
    for item in args.fault:
        kind, _, rate = item.partition("=")
        if kind not in FaultRates.model_fields:
            raise SystemExit(f"unknown fault kind {kind!r}; choose from {', '.join(FaultRates.model_fields)}")
        try:
            faults[kind] = float(rate)
        except ValueError:
            raise SystemExit(f"fault rate for {kind!r} must be a number, got {rate!r}") from None
    data["faults"] = faults
    return EmulatorConfig.model_validate(data)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = config_from_args(args)
    _raise_file_limit()
    try:
        asyncio.run(_serve(config, args.exit_with_stdin))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
