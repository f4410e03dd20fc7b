"""A run folder's settings fingerprint: rows made under other settings are never mixed into its results.

A folder is taken only when it is empty (or holds only what a claim leaves before its ``run.json``) or when
its ``run.json`` is one this project wrote: a folder of someone else's files is refused, nothing written.

``FOLDER/run.json`` holds ``{"fingerprint": {...}, "settings": {...}}``. The fingerprint is what the
results depend on (model, schedule, sampling, grading rules ...), chosen by each kind of run; the settings
are the whole configuration, kept for the reader. A later run into the folder must bring the same
fingerprint, field for field (a field one side lacks counts as different), or it is refused with one line
naming the differing fields.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pacore_graph.batch.results_file import write_json_atomically
from pacore_graph.errors import UsageError

SETTINGS_FILE = "run.json"
_SHOWN = 80  # characters of a value a message shows
_CLAIM_LEFTOVERS = re.compile(r"^(\.lock|\.run\.json\.[0-9]+\.tmp)$")  # a claim cut short by a kill leaves these


class SettingsMismatch(UsageError):
    """The folder holds results made with other settings; ``differing`` says, field by field, how."""

    def __init__(self, folder: Path, differing: list[str]):
        self.folder = folder
        self.differing = differing
        super().__init__(
            f"{folder} holds results made with other settings ({'; '.join(differing)}): "
            "choose another output folder to keep both"
        )


class ForeignFolder(UsageError):
    """The folder holds files but no ``run.json``: no run of this project made it, so none takes it over."""

    def __init__(self, folder: Path, names: list[str]):
        self.folder = folder
        self.names = names
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        super().__init__(
            f"{folder} holds files no run of pacore-graph made ({shown}) and no {SETTINGS_FILE}: choose an empty "
            "or new output folder (nothing was written)"
        )


def as_json(value: Any) -> Any:
    """The value as it reads back from JSON (tuples become lists, paths strings), so comparisons are fair."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


_MISSING = object()


def _shown(value: Any) -> str:
    text = "none" if value is _MISSING else repr(value)
    return text if len(text) <= _SHOWN else f"{text[: _SHOWN - 3]}..."


def differences(stored: Mapping[str, Any], wanted: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``field: folder has X, this run Y`` for every field on which the two fingerprints differ; within a field
    both sides hold as a mapping (a panel, model kwargs), the differing keys themselves (``panel.models.small``),
    so a long value never hides what changed."""
    found = []
    for name in sorted(set(stored) | set(wanted)):
        old, new = stored.get(name, _MISSING), wanted.get(name, _MISSING)
        if old == new:
            continue
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            found += differences(old, new, f"{prefix}{name}.")
        else:
            found.append(f"{prefix}{name}: folder has {_shown(old)}, this run {_shown(new)}")
    return found


def refuse_foreign(folder: Path) -> None:
    """Refuse ``folder``, writing nothing, when it holds files but no ``run.json``: someone else's."""
    if (folder / SETTINGS_FILE).exists():
        return
    others = sorted(name for name in os.listdir(folder) if not _CLAIM_LEFTOVERS.match(name))
    if others:
        raise ForeignFolder(folder, others)


def check_fingerprint(folder: Path, fingerprint: Mapping[str, Any], *, escalation: bool = False) -> list[int] | None:
    """Refuse ``folder`` (reading only) if its ``run.json`` is not this project's or holds another fingerprint.
    With ``escalation``, a fingerprint that differs only in a larger ``rounds`` is accepted: the folder's earlier
    rounds are returned (see :mod:`pacore_graph.batch.escalation`)."""
    if not (folder / SETTINGS_FILE).exists():
        return None
    try:
        stored = json.loads((folder / SETTINGS_FILE).read_text(encoding="utf-8")).get("fingerprint")
    except (json.JSONDecodeError, AttributeError, UnicodeDecodeError, RecursionError):
        stored = None
    if not isinstance(stored, dict):
        raise SettingsMismatch(folder, [f"{SETTINGS_FILE} has no settings fingerprint (an older version wrote it)"])
    wanted = as_json(dict(fingerprint))
    differing = differences(stored, wanted)
    if differing and escalation:
        from pacore_graph.batch.escalation import escalated_from

        earlier = escalated_from(stored, wanted, differing)
        if earlier is not None:
            return earlier
    if differing:
        raise SettingsMismatch(folder, differing)
    return None


def save_settings(folder: Path, fingerprint: Mapping[str, Any], settings: Mapping[str, Any] | None = None) -> None:
    """Write this run's fingerprint and settings to ``run.json`` (after :func:`check_fingerprint`, under the lock)."""
    write_json_atomically(
        folder / SETTINGS_FILE, {"fingerprint": as_json(dict(fingerprint)), "settings": as_json(dict(settings or {}))}
    )
