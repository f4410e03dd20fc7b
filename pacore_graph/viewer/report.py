"""``pacore view FOLDER --html FILE``: the same page in one file, to mail or to keep beside a paper.

The page's stylesheet and script are inlined; the index and every problem's data are JSON blocks that the
script parses only when the problem is opened (a 1,000-problem report opens as fast as its index). A JSON block
cannot end its ``<script>`` element (``<``, ``>`` and ``&`` are written as ``\\u003c`` ...), and the page's
Content-Security-Policy lets only the inlined script and stylesheet run: nothing is fetched from anywhere.
Long texts left out of a problem's data (a pool trajectory's reasoning) are not in the report.
"""

from __future__ import annotations

import base64
import hashlib
import html
import os
from pathlib import Path
from typing import Any

import orjson

from pacore_graph.viewer.folder import FolderView
from pacore_graph.viewer.server import static_text

_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def json_block(element_id: str, data: Any) -> str:
    """``data`` as a JSON ``<script>`` block that no text in it can close or break out of."""
    text = orjson.dumps(data).decode("utf-8").translate(_ESCAPES)
    return f'<script type="application/json" id="{element_id}">{text}</script>\n'


def _digest(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def write_report(view: FolderView, path: str | os.PathLike[str]) -> tuple[Path, int]:
    """Write the folder's page with all its data into one HTML file; the file and how many problems it holds."""
    index = view.index()
    for number, entry in enumerate(index["problems"]):
        entry["n"] = number
    script, style = static_text("viewer.js"), static_text("viewer.css")
    policy = (
        f"default-src 'none'; script-src '{_digest(script)}'; style-src '{_digest(style)}'; img-src data:; "
        "base-uri 'none'; form-action 'none'"
    )
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(
            '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            '<meta name="referrer" content="no-referrer">\n'
            f"<title>pacore view · {html.escape(index['folder'])}</title>\n<style>{style}</style>\n</head>\n<body>\n"
            '<div id="app"><p class="loading">Loading…</p></div>\n'
        )
        handle.write(json_block("pacore-index", index))
        handle.write(f"<script>{script}</script>\n")  # before the problems: the table shows while they are parsed
        for entry in index["problems"]:
            handle.write(json_block(f"pacore-problem-{entry['n']}", view.problem(str(entry["key"]))))
        handle.write("</body>\n</html>\n")
    os.replace(tmp, out)
    return out, len(index["problems"])
