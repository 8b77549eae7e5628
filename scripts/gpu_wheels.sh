#!/usr/bin/env bash
# The wheels scripts/gpu_check.sh carries to the GPU image (which has torch, transformers, peft, pytest and numpy,
# not the rest of what the check imports): the pins of tests/gpu_image.py WHEELS, for Python 3.12 on x86-64 Linux,
# into .whl/ (git-ignored; the device tool's `carry`). Ray cannot travel (over 100 MB): tests/gpu_image.py stands in
# for its import. Refuses a bundle over 20 MB, since the whole travelling tree is capped at 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
rm -rf .whl && mkdir -p .whl
mapfile -t PKGS < <("$PY" tests/gpu_image.py --wheels)
for p in "${PKGS[@]}"; do
  if [[ $p == antlr4-python3-runtime==* ]]; then  # an sdist only (hydra's pin; math-verify's LaTeX parser): build it
    "$PY" -m pip wheel -q --no-deps -w .whl "$p"
    continue
  fi
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d .whl "$p"
done
bytes=$(du -cb .whl/*.whl | tail -1 | cut -f1)
echo "gpu_wheels: $(ls .whl/*.whl | wc -l) wheels, $((bytes / 1024)) KiB in .whl/"
if (( bytes > 20 * 1024 * 1024 )); then
  echo "gpu_wheels: the bundle is over 20 MB; drop what the check does not import"; exit 1
fi
