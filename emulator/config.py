"""Settings of the serving emulator: how fast it answers, what it says, and how often it fails.

Kept apart from the server so a benchmark can build, print and ship a config (as JSON, to the
emulator's own process) without importing any server code.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

ReasoningStyle = Literal["reasoning", "reasoning_content", "both", "think", "none"]


FAULTS = ("http_500", "http_503", "timeout", "drop", "malformed", "cut_stream", "http_429")  # the order of draws


class FaultRates(BaseModel):
    """Probability per request of each injected fault (drawn from a seeded hash, so repeatable).

    A retry of the same request is a new draw: a flaky server costs retries, not answers.
    """

    http_500: float = Field(0.0, ge=0, le=1, description="answer HTTP 500 after the time to first token")
    http_503: float = Field(0.0, ge=0, le=1, description="answer HTTP 503 after the time to first token")
    timeout: float = Field(0.0, ge=0, le=1, description="read the request and never answer (hang)")
    drop: float = Field(0.0, ge=0, le=1, description="close the socket mid-request, without a response")
    malformed: float = Field(0.0, ge=0, le=1, description="HTTP 200 whose JSON (or SSE event) is broken")
    cut_stream: float = Field(0.0, ge=0, le=1, description="stop a response midway and close the socket")
    http_429: float = Field(0.0, ge=0, le=1, description="answer HTTP 429 (rate limited) after the time to first token")

    @model_validator(mode="after")
    def _total_at_most_one(self) -> FaultRates:
        if self.total() > 1.0:
            raise ValueError(f"fault rates add up to {self.total():.3f}, more than 1")
        return self

    def total(self) -> float:
        return float(sum(getattr(self, name) for name in FAULTS))

    def pick(self, u: float) -> str | None:
        """The fault for a uniform draw ``u`` in [0, 1), or None for a normal answer."""
        edge = 0.0
        for name in FAULTS:
            edge += getattr(self, name)
            if u < edge:
                return name
        return None


class AnswerMix(BaseModel):
    """Which answers trajectories reach, per problem: some problems easy, some split, some hard.

    A problem's kind is drawn from ``weights`` by a seeded hash of its text. ``kinds[kind]`` lists the shares
    of the problem's first, second, ... answers (distinct, fixed per problem); the rest of the mass is noise,
    spread over a thousand values. The first answer is the problem's *majority answer*
    (:func:`~pacore_emulator.replies.majority_answer`). ``minority_length`` stretches the
    replies that miss it (longer reasoning is more often wrong: Hassid et al. 2025, "Don't Overthink It").
    A synthesis prompt answers with the majority of its references, counting a deduplicated one as often as
    its note says.
    """

    kinds: dict[str, list[float]] = Field(
        default_factory=lambda: {"easy": [0.85], "split": [0.45, 0.35], "hard": [0.3, 0.2, 0.15]}
    )
    weights: dict[str, float] = Field(default_factory=lambda: {"easy": 0.5, "split": 0.3, "hard": 0.2})
    minority_length: float = Field(1.0, ge=1.0, description="length factor of replies off the majority answer")

    @model_validator(mode="after")
    def _valid_mix(self) -> AnswerMix:
        for kind, shares in self.kinds.items():
            if not shares or any(share <= 0 for share in shares) or sum(shares) > 1.0 + 1e-9:
                raise ValueError(f"answer kind {kind!r}: shares must be positive and add up to at most 1, got {shares}")
            if any(share >= shares[0] for share in shares[1:]):
                raise ValueError(f"answer kind {kind!r}: the first share is the majority answer, so the largest")
        unknown = set(self.weights) - set(self.kinds)
        if unknown:
            raise ValueError(f"weights name unknown answer kinds {sorted(unknown)}; kinds are {sorted(self.kinds)}")
        if not any(weight > 0 for weight in self.weights.values()) or any(w < 0 for w in self.weights.values()):
            raise ValueError(f"answer kind weights must be non-negative with one positive, got {self.weights}")
        return self

    @staticmethod
    def parse_weights(text: str) -> dict[str, float]:
        """``"easy=0.5,split=0.3,hard=0.2"`` -> weights (the command lines' ``--mix``)."""
        weights = {}
        for item in text.split(","):
            kind, _, weight = item.strip().partition("=")
            try:
                weights[kind.strip()] = float(weight)
            except ValueError:
                raise ValueError(f"--mix takes KIND=WEIGHT pairs such as easy=0.5,split=0.3, not {text!r}") from None
        return weights

    def pick(self, u: float) -> str:
        """The kind for a uniform draw ``u`` in [0, 1)."""
        total = sum(self.weights.values())
        edge = 0.0
        for kind, weight in self.weights.items():
            edge += weight / total
            if u < edge:
                return kind
        return next(kind for kind, weight in reversed(self.weights.items()) if weight > 0)


STEP = 0.00025  # seconds of one decode step of a GPU replica: time runs about 25 times faster than on an H100


class EmulatorConfig(BaseModel):
    """An OpenAI-compatible server that behaves like vLLM under load, minus the GPU."""

    model: str = "emulated-model"
    host: str = "127.0.0.1"
    port: int = Field(0, ge=0, le=65535, description="0 picks a free port")
    backlog: int = Field(4096, ge=1)
    seed: int = 0

    ttft: float = Field(0.05, ge=0, description="seconds from request to first token")
    token_delay: float = Field(0.001, ge=0, description="seconds between tokens")
    output_tokens: int | tuple[int, int] = Field(
        64, description="completion length in tokens: a fixed count or an inclusive (min, max) range"
    )
    answer_tokens: int | tuple[int, int] = Field(
        8, description="tokens of the conclusion (a count or an inclusive range), the rest is reasoning"
    )
    reasoning: ReasoningStyle = Field(
        "reasoning", description="where the reasoning goes: vLLM fields, <think> tags in content, or nowhere"
    )
    usage: bool = Field(True, description="report token usage (streams: only with include_usage)")
    stream_tick: float = Field(0.02, gt=0, description="streams are written in batches this often, like a busy server")
    max_model_len: int = Field(131072, ge=1, description="context limit; longer requests get HTTP 400")
    clamp_max_tokens: bool = Field(
        False,
        description="a prompt that fits but leaves less room than max_tokens: shorten the reply to the window "
        "(vLLM 0.32) instead of HTTP 400 (earlier vLLM, OpenAI)",
    )
    strict_model: bool = Field(True, description="answer 404 to a request for another model name")
    slots: int | None = Field(
        None, ge=1, description="requests served at once (like vLLM max_num_seqs); the rest wait in a queue"
    )
    replica: int = Field(0, ge=0, description="index among replicas of one model; salts replies so they differ")
    prefill_token_time: float = Field(
        0.0, ge=0, description="seconds per uncached prompt token; prefills run one at a time and stall decoding"
    )
    decode_context_time: float = Field(
        0.0,
        ge=0,
        description="seconds a decode step takes longer per token of context in the replica's batch "
        "(each step reads every running sequence's KV cache); 0: a batch decodes at no extra cost",
    )
    prefix_cache_tokens: int = Field(0, ge=0, description="prefix cache capacity in tokens (LRU); 0: no cache")
    block_size: int = Field(16, ge=1, description="tokens per cached block, as vLLM's --block-size")
    answers: AnswerMix = Field(default_factory=AnswerMix, description="per-problem answer distributions")
    tool_call_reasoning: bool = Field(
        False,
        description="a forced tool call (a named or required tool_choice) comes after reasoning of the drawn length, "
        "as a reasoning model's does under vLLM's reasoning parser (reasoning styles with a field of their own); "
        "off: the call alone, a few tokens",
    )
    faults: FaultRates = Field(default_factory=FaultRates)
    hang_seconds: float = Field(3600.0, ge=0, description="how long a 'timeout' fault holds the connection")
    retry_after: float | None = Field(
        None, ge=0, description="seconds sent as Retry-After with the 429 and 503 faults (None: no header)"
    )
    request_log: str | None = Field(None, description="JSON lines file of every request received")

    @model_validator(mode="after")
    def _valid_lengths(self) -> EmulatorConfig:
        for name in ("output_tokens", "answer_tokens"):
            value = getattr(self, name)
            if isinstance(value, tuple):
                if not 1 <= value[0] <= value[1]:
                    raise ValueError(f"{name} range {value} must satisfy 1 <= min <= max")
            elif value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        return self

    def mean_latency(self) -> float:
        """Seconds a typical non-streamed request takes, for sizing benchmarks."""
        if isinstance(self.output_tokens, tuple):
            tokens = sum(self.output_tokens) / 2
        else:
            tokens = self.output_tokens
        return self.ttft + tokens * self.token_delay

    @classmethod
    def gpu_replica(cls, replica: int = 0, **overrides: Any) -> EmulatorConfig:
        """One replica of an emulated GPU server, for clusters (``pacore serve-vllm --emulate``, ``pacore
        bench replicas``): a prefix cache, prefill that costs, PaCoRe-sized conclusions, a batch limit.

        Proportions follow PaCoRe-8B on one 80 GB GPU: the prefix cache holds about what such a GPU keeps
        for an 8B model after its weights, one uncached token of prefill costs a fiftieth of one decode
        step, and a decode step grows with the context its batch holds: it reads the 16 GB of weights (about
        6 ms on an H100) plus about 147 KB of KV cache per token of context (36 layers, 8 KV heads of 128
        dimensions, keys and values in 16 bits) at 3.35 TB/s, 44 ns a token, so about 137k tokens of context
        double a step. Time runs faster and reasoning is far shorter than on a GPU (a whole [32, 4] problem takes
        seconds), so conclusions quoted as references (about 500 to 3600 prompt tokens each) and hence the
        synthesis prompts (tens of thousands of tokens for [32, 4]) keep their real size.
        """
        settings: dict[str, Any] = {
            "replica": replica,
            "ttft": 0.01,
            "token_delay": STEP,
            "output_tokens": (1600, 2400),  # reasoning plus conclusion
            "answer_tokens": (200, 1500),  # the conclusion; its filler words count about 2.4 prompt tokens each
            "prefill_token_time": STEP / 50,  # a 50k-token synthesis prompt: 0.25 s of prefill
            "decode_context_time": STEP * 44e-9 / 6e-3,  # a step doubles at 137k tokens of context
            "prefix_cache_tokens": 350_000,
            "slots": 256,
        }
        settings.update(overrides)
        return cls(**settings)
