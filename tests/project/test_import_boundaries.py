"""The import boundaries of docs/architecture.md, as `lint-imports` checks them (contracts in pyproject.toml).

`make test` runs `lint-imports` itself; these tests also show that each contract catches what it is meant to:
one forbidden import, added to a copy of the packages, breaks exactly the contract that names it.
"""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = {
    "pacore_graph": "pacore_graph",
    "pacore_agents": "agents",
    "pacore_benchmarks": "benchmarks",
    "pacore_emulator": "emulator",
}


def lint_imports(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "400"}  # one line per contract in the report
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)  # ahead of the editable install's finder
    command = [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def copy_packages(target: Path) -> None:
    """The four packages' Python files under their import names (``agents/`` as ``pacore_agents`` ...)."""

    def not_python(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if n == "__pycache__" or (not n.endswith(".py") and not (Path(folder) / n).is_dir())]

    for name, folder in PACKAGES.items():
        shutil.copytree(ROOT / folder, target / name, ignore=not_python)


def test_the_contracts_hold():
    run = lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"Contracts: \d+ kept, 0 broken", run.stdout)


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        (
            "pacore_graph/models/llama_server.py",
            "import pacore_benchmarks.hub",
            "the library imports neither the agents nor the benchmarks",
        ),
        (
            "pacore_emulator/replies.py",
            "from pacore_graph.config import DEFAULT_TEMPLATE",
            "the serving emulator stands alone",
        ),
        (
            "pacore_agents/swe/prompts.py",
            "from pacore_graph.graph.runner import PaCoReRunner",
            "agents and benchmarks use the library as users do",
        ),
        (
            "pacore_benchmarks/hub.py",
            "from pacore_graph.batch.folder import RunFolder",
            "agents and benchmarks use the library as users do",
        ),
        (
            "pacore_agents/swe/prompts.py",
            "from pacore_graph.models.embedded import free_port",
            "agents and benchmarks use the library as users do",
        ),  # a public package's inner module
        ("pacore_benchmarks/hub.py", "import pacore_agents.swe.tasks", "the agents and the benchmarks are independent"),
        (
            "pacore_graph/models/http.py",
            "from pacore_graph.graph.runner import PaCoReRunner",
            "the library's folders, each above what it uses",
        ),
        (
            "pacore_graph/explorers/chat.py",
            "from pacore_graph.batch import folder",
            "the library's folders, each above what it uses",
        ),
        (
            "pacore_graph/records.py",
            "from pacore_graph.models import chat_model",
            "the vocabulary (config, errors, records, inputs) and the coordination options run nothing",
        ),
        (
            "pacore_graph/synthesis/prompt.py",
            "from pacore_graph.explorers import episode",
            "the synthesis prompt is text over messages: it calls no model and runs no trajectory",
        ),
        (
            "pacore_graph/synthesis/context_window.py",
            "from pacore_graph.models import preflight",
            "the synthesis prompt is text over messages: it calls no model and runs no trajectory",
        ),
        (
            "pacore_graph/config.py",
            "from pacore_graph.coordination import answers",
            "the config is a leaf: it imports nothing of the library, so every folder may read one",
        ),
    ],
)
def test_a_forbidden_import_breaks_its_contract(tmp_path, module, line, contract):
    copy_packages(tmp_path)
    with open(tmp_path / module, "a") as source:
        source.write(f"\n{line}  # the violation under test\n")
    run = lint_imports(tmp_path, pythonpath=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    broken = [text for text in run.stdout.splitlines() if text.endswith(" BROKEN") or " BROKEN (" in text]
    assert any(text.startswith(contract) for text in broken), run.stdout


def test_no_import_runs_in_a_circle_between_modules_or_folders():
    """No circle of imports in the library, type-checking imports included: between modules, nor between its folders
    (each root module counting as a folder of its own), so every folder reads as above what it uses."""
    import grimp

    graph = grimp.build_graph("pacore_graph", exclude_type_checking_imports=False)
    modules = [name for name in graph.modules if name != "pacore_graph"]

    def folder(name: str) -> str:
        return ".".join(name.split(".")[:2])

    arrows = {
        name: {found for found in graph.find_modules_directly_imported_by(name) if found != "pacore_graph"}
        for name in modules
    }
    folders = {folder(name): set() for name in modules}
    for name, targets in arrows.items():
        folders[folder(name)] |= {folder(target) for target in targets if folder(target) != folder(name)}
    assert circles(arrows) == [] and circles(folders) == []


def circles(arrows: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one node (Tarjan), each a circle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in arrows.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            part = []
            while (top := stack.pop()) != node:
                part.append(top)
            if part:
                found.append(sorted([node, *part]))

    for node in list(arrows):
        if node not in index:
            visit(node)
    return found


def test_the_public_modules_are_open_to_agents_and_benchmarks(tmp_path):
    """What the contract allows: the public modules themselves, each imported by an agent and a benchmark."""
    copy_packages(tmp_path)
    public = [
        "pacore_graph",
        "pacore_graph.extend",
        "pacore_graph.command_kit",
        "pacore_graph.coordination",
        "pacore_graph.models",
        "pacore_graph.server",
    ]
    for module in ("pacore_agents/swe/prompts.py", "pacore_benchmarks/hub.py"):
        with open(tmp_path / module, "a") as source:
            source.writelines(f"\nimport {name}  # allowed\n" for name in public)
    run = lint_imports(tmp_path, pythonpath=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr


def module_strings(path: Path) -> list[tuple[int, str]]:
    """String constants of a module that are not docstrings (a ``python -m`` command, an importlib name)."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    strings = [node for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    return [(node.lineno, node.value) for node in strings if id(node) not in docstrings]


def test_the_library_names_no_agent_or_benchmark_module():
    """What `lint-imports` cannot see: a module of the agents or benchmarks run by name (``serve-vllm --emulate``
    once started ``python -m pacore_benchmarks.perf.emulator``; the emulator is its own package now)."""
    named = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for path in sorted((ROOT / "pacore_graph").rglob("*.py"))
        for line, text in module_strings(path)
        if re.search(r"\bpacore_(agents|benchmarks)\b", text)
    ]
    assert not named, named
