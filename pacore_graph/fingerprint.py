"""A run folder's settings fingerprint: rows made under other settings are never mixed into its results.

``FOLDER/run.json`` holds ``{"fingerprint": {...}, "settings": {...}}``. The fingerprint is what the
results depend on (model, schedule, sampling, grading rules ...), chosen by each kind of run; the settings
are the whole configuration, kept for the reader. A later run into the folder must bring the same
fingerprint, field for field (a field one side lacks counts as different), or it is refused with one line
naming the differing fields.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pacore_graph.errors import PaCoReError
from pacore_graph.results_file import write_json_atomically

SETTINGS_FILE = "run.json"
_SHOWN = 80  # characters of a value a message shows


class SettingsMismatch(PaCoReError):
    """The folder holds results made with other settings; ``differing`` says, field by field, how."""

    def __init__(self, folder: Path, differing: list[str]):
        self.folder = folder
        self.differing = differing
        super().__init__(
            f"{folder} holds results made with other settings ({'; '.join(differing)}): "
            "choose another output folder to keep both"
        )


def as_json(value: Any) -> Any:
    """The value as it reads back from JSON (tuples become lists, paths strings), so comparisons are fair."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


_MISSING = object()


def _shown(value: Any) -> str:
    text = "none" if value is _MISSING else repr(value)
    return text if len(text) <= _SHOWN else f"{text[: _SHOWN - 3]}..."


def differences(stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    """``field: folder has X, this run Y`` for every field on which the two fingerprints differ."""
    return [
        f"{name}: folder has {_shown(stored.get(name, _MISSING))}, this run {_shown(wanted.get(name, _MISSING))}"
        for name in sorted(set(stored) | set(wanted))
        if stored.get(name, _MISSING) != wanted.get(name, _MISSING)
    ]


def claim_settings(folder: Path, fingerprint: Mapping[str, Any], settings: Mapping[str, Any] | None = None) -> None:
    """Refuse ``folder`` if its ``run.json`` holds another fingerprint; else write this run's settings there."""
    path = folder / SETTINGS_FILE
    wanted = as_json(dict(fingerprint))
    if path.exists():
        try:
            stored = json.loads(path.read_text(encoding="utf-8")).get("fingerprint")
        except (json.JSONDecodeError, AttributeError, UnicodeDecodeError):
            stored = None
        if not isinstance(stored, dict):
            raise SettingsMismatch(folder, [f"{SETTINGS_FILE} has no settings fingerprint (an older version wrote it)"])
        differing = differences(stored, wanted)
        if differing:
            raise SettingsMismatch(folder, differing)
    write_json_atomically(path, {"fingerprint": wanted, "settings": as_json(dict(settings or {}))})
