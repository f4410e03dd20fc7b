#!/usr/bin/env bash
# Debian's PostgreSQL server, for the tests on LangGraph's production saver (tests/postgres/).
#
#   scripts/postgres-setup.sh      # idempotent: when the server is installed it only prints where
#
# Installs Debian's `postgresql` package when no server binaries are found (apt, about a minute; needs root or
# sudo). Nothing is started here and no cluster is made: each test session makes a throwaway cluster in a
# temporary folder, starts it on a free port and stops it at the end (tests/postgres/conftest.py). The last line
# of stdout is the folder of the server's binaries (initdb, pg_ctl).
set -euo pipefail

log() { echo "[postgres-setup] $*" >&2; }
die() { echo "[postgres-setup] error: $*; run the rest of the tests with: make test PG=off" >&2; exit 1; }

server_bin() {
  # the newest major version Debian installed (/usr/lib/postgresql/15/bin on bookworm)
  local dir
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ]; then
      echo "$dir"
      return 0
    fi
  done
  return 1
}

if ! BIN="$(server_bin)"; then
  command -v apt-get >/dev/null 2>&1 || die "no PostgreSQL server found and no apt-get to install Debian's"
  SUDO=""
  if [ "$(id -u)" != "0" ]; then
    command -v sudo >/dev/null 2>&1 || die "installing Debian's postgresql needs root (or sudo)"
    SUDO="sudo"
  fi
  log "installing Debian's postgresql (about a minute)"
  # no system cluster: the tests make their own and nothing should be left running after them
  $SUDO mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" | $SUDO tee /etc/postgresql-common/createcluster.d/pacore-graph.conf >/dev/null
  apt_install() {
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  }
  # apt-get update only when needed: a fresh machine has no package lists (no candidate for postgresql), and
  # stale lists fail the download; then update and try once more
  candidate="$(apt-cache policy postgresql 2>/dev/null | sed -n 's/^ *Candidate: *//p')"
  if [ -z "$candidate" ] || [ "$candidate" = "(none)" ] || ! apt_install; then
    log "apt-get update"
    $SUDO apt-get update -qq || die "apt-get update failed"
    apt_install || die "apt-get install postgresql failed"
  fi
  BIN="$(server_bin)" || die "postgresql installed, but no initdb/pg_ctl/postgres under /usr/lib/postgresql"
fi
echo "$BIN"
