#!/usr/bin/env bash
# Wheels for scripts/gpu_check.sh on a GPU image that has torch, transformers, peft, pytest and numpy but not the rest
# of what toolgym's GPU path imports. Run here (PyPI reachable); the wheels land in .whl/ (git-ignored) and travel
# with the tree. Python 3.12, x86-64 Linux; versions are the ones this repository's CI installs.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
PKGS=(gymnasium==1.4.0 farama-notifications==0.0.6 math-verify==0.9.0 latex2sympy2_extended==1.11.0
      jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0
      rpds-py==2026.9.1 docker==7.2.0 pytest-asyncio==1.5.0 trl==1.16.0 datasets==5.2.0 dill==0.4.1
      multiprocess==0.70.19 verl==0.9.1 tensordict==0.10.0 pyvers==0.1.0 orjson==3.13.0 importlib_metadata==10.2.0
      hydra-core==1.3.8 omegaconf==2.3.1 codetiming==1.4.0)
PY=${PYTHON:-python3}
for p in "${PKGS[@]}"; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d .whl "$p" 2>&1 | grep -v "is ignored: it is neither" || true
done
# antlr4's runtime (hydra's pin, whose grammar math-verify's LaTeX parser also reads) is an sdist only: build it here
"$PY" -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3 2>&1 | grep -v "is ignored: it is neither" || true
du -sh .whl
