"""Fixtures of the viewer's tests: run folders of each kind, made once per session by the project's own commands
(viewer_folders.py), and Debian's Chromium driven by Playwright.

Screenshots of each page kind go to ``$PACORE_VIEWER_SCREENSHOTS`` when it is set, else to
``viewer-screenshots`` under pytest's base temporary folder (printed at the end of the session).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mock_openai import MockOpenAIServer
from viewer_folders import math_folder, multichallenge_folder, run_folder, solve_folder, swe_eval, swe_folder

from pacore_benchmarks.perf.viewer_bench import CHROMIUM, CHROMIUM_ARGS  # Chromium's flags on a closed network


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    folder = Path(os.environ.get("PACORE_VIEWER_SCREENSHOTS") or tmp_path_factory.getbasetemp() / "viewer-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        request.addfinalizer(lambda: reporter.write_line(f"viewer screenshots: {folder}"))
    return folder


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, headless, driven by Playwright from PyPI (no browser download). One per module, not per
    session: Playwright's sync API keeps an event loop running in the main thread while it is open, and an async
    test of a later module (pytest-asyncio) cannot start its own loop beside it."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "no Chromium: run scripts/chromium-setup.sh (make test does)"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    """A fresh page whose requests, console errors and page errors the test can read."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.requests = []  # type: ignore[attr-defined]
    page.errors = []  # type: ignore[attr-defined]
    page.on("request", lambda request: page.requests.append(request.url))  # type: ignore[attr-defined]
    page.on("pageerror", lambda error: page.errors.append(str(error)))  # type: ignore[attr-defined]
    page.on("console", lambda message: message.type == "error" and page.errors.append(message.text))  # type: ignore[attr-defined]
    yield page
    context.close()


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("viewer") / "run"
    requests = run_folder(out, MockOpenAIServer)
    return out, requests


@pytest.fixture(scope="session")
def solve_dir(tmp_path_factory, embedded_server) -> Path:
    return solve_folder(tmp_path_factory.mktemp("viewer") / "solve", embedded_server.base_url)


@pytest.fixture(scope="session")
def math_dir(tmp_path_factory) -> Path:
    return math_folder(tmp_path_factory.mktemp("viewer") / "math")


@pytest.fixture(scope="session")
def multichallenge_dir(tmp_path_factory) -> Path:
    return multichallenge_folder(tmp_path_factory.mktemp("viewer") / "multichallenge")


@pytest.fixture(scope="session")
def swe_dir(tmp_path_factory) -> Path:
    return swe_folder(tmp_path_factory.mktemp("viewer") / "swe", MockOpenAIServer)


@pytest.fixture(scope="session")
def swe_eval_dir(swe_dir, tmp_path_factory) -> Path:
    """A copy of the SWE run's folder with ``pacore swe eval``'s logs written into it (Docker)."""
    import shutil

    copy = tmp_path_factory.mktemp("viewer") / "swe-evaluated"
    shutil.copytree(swe_dir, copy)
    swe_eval(copy)
    return copy


@pytest.fixture(scope="session")
def big_dir(tmp_path_factory) -> Path:
    """1,000 problems of [32, 4] in the real row format (benchmarks/perf/viewer_folder.py), about 44 MB."""
    from pacore_benchmarks.perf.viewer_folder import make_folder

    return make_folder(tmp_path_factory.mktemp("viewer") / "big", 1000, [32, 4])
