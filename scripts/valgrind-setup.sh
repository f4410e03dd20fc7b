#!/usr/bin/env bash
# valgrind, for `pacore bench instructions` (instructions per trajectory under cachegrind) and its test.
#
#   scripts/valgrind-setup.sh      # idempotent: when valgrind is installed it only prints where
#
# Installs Debian's `valgrind` package when none is found (apt, under a minute; needs root or sudo). The last line
# of stdout is valgrind's path.
set -euo pipefail

log() { echo "[valgrind-setup] $*" >&2; }
die() { echo "[valgrind-setup] error: $*; run the rest of the tests with: pytest -m 'not valgrind'" >&2; exit 1; }

if ! command -v valgrind >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || die "no valgrind found and no apt-get to install Debian's"
  SUDO=""
  if [ "$(id -u)" != "0" ]; then
    command -v sudo >/dev/null 2>&1 || die "installing Debian's valgrind needs root (or sudo)"
    SUDO="sudo"
  fi
  log "installing Debian's valgrind"
  apt_install() {
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends valgrind >/dev/null
  }
  # apt-get update only when needed: a fresh machine has no package lists, and stale lists fail the download
  if ! apt_install; then
    log "apt-get update"
    $SUDO apt-get update -qq || die "apt-get update failed"
    apt_install || die "apt-get install valgrind failed"
  fi
fi
command -v valgrind
