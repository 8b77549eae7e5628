#!/usr/bin/env bash
# The device check in one call: a verdict within --budget seconds (default 420) on one GPU with the 'cuda' image
# (torch, transformers, peft; the rest travels as wheels built by scripts/gpu_wheels.sh, carried as .whl).
#   bash scripts/gpu_check.sh [--budget S] [gpu_check.py options]   # OUT=folder for the report (default gpu_check_out)
# From a session, with the device tool (about 8 minutes in all, a machine start not counted):
#   run(command="bash scripts/gpu_check.sh", carry=[".whl"], timeout_s=480)
# What it checks and what it cannot: docs/training/gpu.md. Exit status: 0 pass, 1 a part failed, 2 the probe failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUT:-gpu_check_out}
mkdir -p "$OUTDIR"
PY=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "gpu_check: the carried wheels did not install (see above)"; exit 2; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" scripts/gpu_check.py --out "$OUTDIR" "$@" 2>&1 | tee "$OUTDIR/gpu_check.log"
