"""``pacore mcp``: PaCoRe as a Model Context Protocol server, for agents outside LangChain (Claude Desktop, IDE
agents, other frameworks), on the official ``mcp`` SDK's low-level server, over stdio or streamable HTTP.

- One tool, ``pacore_solve`` (:mod:`.arguments`): question and context, a preset or rounds, and ``max_tokens``,
  the call's budget of effective TTC. The model, the upstream and the limits are the server's own options
  (:mod:`.limits`), never the caller's. Bad arguments are refused in one line before anything is sent.
- Each finished round is an MCP progress notification (when the client sent a progress token); a client's
  cancellation (``notifications/cancelled``, or on the 2026 HTTP wire a closed response stream) cancels the run,
  whose upstream requests are closed (:mod:`.solve`).
- Errors are tool results with ``isError`` and one line of text; the whole story goes to the server's log.
- HTTP needs a bearer token and binds loopback unless told otherwise (:mod:`.http`).
"""
