#!/usr/bin/env bash
# Set everything up (idempotent) and run the main job: the CPU demonstration of tool-use RL.
# A tiny model is warm-started by SFT on Arith-v0 demonstrations (about half use the sandboxed Python
# tool, half answer directly and often wrongly), then trained with CTPO; it ends with held-out reward
# before and after, and a plot. A few minutes on 2 cores once set up (the first setup takes longer).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT=${1:-runs/arith-ctpo}
.venv/bin/toolgym doctor
.venv/bin/toolgym train examples/arith_ctpo.yaml --output-dir "$OUT"
