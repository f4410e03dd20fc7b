#!/usr/bin/env bash
# An MCP client venv for the test that loads `pacore mcp`'s tool into a LangChain agent with langchain-mcp-adapters.
#
#   scripts/mcp-client-setup.sh    # idempotent: a second run reuses the venv and takes a second
#
# Why a venv of its own: langchain-mcp-adapters 0.3.x requires mcp<2, and pacore mcp (the mcp extra) and litellm[mcp]
# (the agents extra) require mcp>=2.3, so pip cannot put them in one venv. An agent loads MCP tools from a server it
# runs as another process anyway, and mcp 1.x clients speak the handshake protocol pacore mcp also serves.
# It lives outside the clone, under $PACORE_MCP_CLIENT_HOME (default ~/.cache/pacore-graph/mcp-client); the last
# line of stdout is its python. About 20 s the first time (wheels from the pip cache or PyPI).
set -euo pipefail

HOME_DIR="${PACORE_MCP_CLIENT_HOME:-$HOME/.cache/pacore-graph/mcp-client}"
VENV="$HOME_DIR/venv"
HERE="$(cd "$(dirname "$0")" && pwd)"
STAMP="$VENV/.pacore-installed"

log() { echo "[mcp-client-setup] $*" >&2; }

mkdir -p "$HOME_DIR"
PINS="$(mktemp)"
trap 'rm -f "$PINS"' EXIT
# the client's own pins, then the project's for everything else (its mcp pins left out)
{ cat "$HERE/mcp-client-constraints.txt"; grep -v -E '^(mcp|mcp-types)==' "$HERE/../constraints.txt"; } > "$PINS"

if [ ! -f "$STAMP" ] || ! cmp -s "$PINS" "$STAMP"; then
  log "installing langchain-mcp-adapters and langchain into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -c "$PINS" --upgrade pip 2>&1 | grep -v "is ignored" >&2 || true
  "$VENV/bin/pip" install -q -c "$PINS" langchain-mcp-adapters langchain 2>&1 | grep -v "is ignored" >&2 || true
  "$VENV/bin/python" -c "import langchain_mcp_adapters.client, langchain.agents" \
    || { log "error: pip could not install langchain-mcp-adapters into $VENV (see the lines above)"; exit 1; }
  cp "$PINS" "$STAMP"
else
  log "langchain-mcp-adapters already installed in $VENV"
fi
echo "$VENV/bin/python"
