"""What ``--help`` tells a newcomer: defaults that are not obvious are said where the flag is."""

from __future__ import annotations

import argparse
import re

from pacore_graph.cli import build_parser
from pacore_graph.models.embedded import EMBEDDED_MAX_TOKENS


def _help(*command: str, raw: bool = False) -> str:
    parser = build_parser()
    for name in command:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    text = parser.format_help()
    return text if raw else " ".join(text.split())  # one line: argparse wraps at the terminal's width


def test_solve_help_names_the_default_model_preset_and_cap():
    text = _help("solve")
    assert "else the embedded SmolLM2-135M" in text and "$OPENAI_BASE_URL" in text
    assert "low [4], medium [16], high [32,4] (default: low)" in text and "preset low" in text
    assert f"embedded model: {EMBEDDED_MAX_TOKENS}" in text


def test_serve_local_help_explains_port_and_context():
    text = _help("serve-local")
    assert "port on 127.0.0.1 to listen on (default: 8080)" in text
    assert "context size in tokens (default: 8192" in text


def test_bench_math_help_shows_output_and_data_as_optional():
    """Both have defaults (runs/math-<data>, the shared copy or the hub): no usage line may show them as required."""
    text = _help("bench", "math", raw=True)
    usage = text.split("positional arguments:")[0]  # argparse's usage line and the description's synopsis
    assert "[--output DIR]" in usage and "[--data PATH]" in usage
    assert not re.search(r"(?<!\[)--output (DIR|OUTPUT)", usage) and not re.search(r"(?<!\[)--data (PATH|DATA)", usage)
    assert "default: runs/math-<data name>" in " ".join(text.split())
