"""Reading a benchmark from the dataset hub, and failing at once where the hub cannot be reached.

``datasets.load_dataset`` retries an unreachable hub for about 30 seconds before it gives up with the same
error; one request with a short timeout first says so in a second or less. With ``HF_HUB_OFFLINE`` or
``HF_DATASETS_OFFLINE`` set, ``datasets`` reads its local cache without the network, so it is asked directly.
The way out offline is a local file: ``--data``, such as the excerpts this clone ships in ``tests/fixtures/``.
Without ``--data`` a benchmark reads the shared local copy when it is here, else the hub (:class:`DefaultData`).
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pacore_graph.command_kit import say
from pacore_graph.extend import UsageError

T = TypeVar("T")

HUB_TIMEOUT = 3.0  # seconds: the hub answers well within this when it can be reached at all
# The benchmark excerpts in the clone this package is installed from (pip install -e), when it is one.
FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


def _offline_mode() -> bool:
    return any(
        os.environ.get(name, "").lower() in ("1", "true", "yes", "on")
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def unreachable_reason(timeout: float = HUB_TIMEOUT) -> str | None:
    """Why the hub cannot be reached now, or None when it answers (any HTTP status) or offline mode is on."""
    if _offline_mode():
        return None
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return None  # it answered
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"the dataset hub ({endpoint}) cannot be reached: {getattr(exc, 'reason', exc)}"
    return None


def shipped_excerpt(relative: str) -> Path | None:
    """A benchmark excerpt in this clone's ``tests/fixtures`` (absolute), or None outside a clone."""
    path = FIXTURES / relative
    return path if path.is_file() else None


def offline_hint(what: str, excerpt: str) -> str:
    """What to pass instead of the hub: ``--data`` with ``what``, and the shipped excerpt when there is one."""
    path = shipped_excerpt(excerpt)
    shipped = f"; this clone ships a small excerpt: --data {path}" if path else ""
    return f"pass --data PATH ({what}){shipped}"


def load_from_hub(name: str, split: str, what: str, excerpt: str) -> Any:
    """``datasets.load_dataset(name, split=split)``; a ``ValueError`` saying what to pass instead when it cannot
    be read (``datasets`` missing, the hub out of reach, any hub error)."""
    try:
        import datasets  # noqa: PLC0415 - optional and heavy
    except ImportError:
        raise ValueError(
            f"{name!r} is not a local file, and reading it from the hub needs `pip install datasets`; "
            f"or {offline_hint(what, excerpt)}"
        ) from None
    reason = unreachable_reason()
    if reason is not None:
        raise ValueError(f"cannot load {name!r}: {reason}; {offline_hint(what, excerpt)}")
    try:
        return datasets.load_dataset(name, split=split)
    except Exception as exc:  # noqa: BLE001 - the hub raises many types: offline, missing repo, auth
        first_line = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ValueError(
            f"cannot load {name!r} from the hub ({type(exc).__name__}: {first_line}); "
            f"offline, {offline_hint(what, excerpt)}"
        ) from exc


@dataclass(frozen=True)
class DefaultData:
    """What a benchmark reads when no ``--data`` is given: ``local`` (the shared copy, relative to the working
    folder) when it is here, else ``hub_name`` from the dataset hub, saying so first."""

    local: Path
    hub_name: str

    def source(self, given: str | None, cwd: Path | None = None) -> str:
        """``--data`` when given, else the local copy when it exists under ``cwd`` (default: here), else the hub."""
        if given:
            return given
        return str(self.local) if ((cwd or Path.cwd()) / self.local).exists() else self.hub_name

    def help(self, what: str) -> str:
        return f"{what} (default: {self.local} when it exists, else {self.hub_name} from the hub)"

    def read(self, given: str | None, load: Callable[[str], T]) -> T:
        """``load(source)``; when the hub was chosen for want of ``--data``, a line says so, and a refusal
        (``ValueError``) says why it was the hub."""
        source = self.source(given)
        if given or source != self.hub_name:
            return load(source)
        say(f"no --data given and {self.local} is not here: reading {self.hub_name} from the hub")
        try:
            return load(source)
        except ValueError as exc:
            raise UsageError(f"no --data given and {self.local} is not here, so {exc}") from None
