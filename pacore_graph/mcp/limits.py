"""What the MCP server allows its callers: the server's own options, never a caller's."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from pacore_graph.config import PRESETS


class McpLimits(BaseModel):
    """Bounds on the callers of ``pacore_solve``. Invalid values fail at construction."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_calls: int = Field(4, ge=1, description="pacore_solve calls running at once; one more is refused at once")
    call_tokens: int | None = Field(
        None,
        ge=1,
        description="the largest budget of one call, in effective TTC (completion tokens over every trajectory); a "
        "call's max_tokens may only lower it (None: no limit)",
    )
    max_trajectories: int = Field(
        sum(PRESETS["high"]) + 1,
        ge=1,
        description="model calls of the largest schedule a caller may ask for, sum(K) + 1 (default: the high "
        "preset's 37)",
    )
