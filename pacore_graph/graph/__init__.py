"""The operator: the PaCoRe ``StateGraph`` (rounds of K trajectories fanned out with ``Send``, each compacted
by a collector) and the ways it runs: ``PaCoReRunner`` / ``asolve`` for one problem, ``PaCoReNode`` inside a
graph. One trajectory is an ``Exploration`` (its explorer's attempts, then its record); a round's failures
meet at its ``RoundBarrier``; ``PaCoReContext`` carries what a run needs and nothing of it is checkpointed."""
