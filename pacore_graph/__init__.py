"""PaCoRe (Parallel Coordinated Reasoning) as a composable LangGraph operator."""

from pacore_graph.config import PRESETS, PaCoReConfig, RetryPolicy
from pacore_graph.episode import EpisodeContext
from pacore_graph.errors import ModelRequestError, PaCoReError, RoundFailedError
from pacore_graph.explorer import AgentExplorer, ChatExplorer, Explorer
from pacore_graph.graph import PaCoReState, build_pacore_graph
from pacore_graph.models import chat_model, serving
from pacore_graph.node import PaCoReNode
from pacore_graph.prompt import DEFAULT_TEMPLATE, render_synthesis_prompt, synthesis_messages
from pacore_graph.records import PaCoReResult, RoundRecord, Trajectory, TrajectoryRecord
from pacore_graph.run import PaCoReRunner, asolve, solve
from pacore_graph.run_context import PaCoReContext

__all__ = [
    "DEFAULT_TEMPLATE",
    "PRESETS",
    "AgentExplorer",
    "ChatExplorer",
    "EpisodeContext",
    "Explorer",
    "ModelRequestError",
    "PaCoReConfig",
    "PaCoReContext",
    "PaCoReError",
    "PaCoReNode",
    "PaCoReResult",
    "PaCoReRunner",
    "PaCoReState",
    "RetryPolicy",
    "RoundFailedError",
    "RoundRecord",
    "Trajectory",
    "TrajectoryRecord",
    "asolve",
    "build_pacore_graph",
    "chat_model",
    "render_synthesis_prompt",
    "serving",
    "solve",
    "synthesis_messages",
]
