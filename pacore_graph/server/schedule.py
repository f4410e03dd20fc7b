"""Which PaCoRe schedule a request asks for: a model-name prefix, or the ``pacore`` body field.

    pacore-low/NAME  pacore-medium/NAME  pacore-high/NAME    a preset (paper: [4], [16], [32, 4])
    pacore-rounds-32x4/NAME                                  explicit rounds; pacore-rounds-0/NAME: one plain call
    pacore/NAME or NAME                                      the server's default schedule
    pacore-high (no /NAME)                                   the preset on the server's default model
    "pacore": {"rounds": [32, 4]} or {"preset": "high"}      body field; wins over the prefix

Model names as clients pick them: an OpenAI client can choose a schedule per call by model name alone
(Open WebUI, litellm, mini-swe-agent), and a client that can add body fields may use ``pacore``.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, model_validator

from pacore_graph.config import PRESETS, check_schedule_size
from pacore_graph.inputs import one_line
from pacore_graph.server.errors import RequestError

_ALIAS = re.compile(r"^pacore(?:-(?P<preset>[a-z]+)|-rounds-(?P<rounds>[^/]*))?$")


class ScheduleField(BaseModel):
    """The ``pacore`` body field: one of ``rounds`` or ``preset``. Strict: ``["2"]`` and ``[true]`` are not rounds."""

    model_config = ConfigDict(extra="forbid", strict=True)

    rounds: list[int] | None = None
    preset: str | None = None

    @model_validator(mode="after")
    def _one_of(self) -> ScheduleField:
        if self.rounds is not None and self.preset is not None:
            raise ValueError("give either rounds or preset, not both")
        return self

    def schedule(self) -> list[int] | None:
        if self.preset is not None:
            if self.preset not in PRESETS:
                raise RequestError(
                    400,
                    f"unknown PaCoRe preset {one_line(repr(self.preset), 40)}: choose one of {', '.join(PRESETS)}",
                    param="pacore.preset",
                )
            return list(PRESETS[self.preset])
        return None if self.rounds is None else checked_rounds(self.rounds, "pacore.rounds")


def split_model_name(name: str) -> tuple[str | None, list[int] | None]:
    """(upstream model or None for the server's default, rounds or None for the default schedule)."""
    head, _, rest = name.partition("/")
    match = _ALIAS.match(head)
    if match is None or (match["preset"] is not None and match["preset"] not in PRESETS):
        return name, None  # not an alias (e.g. a model really named pacore-8b): the name is the upstream's
    if match["preset"] is not None:
        rounds: list[int] | None = list(PRESETS[match["preset"]])
    elif match["rounds"] is not None:
        rounds = parse_alias_rounds(match["rounds"])
    else:
        rounds = None
    return rest or None, rounds


def parse_alias_rounds(text: str) -> list[int]:
    """'32x4' -> [32, 4]; '0' -> [] (one plain call)."""
    if text == "0":
        return []
    if not re.fullmatch(r"[0-9]{1,9}(x[0-9]{1,9}){0,15}", text):
        raise RequestError(
            400,
            f"model prefix pacore-rounds-{one_line(text, 40)} is not a schedule: write trajectories per round "
            "joined by x, e.g. pacore-rounds-32x4/NAME (pacore-rounds-0/NAME: one plain call)",
            param="model",
        )
    return checked_rounds([int(k) for k in text.split("x")], "model")


def checked_rounds(rounds: list[int], param: str) -> list[int]:
    """Refused before anything is spent: a round of no trajectory, or more than any server is meant to run."""
    try:
        return check_schedule_size(rounds, param)
    except ValueError as exc:
        raise RequestError(400, str(exc), param=param) from None


def aliases(model: str) -> list[str]:
    """The preset names of one upstream model, as ``/v1/models`` lists them."""
    return [f"pacore-{preset}/{model}" for preset in PRESETS]
