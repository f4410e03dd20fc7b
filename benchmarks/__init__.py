"""Evaluation runners and performance benchmarks (installed as ``pacore_benchmarks``)."""
