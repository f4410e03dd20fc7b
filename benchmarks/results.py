"""Moved to :mod:`pacore_graph.results_file` (``pacore_graph.extend.ResultsFile``); kept until ``agents/`` switches."""

from pacore_graph.results_file import ResultsFile

__all__ = ["ResultsFile"]
