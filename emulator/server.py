"""The emulator's HTTP server: raw asyncio, so that it costs far less CPU than the clients it measures.

aiohttp.web or a framework would spend more CPU per request than the bare client under test; this
server parses HTTP/1.1 by hand (keep-alive, Content-Length or chunked request bodies), answers with
timers instead of one task per request, and writes every stream from one shared ticker in batches.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, TextIO

from pacore_emulator.config import EmulatorConfig
from pacore_emulator.gpu import GpuClock, PrefixCache, prompt_text
from pacore_emulator.replies import (
    ReplyPlan,
    check_request,
    completion_body,
    error_body,
    invalid_body,
    models_body,
    plan_reply,
    request_key,
    stream_events,
)

MAX_HEADER_BYTES = 1 << 16
CRLF = "\r\n"
# Starlette's answers (vLLM's server) to a path it lacks and to a wrong method
NOT_FOUND = b'{"detail":"Not Found"}'
NOT_ALLOWED = b'{"detail":"Method Not Allowed"}'
REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class _Connection(asyncio.Protocol):
    """One client socket; requests on it are handled one after another (HTTP/1.1 keep-alive)."""

    def __init__(self, server: EmulatorServer):
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.busy = False
        self.closed = False
        self.timer: asyncio.TimerHandle | None = None
        self.on_lost: Any = None  # callback releasing a slot when the client goes away mid-request

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.on_lost is not None:
            callback, self.on_lost = self.on_lost, None
            callback()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.busy:
            self._next_request()

    def _next_request(self) -> None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEADER_BYTES:
                self.respond(400, error_body(400, "request head too large", "BadRequestError"), keep_alive=False)
            return
        lines = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
        try:
            method, path, _version = lines[0].split(" ", 2)
        except ValueError:
            self.respond(400, error_body(400, "bad request line", "BadRequestError"), keep_alive=False)
            return
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        start = end + 4
        if headers.get("transfer-encoding", "").lower() == "chunked":
            decoded = _dechunk(self.buffer, start)
            if decoded is None:
                return
            body, consumed = decoded
        else:
            length = int(headers.get("content-length") or 0)
            if len(self.buffer) < start + length:
                return
            body, consumed = bytes(self.buffer[start : start + length]), start + length
        del self.buffer[:consumed]
        self.busy = True
        self.keep_alive = headers.get("connection", "").lower() != "close"
        self.server.dispatch(self, method, path.split("?", 1)[0], body)

    def respond(
        self,
        status: int,
        body: bytes,
        keep_alive: bool | None = None,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        if self.closed or self.transport is None:
            return
        keep = self.keep_alive if keep_alive is None else keep_alive
        extra = "".join(f"{name}: {value}{CRLF}" for name, value in (headers or {}).items())
        head = (
            f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n{extra}{'' if keep else 'Connection: close' + CRLF}\r\n"
        )
        self.transport.write(head.encode() + body)
        self.done(keep)

    def done(self, keep_alive: bool = True) -> None:
        """The current request is over: close, or go on with the next pipelined request."""
        self.busy = False
        self.on_lost = None
        if not keep_alive or not self.keep_alive:
            if self.transport is not None:
                self.transport.close()
            return
        if self.buffer:
            self._next_request()

    def abort(self) -> None:
        """Reset the connection at once: the client gets no (further) bytes."""
        if self.transport is not None and not self.closed:
            self.transport.abort()

    def close(self) -> None:
        """Send what is buffered, then close: the response ends early without an error status."""
        if self.transport is not None and not self.closed:
            self.transport.close()

    keep_alive = True


def _dechunk(buffer: bytearray, start: int) -> tuple[bytes, int] | None:
    """Decode a chunked request body; None while it is incomplete."""
    out = bytearray()
    pos = start
    while True:
        line_end = buffer.find(b"\r\n", pos)
        if line_end < 0:
            return None
        size = int(bytes(buffer[pos:line_end]).split(b";")[0] or b"0", 16)
        pos = line_end + 2
        if size == 0:
            trailer_end = buffer.find(b"\r\n", pos)
            if trailer_end < 0:
                return None
            return bytes(out), trailer_end + 2
        if len(buffer) < pos + size + 2:
            return None
        out += buffer[pos : pos + size]
        pos += size + 2


@dataclass
class _Stream:
    conn: _Connection
    payload: bytes
    offsets: list[int]
    tail: bytes
    begun: float  # the replica's decode progress when the stream began: later prefills hold it back
    sent: int  # events written so far
    cut_at: int | None
    release: Any
    tokens: int  # completion tokens of every choice


class EmulatorServer:
    """Serves chat completions per an :class:`EmulatorConfig`, counting what it did."""

    def __init__(self, config: EmulatorConfig):
        self.config = config
        self.loop = asyncio.get_running_loop()
        self.server: asyncio.AbstractServer | None = None
        self.log: TextIO | None = (
            open(config.request_log, "a", encoding="utf-8", buffering=1) if config.request_log else None
        )
        self.streams: list[_Stream] = []
        self.ticker: asyncio.Task[None] | None = None
        self.queue: deque[tuple[_Connection, dict[str, Any], ReplyPlan]] = deque()
        self.active = 0
        self.gpu = GpuClock(config.prefill_token_time, config.token_delay, config.decode_context_time)
        self.waiting: dict[_Connection, tuple[float, Any, tuple[Any, ...]]] = {}  # decode progress each awaits
        self.cache = PrefixCache(config.prefix_cache_tokens, config.block_size) if config.prefix_cache_tokens else None
        self.busy_since: float | None = None
        self.reset()

    def reset(self) -> None:
        """Zero the counters, forget seen prompts and empty the prefix cache; requests in flight keep their slots."""
        self.seen: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self.peak_active = self.active
        self.peak_queue = 0
        self.tokens_out = 0
        self.cpu_start = time.process_time()
        self.busy_s = 0.0
        self.prefill_start = self.gpu.stalled(self.loop.time())
        if self.busy_since is not None:
            self.busy_since = self.loop.time()
        if self.cache is not None:
            self.cache.clear()

    async def start(self) -> int:
        self.server = await self.loop.create_server(
            lambda: _Connection(self), self.config.host, self.config.port, backlog=self.config.backlog
        )
        return int(self.server.sockets[0].getsockname()[1])

    def stats(self) -> dict[str, Any]:
        now = self.loop.time()
        return {
            "requests": self.counts["requests"],
            "completed": self.counts["completed"],
            "faults": {k[6:]: v for k, v in self.counts.items() if k.startswith("fault:")},
            "errors": {k[6:]: v for k, v in self.counts.items() if k.startswith("error:")},
            "active": self.active,
            "peak_active": self.peak_active,
            "peak_queue": self.peak_queue,
            "tokens_out": self.tokens_out,
            "cpu_s": round(time.process_time() - self.cpu_start, 4),
            # what the replica computed: prompt tokens admitted, those the prefix cache served, completions
            "prompt_tokens": self.counts["prompt_tokens"],
            "cached_tokens": self.counts["cached_tokens"],
            "completion_tokens": self.counts["completion_tokens"],
            # requests whose client closed the connection mid-generation, and the tokens made until then
            "cancelled": self.counts["cancelled"],
            "cancelled_tokens": self.counts["cancelled_tokens"],
            "prefill_s": round(self.gpu.stalled(now) - self.prefill_start, 4),
            "busy_s": round(self.busy_s + (now - self.busy_since if self.busy_since is not None else 0.0), 4),
        }

    # ------------------------------------------------------------------------------------ routing

    def dispatch(self, conn: _Connection, method: str, path: str, body: bytes) -> None:
        if path in ("/v1/chat/completions", "/chat/completions"):
            if method != "POST":
                conn.respond(405, NOT_ALLOWED)
                return
            self._chat(conn, body)
        elif path in ("/v1/models", "/models"):
            if method == "GET":
                conn.respond(200, models_body(self.config))
            else:
                conn.respond(405, NOT_ALLOWED)
        elif path in ("/health", "/ping"):
            conn.respond(200, b"")
        elif path == "/emulator/stats":
            conn.respond(200, json.dumps(self.stats()).encode())
        elif path == "/emulator/reset" and method == "POST":
            self.reset()
            conn.respond(200, b"{}")
        else:
            conn.respond(404, NOT_FOUND)

    def _chat(self, conn: _Connection, raw: bytes) -> None:
        self.counts["requests"] += 1
        body, refusal = invalid_body(raw)
        if body is None:
            self._log({"body_raw": raw.decode("utf-8", "replace"), "error": "bad_json"})
            self.counts["error:bad_request"] += 1
            conn.respond(400, refusal or b"")
            return
        key = request_key(body["messages"])
        occurrence = self.seen[key]
        n = body.get("n")
        self.seen[key] += n if isinstance(n, int) and n > 1 else 1
        plan = plan_reply(self.config, body, occurrence)
        self._log({"body": body, "occurrence": occurrence, "fault": plan.fault})
        checked = check_request(self.config, body)
        if checked is not None:
            status, error, counter = checked
            self.counts["error:" + counter] += 1
            conn.respond(status, error)
            return
        window = self.config.max_model_len
        limit = body.get("max_completion_tokens") or body.get("max_tokens") or 0
        if plan.prompt_tokens >= window:  # vLLM: the prompt alone leaves no room
            self.counts["error:context"] += 1
            message = (
                f"This model's maximum context length is {window} tokens. However, your prompt contains at least "
                f"{plan.prompt_tokens} input tokens, which exceeds this limit even without any output tokens. Please "
                "reduce the length of the input prompt."
            )
            conn.respond(400, error_body(400, message, "BadRequestError", "input_tokens"))
            return
        if plan.prompt_tokens + limit > window:
            if self.config.clamp_max_tokens:  # vLLM 0.32: max_tokens shrinks to what the window leaves
                plan.truncate(window - plan.prompt_tokens)
            else:
                self.counts["error:context"] += 1
                message = (
                    f"This model's maximum context length is {window} tokens. However, you "
                    f"requested {plan.prompt_tokens + limit} tokens ({plan.prompt_tokens} in the messages, "
                    f"{limit} in the completion). Please reduce the length of the messages or completion."
                )
                conn.respond(400, error_body(400, message, "BadRequestError", "input_tokens"))
                return
        if plan.fault is not None:
            self.counts["fault:" + plan.fault] += 1
        if plan.fault in ("http_500", "http_503", "http_429", "timeout", "drop"):
            self._fault(conn, plan)  # faults occupy no slot
            return
        slots = self.config.slots
        if slots is not None and self.active >= slots:
            self.queue.append((conn, body, plan))
            self.peak_queue = max(self.peak_queue, len(self.queue))
            return
        self._serve(conn, body, plan)

    def _log(self, record: dict[str, Any]) -> None:
        if self.log is not None:
            record["t"] = time.time()
            self.log.write(json.dumps(record, ensure_ascii=False) + "\n")

    # ------------------------------------------------------------------------------------ answers

    def _fault(self, conn: _Connection, plan: ReplyPlan) -> None:
        ttft = self.config.ttft
        if plan.fault == "http_500":
            body = error_body(500, "emulated internal server error", "InternalServerError")
            conn.timer = self.loop.call_later(ttft, conn.respond, 500, body)
        elif plan.fault in ("http_503", "http_429"):
            status = 503 if plan.fault == "http_503" else 429
            kind = "ServiceUnavailableError" if status == 503 else "RateLimitError"
            body = error_body(status, "emulated overload, retry later", kind)
            after = self.config.retry_after
            headers = {"Retry-After": f"{after:g}"} if after is not None else None
            conn.timer = self.loop.call_later(ttft, lambda: conn.respond(status, body, headers=headers))
        elif plan.fault == "drop":
            conn.timer = self.loop.call_later(ttft, conn.abort)
        else:  # timeout: hold the connection, answer nothing
            conn.timer = self.loop.call_later(self.config.hang_seconds, conn.abort)

    def _acquire(self, conn: _Connection) -> Any:
        """Take a slot; returns the one-shot callback that gives it back (on finish or disconnect)."""
        if self.active == 0:
            self.busy_since = self.loop.time()
        self.active += 1
        self.peak_active = max(self.peak_active, self.active)
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            conn.on_lost = None
            self.active -= 1
            if self.active == 0 and self.busy_since is not None:
                self.busy_s += self.loop.time() - self.busy_since
                self.busy_since = None
            self._admit()

        conn.on_lost = release
        return release

    def _admit(self) -> None:
        slots = self.config.slots
        while self.queue and (slots is None or self.active < slots):
            conn, body, plan = self.queue.popleft()
            if not conn.closed:
                self._serve(conn, body, plan)

    def _serve(self, conn: _Connection, body: dict[str, Any], plan: ReplyPlan) -> None:
        """Take a slot, prefill what the prefix cache lacks, then answer after the time to first token
        (a stream) or the whole decode (a plain reply), both held back by the replica's later prefills."""
        release = self._held(self._acquire(conn), plan.prompt_tokens + plan.steps // 2)
        if self.cache is not None:
            plan.cached_tokens = self.cache.admit(prompt_text(body["messages"]), plan.prompt_tokens)
        cached = plan.cached_tokens or 0
        self.counts["prompt_tokens"] += plan.prompt_tokens
        self.counts["cached_tokens"] += cached
        now = self.loop.time()
        self.gpu.prefill(plan.prompt_tokens - cached, now)
        begun = self.gpu.progress(now)  # decoding stands still until the prefills queued so far are done
        conn.on_lost = lambda: self._cancelled(conn, plan, begun, release)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._after_work(conn, begun + self.config.ttft, self._begin_stream, conn, plan, include_usage, release)
        else:
            work = self.config.ttft + plan.steps * self.config.token_delay
            self._after_work(conn, begun + work, self._finish_plain, conn, plan, release)

    def _held(self, release: Any, context: int) -> Any:
        """The sequence's context joins the batch's until ``release`` (then the others decode faster)."""
        self.gpu.hold(context, self.loop.time())
        held = True

        def release_held() -> None:
            nonlocal held
            if held:
                held = False
                self.gpu.hold(-context, self.loop.time())
                if self.waiting and self.gpu.context_time > 0:
                    self._reschedule()
            release()

        return release_held

    def _cancelled(self, conn: _Connection, plan: ReplyPlan, begun: float, release: Any) -> None:
        """The client went away mid-generation (vLLM aborts such a request): count what was generated."""
        self.waiting.pop(conn, None)
        decoding = self.gpu.progress(self.loop.time()) - begun - self.config.ttft
        if self.config.token_delay > 0:
            generated = min(plan.completion_tokens, max(0, int(decoding / self.config.token_delay)))
        else:
            generated = plan.completion_tokens if decoding >= 0 else 0
        self.counts["cancelled"] += 1
        self.counts["cancelled_tokens"] += generated
        release()

    def _after_work(self, conn: _Connection, target: float, callback: Any, *args: Any) -> None:
        """Call back once the replica's decode progress reaches ``target``; prefills and a fuller batch delay it."""
        self.waiting[conn] = (target, callback, args)
        now = self.loop.time()
        conn.timer = self.loop.call_later(self.gpu.eta(target, now) - now, self._check_work, conn)

    def _check_work(self, conn: _Connection) -> None:
        if conn not in self.waiting:  # the client went away
            return
        target, callback, args = self.waiting[conn]
        now = self.loop.time()
        if self.gpu.progress(now) < target - 1e-6:  # a prefill queued since, or a fuller batch, held it back
            conn.timer = self.loop.call_later(self.gpu.eta(target, now) - now, self._check_work, conn)
        else:
            del self.waiting[conn]
            callback(*args)

    def _reschedule(self) -> None:
        """The batch got lighter: every waiting sequence gets there sooner than its timer says."""
        now = self.loop.time()
        for conn, (target, _, _) in self.waiting.items():
            if conn.timer is not None:
                conn.timer.cancel()
            conn.timer = self.loop.call_later(self.gpu.eta(target, now) - now, self._check_work, conn)

    def _finish_plain(self, conn: _Connection, plan: ReplyPlan, release: Any) -> None:
        conn.timer = None
        release()
        body = completion_body(self.config, plan)
        if plan.fault == "malformed":
            conn.respond(200, body[: len(body) // 2])
        elif plan.fault == "cut_stream":
            head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            if conn.transport is not None and not conn.closed:
                conn.transport.write(head.encode() + body[: int(len(body) * plan.cut_fraction)])
            conn.close()
        else:
            self.counts["completed"] += 1
            self.counts["completion_tokens"] += plan.all_completion_tokens
            self.tokens_out += plan.all_completion_tokens
            conn.respond(200, body)

    def _begin_stream(self, conn: _Connection, plan: ReplyPlan, include_usage: bool, release: Any) -> None:
        conn.timer = None
        if conn.closed or conn.transport is None:
            release()
            return
        payload, offsets, tail = stream_events(self.config, plan, include_usage)
        if plan.fault == "malformed":
            broken = b'data: {"id": "broken", "choices": [{"delta": {"content": \n\n'
            middle = offsets[len(offsets) // 2]
            payload = payload[:middle] + broken + payload[middle:]
            offsets = offsets[: len(offsets) // 2] + [o + len(broken) for o in offsets[len(offsets) // 2 :]]
        cut_at = max(1, int(len(offsets) * plan.cut_fraction)) if plan.fault == "cut_stream" else None
        conn.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        now = self.loop.time()
        stream = _Stream(
            conn, payload, offsets, tail, self.gpu.progress(now), 0, cut_at, release, plan.all_completion_tokens
        )
        self.streams.append(stream)
        self._advance(stream, now)
        if self.ticker is None or self.ticker.done():
            self.ticker = self.loop.create_task(self._tick())

    def _advance(self, s: _Stream, now: float) -> bool:
        """Write every event that is due; True when the stream is over."""
        conn = s.conn
        if conn.closed or conn.transport is None:
            s.release()
            return True
        delay = self.config.token_delay
        elapsed = self.gpu.progress(now) - s.begun
        due = len(s.offsets) if delay <= 0 else min(len(s.offsets), 1 + int(elapsed / delay) + 1)
        if s.cut_at is not None:
            due = min(due, s.cut_at)
        if due > s.sent:
            begin = s.offsets[s.sent - 1] if s.sent else 0
            chunk = s.payload[begin : s.offsets[due - 1]]
            finished = due == len(s.offsets) and s.cut_at is None
            if finished:
                chunk += s.tail
            frame = b"%x\r\n%s\r\n" % (len(chunk), chunk)
            if finished:
                frame += b"0\r\n\r\n"
            conn.transport.write(frame)
            self.tokens_out += due - max(s.sent, 1)
            s.sent = due
            if finished:
                s.release()
                self.counts["completed"] += 1
                self.counts["completion_tokens"] += s.tokens
                self.tokens_out += s.tokens - (len(s.offsets) - 1)  # n > 1: several tokens a step
                conn.done()
                return True
        if s.cut_at is not None and s.sent >= s.cut_at:
            s.release()
            conn.close()  # flush what was sent, then FIN: the response simply stops
            return True
        return False

    async def _tick(self) -> None:
        while self.streams:
            await asyncio.sleep(self.config.stream_tick)
            now = self.loop.time()
            self.streams = [s for s in self.streams if not self._advance(s, now)]
