"""What one emulated replica's GPU spends: a prefix cache that skips prefill, prefill that stalls decoding, and
decoding that slows with the context its batch holds.

All are off in the default :class:`EmulatorConfig` (no cache, free prefill), where the emulator answers
exactly as it always has; ``pacore bench replicas`` and ``pacore serve-vllm --emulate`` turn them on.

The model, and what it leaves out:

- Prefix cache (vLLM's automatic prefix caching): a prompt is cut into blocks of ``block_size`` tokens of
  about four characters each, as the emulator counts tokens. A block is named by its text and everything
  before it, so only a shared *prefix* hits. Only full blocks are cached; the last prompt token is always
  computed. Capacity is in tokens; the least recently used blocks go first, a prompt's tail before its
  head. Left out: the KV blocks that running sequences hold (they do not shrink the cache here).
- Prefill: ``prefill_token_time`` seconds per uncached prompt token, one prefill at a time per replica
  (a GPU's compute), in arrival order. While a replica prefills, its decoding sequences make no progress.
- Decode: ``token_delay`` per generated token per sequence, sequences side by side up to the batch limit
  (``slots``), each step slower by ``decode_context_time`` per token of context the batch holds (a decode
  step reads every running sequence's KV cache). A sequence counts as its prompt plus half its reply, from
  its admission to its end. Left out: KV memory running out (no preemption; the cache above is separate).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from pacore_emulator.replies import message_text

CHARS_PER_TOKEN = 4  # as estimate_prompt_tokens counts


def prompt_text(messages: list[dict[str, Any]]) -> str:
    """The text a chat template would make of the messages (roles included), for prefix matching."""
    return "".join(f"<|{m.get('role')}|>{message_text(m.get('content'))}\n" for m in messages)


class PrefixCache:
    """Block-granular LRU prefix cache with a capacity in tokens."""

    def __init__(self, capacity_tokens: int, block_size: int):
        self.block_size = block_size
        self.capacity_blocks = max(1, capacity_tokens // block_size)
        self.blocks: OrderedDict[int, None] = OrderedDict()

    def block_hashes(self, text: str) -> list[int]:
        """Chained hashes of the full blocks of ``text``: equal only where the whole prefix is equal."""
        width = self.block_size * CHARS_PER_TOKEN
        hashes, previous = [], 0
        for start in range(0, len(text) - width + 1, width):
            previous = hash((previous, text[start : start + width]))
            hashes.append(previous)
        return hashes

    def admit(self, text: str, prompt_tokens: int) -> int:
        """Prompt tokens served from the cache; the prompt's blocks are then cached as most recently used."""
        hashes = self.block_hashes(text)
        hits = 0
        for block in hashes:
            if block not in self.blocks:
                break
            hits += 1
        for block in reversed(hashes):  # the head ends most recent, so a prompt's tail is evicted first
            self.blocks[block] = None
            self.blocks.move_to_end(block)
        while len(self.blocks) > self.capacity_blocks:
            self.blocks.popitem(last=False)
        computable = (prompt_tokens - 1) // self.block_size * self.block_size  # the last token is always computed
        return max(0, min(hits * self.block_size, computable))

    def clear(self) -> None:
        self.blocks.clear()


class GpuClock:
    """Prefill seconds of one replica, queued one after another and each stalling every decoding sequence, and
    the pace of its decoding.

    Since prefills run back to back from now until ``free_at``, the prefill done by any time ``t`` from now
    on is known at once: ``stalled(t)``. Decoding (continuous batching) gives every running sequence one
    token per step; a step takes ``token_delay`` plus ``context_time`` per token of context the batch holds
    (memory-bound: each step reads every sequence's KV cache). ``progress(t)`` is the decoding each sequence
    has had by ``t``, in seconds at the pace of a lone short sequence: it stands still while the replica
    prefills and runs slower the more context the batch holds. A sequence needing ``work`` such seconds from
    ``start`` is done when ``progress(t) - progress(start) >= work``.
    """

    def __init__(self, prefill_token_time: float, token_delay: float = 0.0, context_time: float = 0.0):
        self.prefill_token_time = prefill_token_time
        self.token_delay = token_delay
        self.context_time = context_time
        self.free_at = 0.0
        self.total = 0.0  # prefill seconds queued so far
        self.context = 0  # tokens of context the batch holds
        self.anchor = (0.0, 0.0, 0.0)  # (time, progress, stalled) when the pace last changed

    def prefill(self, tokens: int, now: float) -> float:
        """Queue a prefill of ``tokens`` uncached tokens; the time it ends."""
        seconds = tokens * self.prefill_token_time
        if seconds <= 0:
            return now
        self.free_at = max(now, self.free_at) + seconds
        self.total += seconds
        return self.free_at

    def stalled(self, t: float) -> float:
        """Prefill seconds done by time ``t`` (now or later, as queued now)."""
        return self.total - max(0.0, self.free_at - t)

    def pending(self, t: float) -> float:
        """Prefill seconds still queued at time ``t``."""
        return max(0.0, self.free_at - t)

    def pace(self) -> float:
        """Decoding per second of decode time: 1.0 for an empty batch, less as it holds more context."""
        if self.context_time <= 0 or self.token_delay <= 0:
            return 1.0
        return self.token_delay / (self.token_delay + self.context_time * self.context)

    def progress(self, t: float) -> float:
        """Decoding each running sequence has had by ``t`` (now or later, if the batch stays as it is)."""
        at, progress, stalled = self.anchor
        return progress + self.pace() * ((t - at) - (self.stalled(t) - stalled))

    def hold(self, tokens: int, now: float) -> None:
        """A sequence holding ``tokens`` of context joins the batch (or leaves it, with a negative count)."""
        self.anchor = (now, self.progress(now), self.stalled(now))
        self.context += tokens

    def eta(self, target: float, now: float) -> float:
        """When ``progress`` reaches ``target``, if the batch stays as it is."""
        return now + self.pending(now) + max(0.0, target - self.progress(now)) / self.pace()
