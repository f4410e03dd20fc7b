"""A panel as data: what it accepts and refuses, how it shares a round's slots, and that a config holding one stays
plain JSON (checkpoints and thread ids keep it)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from pydantic import ValidationError

from pacore_graph import PaCoReConfig
from pacore_graph.panel import Panel, apportion


def test_weights_are_apportioned_exactly_and_the_final_round_is_the_synthesizers():
    panel = Panel(models={"small": 3, "strong": 1}, synthesizer="strong")
    slots = panel.slot_map(0, 8, final=False, seed=42)
    assert Counter(slots) == {"small": 6, "strong": 2}
    assert panel.slot_map(1, 1, final=True, seed=42) == ["strong"]
    assert apportion({"a": 1, "b": 1, "c": 1}, 4) == ["a", "a", "b", "c"]  # the remainder to the first listed
    assert apportion({"a": 0, "b": 1}, 3) == ["b", "b", "b"]


def test_the_slot_map_is_a_function_of_the_panel_the_round_and_the_seed():
    panel = Panel(models={"small": 1, "strong": 1}, synthesizer="strong")
    first = panel.slot_map(0, 16, final=False, seed=7)
    assert first == Panel.model_validate_json(panel.model_dump_json()).slot_map(0, 16, final=False, seed=7)
    assert any(panel.slot_map(0, 16, final=False, seed=seed) != first for seed in range(8, 12))
    seeded = panel.model_copy(update={"seed": 3})
    assert seeded.slot_map(0, 16, final=False, seed=7) == seeded.slot_map(0, 16, final=False, seed=99)


def test_per_round_slot_maps_and_weights():
    panel = Panel(
        models={"small": 1, "strong": 0},
        rounds=[["small", "strong", "small"], {"strong": 1}],
        synthesizer="strong",
    )
    assert panel.slot_map(0, 3, final=False, seed=1) == ["small", "strong", "small"]
    assert panel.slot_map(1, 2, final=False, seed=1) == ["strong", "strong"]
    assert panel.slot_map(2, 4, final=False, seed=1) == ["small"] * 4  # no entry: the members' weights
    config = PaCoReConfig(rounds=[3, 2, 4], panel=panel)
    assert json.loads(config.model_dump_json())["panel"]["rounds"][0] == ["small", "strong", "small"]
    assert PaCoReConfig.model_validate_json(config.model_dump_json()) == config


@pytest.mark.parametrize(
    ("fields", "rounds", "said"),
    [
        ({"models": {"a": 1, "b": 1}}, [4], "needs a synthesizer"),
        ({"models": {"a": 1}, "synthesizer": "z"}, [4], "synthesizer names 'z', not in the panel"),
        ({"models": {"a": 1, "b": 1}, "synthesizer": "a", "rounds": [["a", "c"]]}, [2], "names 'c'"),
        ({"models": {"a": 1, "b": 1}, "synthesizer": "a", "rounds": [["a", "b"]]}, [4], "maps 2 slots"),
        ({"models": {"a": 1}, "rounds": [None, None]}, [4], "assigns 2 rounds"),
        ({"models": {"a": 0, "b": 0}, "synthesizer": "a"}, [4], "weight 0"),
        ({"models": {}}, [4], "at least one model"),
        ({"models": {"a": {"weight": 1, "key": "x"}}}, [4], "Extra inputs are not permitted"),
    ],
)
def test_a_panel_that_cannot_run_is_refused_with_what_to_change(fields, rounds, said):
    with pytest.raises(ValidationError, match=said):
        PaCoReConfig(rounds=rounds, panel=fields)


def test_compat_reference_has_no_panel():
    with pytest.raises(ValidationError, match="no panel"):
        PaCoReConfig(compat="reference", panel={"models": {"a": 1}})
