#!/usr/bin/env bash
# Set up everything (idempotent) and run the whole test suite: the command .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --vllm
.venv/bin/ruff check src tests benchmarks examples
.venv/bin/lint-imports  # the layering contracts in pyproject.toml ([tool.importlinter])
# CI=true makes tests that need Docker, the model or vLLM fail instead of skip when a part is missing.
export CI=${CI:-true}
.venv/bin/python -m pytest -q -ra --durations=25 "$@"
