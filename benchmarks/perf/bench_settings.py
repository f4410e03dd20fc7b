"""The settings of a performance benchmark, as its command line makes them: the defaults, or the smaller
``--quick`` set, with what the command line gave on top (the emulator's fields included)."""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel


class BenchSettings(BaseModel):
    """Base of a performance benchmark's settings; a subclass names its ``--quick`` values in ``quick_defaults``."""

    @classmethod
    def quick_defaults(cls) -> dict[str, Any]:
        return {}

    @classmethod
    def quick(cls, **overrides: Any) -> Self:
        """The ``--quick`` run (about a minute or a few), with ``overrides`` on top."""
        return cls(**{**cls.quick_defaults(), **overrides})

    @classmethod
    def from_command_line(cls, quick: bool, *, emulator: dict[str, Any] | None = None, **given: Any) -> Self:
        """The defaults (``quick``: the quick ones) with each value the command line gave (None: not given) on
        top; ``emulator``'s given values go into the chosen emulator settings, checked (a dict value, such as
        ``{"answers": {"weights": ...}}``, sets those fields of that part and keeps its others)."""
        overrides = {name: value for name, value in given.items() if value is not None}
        settings = cls.quick(**overrides) if quick else cls(**overrides)
        changes = {name: value for name, value in (emulator or {}).items() if value is not None}
        if not changes:
            return settings
        current = settings.emulator  # type: ignore[attr-defined]
        merged = current.model_dump()
        for name, value in changes.items():
            merged[name] = {**merged[name], **value} if isinstance(value, dict) else value
        return settings.model_copy(update={"emulator": type(current).model_validate(merged)})
