"""A panel of servers, as ``pacore solve --panel FILE`` and ``pacore serve --panel FILE`` read it.

The file is JSON: the panel (:class:`~pacore_graph.panel.Panel`: weights, slot maps per round, the synthesiser,
the seed) where each model also says where it is served::

    {
      "models": {
        "small":  {"base_url": "http://127.0.0.1:8080/v1", "weight": 3},
        "strong": {"base_url": "https://api.example.com/v1", "model": "big-model",
                   "api_key_env": "STRONG_API_KEY", "weight": 1, "max_concurrency": 8}
      },
      "synthesizer": "strong"
    }

``base_url`` left out: the embedded SmolLM2 server (started once for the whole panel); ``model`` left out: the
server's first listed model. A key is never in the file nor on the command line: ``api_key_env`` names the
environment variable that holds it (default ``OPENAI_API_KEY``, as for one model).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pacore_graph.errors import UsageError
from pacore_graph.panel import Panel, PanelMember, RoundSlots


class PanelServer(PanelMember):
    """One model of a panel file: where it is served, plus its :class:`PanelMember` settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str | None = Field(None, description="its OpenAI-compatible server (default: the embedded model)")
    model: str | None = Field(None, description="the model name on that server (default: its first listed)")
    api_key_env: str | None = Field(
        None, description="the environment variable holding its key (default: OPENAI_API_KEY)"
    )

    @field_validator("api_key_env")
    @classmethod
    def _variable_name(cls, name: str | None) -> str | None:
        if name is not None and not name.replace("_", "").isalnum():
            raise ValueError(f"api_key_env names an environment variable, not {name[:40]!r}")
        return name


class PanelFile(BaseModel):
    """A ``--panel`` file: the panel and the servers of its models."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    models: dict[str, PanelServer]
    rounds: list[RoundSlots | None] = Field(default_factory=list)
    synthesizer: str | None = None
    seed: int | None = None

    def panel(self) -> Panel:
        """The panel a config holds (names and slots only: no URL, no key)."""
        members = {
            name: PanelMember(**server.model_dump(include=set(PanelMember.model_fields)))
            for name, server in self.models.items()
        }
        return Panel(models=members, rounds=self.rounds, synthesizer=self.synthesizer, seed=self.seed)

    def servers(self) -> dict[str, dict[str, Any]]:
        """Where each model is served, as a run folder's settings record it (never a key: its variable's name)."""
        return {
            name: server.model_dump(include={"base_url", "model", "api_key_env"}, exclude_none=True)
            for name, server in self.models.items()
        }

    def key(self, name: str) -> str | None:
        """Model ``name``'s API key, read from its environment variable; an empty one is refused."""
        variable = self.models[name].api_key_env or "OPENAI_API_KEY"
        value = os.environ.get(variable)
        if value is not None and not value.strip():
            raise UsageError(f"panel model {name!r}: ${variable} is empty: set the key, or unset it")
        if value is None and self.models[name].api_key_env is not None:
            raise UsageError(f"panel model {name!r}: ${variable} is not set (api_key_env names it)")
        return value


def read_panel_file(path: str) -> PanelFile:
    """A ``--panel`` file, checked whole (a key in it is refused: keys come from the environment)."""
    from pacore_graph.inputs import read_json_file

    where = f"--panel {path}"
    data = read_json_file(path, where)
    if isinstance(data, dict) and isinstance(data.get("models"), dict):
        for name, server in data["models"].items():
            if isinstance(server, dict) and ("api_key" in server or "key" in server):
                raise UsageError(
                    f"{where}: model {name!r} holds a key; keys are never written in a file: put it in an "
                    'environment variable and name it ("api_key_env": "MY_KEY")'
                )
    try:
        found = PanelFile.model_validate(data)
        found.panel()  # the panel's own checks (synthesiser, names, weights)
    except ValidationError as exc:
        error = exc.errors()[0]
        place = ".".join(map(str, error["loc"]))
        raise UsageError(f"{where}: {place + ': ' if place else ''}{error['msg']}") from None
    return found


@contextlib.contextmanager
def serving_panel(panel_file: PanelFile, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Each model's chat client, for the duration of a block: every server is asked first (reachable, the
    model served); the embedded server is started once when a model has no ``base_url``."""
    from pacore_graph.models import EmbeddedServer, chat_model
    from pacore_graph.models.preflight import check_server

    keys = {name: panel_file.key(name) for name in panel_file.models}  # a missing key: before any server starts
    with contextlib.ExitStack() as stack:
        embedded = None
        if any(server.base_url is None for server in panel_file.models.values()):
            embedded = stack.enter_context(EmbeddedServer())
        models = {}
        for name, server in panel_file.models.items():
            url = server.base_url or (embedded.base_url if embedded else None)
            model = server.model or (embedded.model if embedded and server.base_url is None else None)
            models[name] = chat_model(url, model, keys[name], **kwargs)
            check_server(models[name])
        yield models
