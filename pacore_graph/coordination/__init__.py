"""Coordination beyond the paper, as options of the one operator (all off by default).

- budgets: a token budget and a wall-clock deadline per run (:class:`Budget`);
- early stop by agreement (:class:`EarlyStop`), with an answer extractor (``"boxed"`` ships);
- random subsets of references per trajectory (Recursive Self-Aggregation; :func:`rsa_config`
  in :mod:`pacore_graph.coordination.rsa` maps RSA's population, subset and loops onto a config);
- deduplicated references, with how many gave each;
- final selectors: a majority vote over extracted answers or a verifier call instead of one synthesis;
- panels: several models in one run (:class:`Panel`, :class:`PanelMember`), each round's slots shared among them.
- escalation: which schedule a run can continue at, reusing what it has (:func:`check_escalation`; the run takes
  ``reuse=`` an earlier result).

Set them on :class:`~pacore_graph.config.PaCoReConfig`; the result's ``outcome`` and each trajectory's
``cut`` / ``answer`` / ``reference_indices`` say what they did.
"""

from pacore_graph.config import VERIFIER_TEMPLATE, Budget, EarlyStop
from pacore_graph.coordination.answers import answer_key, boxed_answer, extract_answer, last_boxed
from pacore_graph.coordination.escalation import check_escalation, escalates
from pacore_graph.coordination.templates import RSA_TEMPLATE
from pacore_graph.coordination.vote import VoteResult, majority_vote
from pacore_graph.panel import Panel, PanelMember

__all__ = [
    "RSA_TEMPLATE",
    "VERIFIER_TEMPLATE",
    "Budget",
    "EarlyStop",
    "Panel",
    "PanelMember",
    "VoteResult",
    "answer_key",
    "boxed_answer",
    "check_escalation",
    "escalates",
    "extract_answer",
    "last_boxed",
    "majority_vote",
]
