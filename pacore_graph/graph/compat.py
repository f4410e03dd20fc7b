"""``PaCoReConfig(compat="reference")``: the rules of the reference pipeline (stepfun-ai/PaCoRe,
``pacore/batch_inference/base_exp.py`` and ``pacore/utils.py``) where they differ from this project's.

For well-formed replies both send the same requests. Where replies are odd the reference pipeline:

- passes on every reply whose raw ``content`` is not empty, as the text after its last ``</think>``, or
  the whole text when there is none (an unclosed ``<think>`` trajectory, whitespace, or an empty text
  after ``</think>`` all become references);
- carries on with zero references when every trajectory of a round failed;
- returns the final call's raw ``content`` (its ``<think>`` block included, "" when it failed);
- retries every error, and on a 400/413 that says "reduce the length" or "too large" drops
  ``max_tokens`` and tries again (or, with no ``max_tokens`` left, gives up at once).

The README section "Differences from the reference pipeline" lists every difference, kept or not.
"""

from __future__ import annotations

from pacore_graph.errors import error_status
from pacore_graph.records import TrajectoryData
from pacore_graph.synthesis.compaction import THINK_CLOSE

SHORTER_STATUSES = (400, 413)
SHORTER_MESSAGES = ("reduce the length", "too large")


def pipeline_conclusion(content: str) -> str:
    """The conclusion the reference pipeline passes on (its ``Exp.parse_answer``): what follows the last
    ``</think>``, else the whole reply."""
    return content.rpartition(THINK_CLOSE)[2] if THINK_CLOSE in content else content


def passes_on(record: TrajectoryData) -> bool:
    """Whether a trajectory becomes a reference: it did not fail and its raw content is not empty (the
    reference's ``if r.get("content")``); a trajectory of a tool-using model also when it called tools."""
    return record.get("error") is None and (record.get("content_length", 0) > 0 or bool(record.get("tool_calls")))


def asks_shorter(exc: BaseException) -> bool:
    """The server refused the request as too long (vLLM: "... Please reduce the length of the messages or
    completion."): the reference pipeline then drops ``max_tokens``."""
    text = str(exc)
    return error_status(exc) in SHORTER_STATUSES and any(message in text for message in SHORTER_MESSAGES)


class ReferenceRetries:
    """The reference pipeline's retry rule for one trajectory (``async_chat_completion``).

    Every error is retried, client errors included. A refusal as too long is retried once more without
    ``max_tokens`` (``capped`` turns False: the caller sends the next attempts without it); once there is
    no ``max_tokens`` to drop, it ends the trajectory.
    """

    def __init__(self, capped: bool):
        self.capped = capped

    def retryable(self, exc: BaseException) -> bool:
        if not asks_shorter(exc):
            return True
        if self.capped:
            self.capped = False
            return True
        return False
