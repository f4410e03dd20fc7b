"""PaCoRe behind an OpenAI-compatible endpoint, for clients that are not LangGraph graphs.

``pacore serve --base-url http://localhost:8000/v1 --preset low`` answers ``POST /v1/chat/completions``
by running PaCoRe over the request's messages on that upstream (a vLLM server, or vllm-router in front
of replicas), and ``GET /v1/models`` with the upstream's models plus their schedule aliases. Any OpenAI
client (the openai SDK, LangChain's ChatOpenAI, litellm, mini-swe-agent, ...) gets PaCoRe per model call
by pointing its base URL here. Needs the ``server`` extra (Starlette, uvicorn).

- Schedule per call: model ``pacore-high/NAME``, ``pacore-rounds-32x4/NAME``, or a ``"pacore"`` body field
  (:mod:`.schedule`); sampling and other fields: :mod:`.request`; the reply: :mod:`.replies`;
  ``stream: true``: :mod:`.streaming`.
- One chat model and one concurrency limiter for the upstream, shared by every request (:mod:`.upstream`).
- A client that disconnects cancels its run: its requests upstream are closed (:mod:`.disconnect`).
- ``api_key``: clients must send ``Authorization: Bearer <key>`` (401 otherwise). Loopback by default.
- A bad request gets a 400 in OpenAI's error shape, naming what is wrong, before anything is spent
  (:mod:`.body`, :mod:`.request`, :mod:`.tools`); every other error has that shape too, short and without
  upstream URLs (:mod:`.errors`).
- What one client may hold: body size, request deadline, header/body/keep-alive timeouts, connections
  (:mod:`.limits`, :mod:`.connections`; docs/serving.md lists every default).
"""

from pacore_graph.server.app import create_app
from pacore_graph.server.background import BackgroundServer
from pacore_graph.server.limits import ServerLimits

__all__ = ["BackgroundServer", "ServerLimits", "create_app"]
