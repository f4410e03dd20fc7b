"""The knobs of one repair episode: limits, output cutting, tool calling, sampling, retries, runtime."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from pacore_graph.extend import RetryPolicy


class RepairSettings(BaseModel):
    """Limits and sampling of one repair episode."""

    step_limit: int = Field(30, ge=1, description="model calls per episode at most")
    command_timeout: float = Field(120.0, gt=0, description="seconds one shell command may run")
    output_head: int = Field(4000, ge=0, description="characters kept from the start of a long output")
    output_tail: int = Field(4000, ge=0, description="characters kept from the end of a long output")
    note_chars: int = Field(2000, ge=0, description="cap on the model's final note")
    tool_calling: Literal["auto", "always", "never"] = Field(
        "auto", description="OpenAI tool calling when the model supports it (auto), or fenced bash blocks only"
    )
    sampling: dict[str, Any] = Field(default_factory=dict, description="temperature, top_p, max_tokens, ...")
    retry: RetryPolicy = Field(default_factory=RetryPolicy, description="retries of transient model errors")
    runtime: Literal["docker", "local", "swerex"] = "docker"
    threads: int = Field(64, ge=1, description="threads for blocking sandbox calls (one per running command)")
