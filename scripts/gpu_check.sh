#!/usr/bin/env bash
# The GPU check: one prepared run, at most 8 minutes on one H100/H200-class GPU with torch, transformers and peft.
#   bash scripts/gpu_check.sh          # OUT=folder keeps the logs and gpu_check.json (default: gpu_check_out)
# What it runs (no network: the model is the local Qwen2.5-Coder-0.5B-Instruct asset or a model of its shape that
# scripts/gpu_check.py builds with random weights; tasks are generated):
#   1. the device_standin tests on real CUDA (their `device` fixture yields "cuda" there);
#   2. 5 CTPO and 2 MOPD steps in bf16, full fine-tune and LoRA, with the hf sampler: tokens/s, peak memory, losses;
#      one micro-batch's loss on CUDA (fp32, bf16) against the CPU's; 2 steps of ToolgymGRPOTrainer; the verl loss
#      call on CUDA against the CPU; where vLLM is installed, 2 CTPO steps with vLLM rollouts (else it says so).
# toolgym's own dependencies that such an image lacks (gymnasium, math-verify, trl, verl, ...) travel as wheels in
# .whl/ (scripts/gpu_wheels.sh fetches them where PyPI is reachable) and install into /tmp/site.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUT:-gpu_check_out}
mkdir -p "$OUTDIR"
PY=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -c "import torch, transformers, peft; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| transformers', transformers.__version__, '| peft', peft.__version__)"
"$PY" -c "import vllm" 2>/dev/null || echo "gpu_check: vLLM is not installed here: its part is skipped"
echo "== pytest -m device_standin on CUDA"
timeout 200 "$PY" -m pytest -q -m device_standin -p no:cacheprovider -o addopts="--import-mode=importlib" tests 2>&1 \
  | tee "$OUTDIR/device_standin.log" | tail -25
echo "== scripts/gpu_check.py"
timeout 330 "$PY" scripts/gpu_check.py --out "$OUTDIR/gpu_check.json" "$@" 2>&1 | tee "$OUTDIR/gpu_check.log"
