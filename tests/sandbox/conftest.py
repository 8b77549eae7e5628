"""Fixtures for the sandbox tests: one real sandbox per backend, and leak counters.

Docker tests run whenever an engine is reachable (the image is built if missing). They
are skipped only when no engine is reachable and CI is unset; under CI a missing engine
is a failure.
"""

from __future__ import annotations

import glob
import os

import pytest

from tests.requirements import need
from toolgym.sandbox import Limits, open_sandbox, tenancy

BACKENDS = ("local", "docker")
SB_BACKENDS = BACKENDS
LIMITS = Limits(timeout_s=3, memory_mb=256, pids=64, output_bytes=64 << 10)


def docker_ready() -> str | None:
    """None when docker tests can run; else why not. Builds the image when it is missing."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:  # noqa: BLE001
        return f"no Docker engine reachable: {type(exc).__name__}"
    from toolgym.sandbox.image import build_image, image_exists

    if not image_exists(client):
        build_image(log=lambda m: None)
    return None


def require_backend(backend: str) -> None:
    if backend != "docker":
        return
    why = docker_ready()
    if why is None:
        return
    need(False, f"docker tests cannot run: {why}")


# ------------------------------------------------------------------ leak counters
def descendants(pid: int | None = None) -> list[int]:
    """Live processes below `pid` (default: this test process), zombies excluded."""
    root = pid or os.getpid()
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def our_containers() -> list[str]:
    try:
        import docker

        client = docker.from_env(timeout=10)
        found = client.containers.list(all=True, filters={"label": f"toolgym.pid={os.getpid()}"}, ignore_removed=True)
        client.close()
        return [c.id for c in found]
    except Exception:  # noqa: BLE001 - no engine: nothing of ours there
        return []


def our_cgroups() -> list[str]:
    pid = os.getpid()
    return glob.glob(f"/sys/fs/cgroup/*/toolgym/{pid}-*") + glob.glob(f"/sys/fs/cgroup/toolgym/{pid}-*")


def toolgym_tmp() -> list[str]:
    return glob.glob("/tmp/toolgym-sbx*") + glob.glob("/tmp/toolgym-call*")


def leak_snapshot() -> dict[str, int]:
    return {"containers": len(our_containers()), "cgroups": len(our_cgroups()),
            "processes": len(descendants()), "tmp": len(toolgym_tmp())}


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request) -> str:
    require_backend(request.param)
    return request.param


def under_gvisor(sb) -> bool:
    """Whether `sb` runs its programs under gVisor's runsc (TOOLGYM_SANDBOX_RUNTIME=runsc): a kernel of the
    sandbox's own, where a few things a test reads on Linux do not exist (said where a test asks)."""
    return str(getattr(sb.backend_impl, "runtime", None) or "").startswith("runsc")


def open_for(backend: str, limits: Limits = LIMITS, pool_size: int = 1):
    """open_sandbox for one backend of SB_BACKENDS."""
    return open_sandbox(backend, limits, pool_size=pool_size)


def backends(*, slow_on: tuple[str, ...]) -> pytest.MarkDecorator:
    """Run a test on `sb` of every backend, its cases on the backends in `slow_on` in the slow tier (they take
    over a second there): put it right above the test, below any other parametrize."""
    return pytest.mark.parametrize(
        "sb", [pytest.param(b, marks=pytest.mark.slow) if b in slow_on else b for b in SB_BACKENDS], indirect=True)


@pytest.fixture(scope="module", params=SB_BACKENDS)
def sb(request):
    """A one-worker sandbox, so consecutive calls land in the same sandbox."""
    require_backend(request.param)
    box = open_for(request.param)
    box.wait_ready(120)
    yield box
    box.close()


@pytest.fixture(autouse=True)
def one_tenant():
    """Every call of a sandbox test is one tenant's (toolgym.sandbox.tenancy), so that jobs with the same
    tests share calls and sandboxes as they would without the tenancy rule: these tests are about what
    holds between batch-mates and between calls, under the rule. test_attack_shared_counters.py and
    test_tenancy_pool.py open episodes of their own to test the rule itself."""
    with tenancy.episode("sandbox tests", tenant="sandbox tests"):
        yield
