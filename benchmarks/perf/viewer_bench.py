"""How fast ``pacore view`` opens a big folder, in a real browser: Debian's Chromium driven by Playwright.

Two folders of the same schedule side by side, a small one (the baseline) and a big one, each opened ``repeats``
times in alternation, each time by a fresh ``pacore view`` process and a fresh browser context:

- ``server_start_s``: from starting ``pacore view`` to its printed URL (Python's start, the folder's index read);
- ``page_open_s``: from the page's navigation to the problems table rendered, as the page itself times it (the
  page, its script and style, the index, the table);
- ``cold_open_s``: from starting ``pacore view`` to the table rendered in a browser tab already open (the URL
  opened the moment it is printed, as ``--open`` does): what a person waits for;
- ``problem_open_s``: a click on a problem to its rounds drawn (one request for that problem's data);
- ``trajectory_open_s``: a click on a cell to its messages and conclusion; ``sort_s``: a click on the tokens
  column to the table sorted again.

Medians over the repeats. The ratio big/small of ``page_open_s`` says whether the page's cost grows with the
folder (it loads only the index: about 300 bytes per problem).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
# Chromium on a closed network (and as root): no sandbox, no GPU, none of Google's background connections.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
MEASURES = ("server_start_s", "page_open_s", "cold_open_s", "problem_open_s", "trajectory_open_s", "sort_s")


@dataclass
class Opening:
    """The measures of one folder over the repeats."""

    problems: int
    samples: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in MEASURES})
    first_load: list[str] = field(default_factory=list)
    index_bytes: int = 0

    def median(self, name: str) -> float:
        return round(statistics.median(self.samples[name]), 3)


def open_once(browser: Any, folder: Path, problem: str, opening: Opening) -> None:
    """One fresh ``pacore view`` of ``folder`` in a fresh page of a browser already open: each measure once."""
    from urllib.parse import urlsplit

    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(urlsplit(request.url).path))
    sizes: dict[str, int] = {}
    page.on("response", lambda response: sizes.__setitem__(urlsplit(response.url).path, len(response.body())))
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "pacore_graph.cli", "view", str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = (process.stdout.readline() if process.stdout else "").strip()
        if not url:
            raise RuntimeError(f"pacore view {folder} printed no URL: {process.communicate(timeout=30)[1][-2000:]}")
        up = time.perf_counter()
        page.goto(url, wait_until="commit")
        page.wait_for_selector("body[data-ready=index]")
        shown = time.perf_counter()
        rendered_ms = page.evaluate("performance.getEntriesByName('pacore-index-rendered')[0].startTime")
        opening.first_load, opening.index_bytes = list(requests), sizes.get("/api/index", 0)
        opening.samples["server_start_s"].append(up - started)
        opening.samples["page_open_s"].append(rendered_ms / 1000)
        opening.samples["cold_open_s"].append(shown - started)
        opening.samples["sort_s"].append(_timed(lambda: _sort(page)))
        opening.samples["problem_open_s"].append(_timed(lambda: _open_problem(page, problem)))
        opening.samples["trajectory_open_s"].append(_timed(lambda: _open_trajectory(page)))
    finally:
        context.close()
        process.terminate()
        process.communicate(timeout=30)


def _timed(action: Any) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _sort(page: Any) -> None:
    page.click("th[data-key=tokens]")
    page.wait_for_selector("th[data-key=tokens].sorted-desc")


def _open_problem(page: Any, problem: str) -> None:
    page.evaluate(f"location.hash = '#/p/{problem}'")
    page.wait_for_selector(f"body[data-problem='{problem}'] #run .round")


def _open_trajectory(page: Any) -> None:
    page.click("#run .round[data-round='0'] .tile >> nth=0")
    page.wait_for_selector("#drawer")


def run(folders: list[tuple[Path, int]], repeats: int, chromium: str) -> list[Opening]:
    """Open each folder ``repeats`` times, the folders in alternation (noise falls on every side alike)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise RuntimeError(
            "pacore bench viewer drives a browser with Playwright: pip install playwright (the dev extra)"
        ) from None
    if not Path(chromium).exists():
        raise RuntimeError(f"no Chromium at {chromium}: run scripts/chromium-setup.sh (Debian's chromium package)")
    openings = [Opening(problems) for _, problems in folders]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            for _ in range(repeats):
                for (folder, problems), opening in zip(folders, openings, strict=True):
                    open_once(browser, folder, f"gen-{problems // 2:05d}", opening)
        finally:
            browser.close()
    return openings
