#!/usr/bin/env bash
# Chromium, for the viewer's tests in a real browser (tests/viewer/): Playwright from PyPI drives Debian's
# Chromium at /usr/bin/chromium, so no browser is downloaded at run time (`playwright install` is never run).
#
#   scripts/chromium-setup.sh      # idempotent: when Chromium is installed it only prints where
#
# Installs Debian's `chromium` package when none is found (apt, a minute or two; needs root or sudo). The last
# line of stdout is Chromium's path.
set -euo pipefail

log() { echo "[chromium-setup] $*" >&2; }
die() { echo "[chromium-setup] error: $*; run the rest of the tests with: pytest -m 'not browser'" >&2; exit 1; }

CHROMIUM=/usr/bin/chromium
if [ ! -x "$CHROMIUM" ]; then
  command -v apt-get >/dev/null 2>&1 || die "no Chromium at $CHROMIUM and no apt-get to install Debian's"
  SUDO=""
  if [ "$(id -u)" != "0" ]; then
    command -v sudo >/dev/null 2>&1 || die "installing Debian's chromium needs root (or sudo)"
    SUDO="sudo"
  fi
  log "installing Debian's chromium"
  apt_install() {
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
  }
  # apt-get update only when needed: a fresh machine has no package lists, and stale lists fail the download
  if ! apt_install; then
    log "apt-get update"
    $SUDO apt-get update -qq || die "apt-get update failed"
    apt_install || die "apt-get install chromium failed"
  fi
fi
"$CHROMIUM" --version >&2 || die "$CHROMIUM does not start"
echo "$CHROMIUM"
