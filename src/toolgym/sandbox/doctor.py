"""Which backend `auto` picks, and why (used by `toolgym doctor` and `toolgym sandbox doctor`)."""

from __future__ import annotations

import os
from typing import Any


def docker_status() -> dict[str, Any]:
    from toolgym.sandbox.image import image_name

    out: dict[str, Any] = {"engine": False, "image": image_name(), "image_present": False, "error": None}
    try:
        import docker

        client = docker.from_env(timeout=5)
        out["version"] = client.version().get("Version")
        out["engine"] = True
        from toolgym.sandbox.image import image_exists

        out["image_present"] = image_exists(client, out["image"])
        client.close()
    except Exception as exc:  # noqa: BLE001 - any failure means "not usable"
        out["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return out


def local_status() -> dict[str, Any]:
    from toolgym.sandbox import cgroups
    from toolgym.sandbox.local_backend import probe

    p = probe()
    ctl = cgroups.controllers()
    return {"available": p["tool"] is not None, "tool": p["tool"], "why": p["why"],
            "root": os.geteuid() == 0, "uid_drop": os.geteuid() == 0,
            "cgroups": {k: (str(v) if v else None) for k, v in ctl.items()},
            "isolation": "weaker than docker: shared host kernel; seccomp filter, allowlisted read-only "
                         "mounts (/usr, /etc, the interpreter), root-only with a cgroup, untrusted code under uids of each sandbox's own"}


def pick_backend() -> dict[str, Any]:
    """{'backend': 'docker'|'local', 'reason': str}; raises SandboxUnavailable if neither works."""
    from toolgym.errors import SandboxUnavailable

    forced = os.environ.get("TOOLGYM_SANDBOX_BACKEND")
    if forced in ("docker", "local"):
        return {"backend": forced, "reason": "TOOLGYM_SANDBOX_BACKEND is set"}
    d = docker_status()
    if d["engine"] and d["image_present"]:
        return {"backend": "docker", "reason": f"Docker engine {d.get('version')} and image {d['image']} present"}
    why = (f"image {d['image']} missing (run `toolgym sandbox build-image`)" if d["engine"]
           else f"no Docker engine ({d['error']})")
    loc = local_status()
    if loc["available"]:
        return {"backend": "local", "reason": f"{why}; local sandbox via {loc['tool']}"}
    raise SandboxUnavailable(f"no sandbox backend: {why}; {loc['why']}")


def doctor_report() -> dict[str, Any]:
    """Everything about sandbox readiness in one JSON-serializable dict."""
    from toolgym.errors import SandboxUnavailable

    report: dict[str, Any] = {"docker": docker_status(), "local": local_status()}
    try:
        report.update(auto=None, reason=None)
        pick = pick_backend()
        report["auto"], report["reason"] = pick["backend"], pick["reason"]
    except SandboxUnavailable as exc:
        report["reason"] = str(exc)
    return report
