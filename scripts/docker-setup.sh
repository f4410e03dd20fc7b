#!/usr/bin/env bash
# Make a Docker daemon available for the SWE sandboxes and their tests (idempotent; used by CI).
# Installs Debian's docker.io and debootstrap when missing, starts dockerd without networking
# (sandboxes run with network "none"; the base image comes from debootstrap, not from a registry)
# and waits until it answers.
set -euo pipefail

log() { echo "[docker-setup] $*" >&2; }
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

need_pkgs=()
command -v dockerd >/dev/null 2>&1 || need_pkgs+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need_pkgs+=(debootstrap)
if [ "${#need_pkgs[@]}" -gt 0 ]; then
  log "installing ${need_pkgs[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

if docker info >/dev/null 2>&1; then
  log "docker daemon already running"
  exit 0
fi

LOG_FILE="${DOCKERD_LOG:-/tmp/dockerd.log}"
if ! pgrep -x dockerd >/dev/null 2>&1; then
  log "starting dockerd (log: $LOG_FILE)"
  $SUDO nohup dockerd --bridge=none --iptables=false --ip6tables=false >"$LOG_FILE" 2>&1 &
fi

for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    log "docker daemon is up"
    exit 0
  fi
  sleep 1
done
log "dockerd did not come up within 60 s; last log lines:"
tail -n 30 "$LOG_FILE" >&2 || true
exit 1
