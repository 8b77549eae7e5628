"""The containers of the docker backend are locked down as documented (read back from
the engine, not from our own settings)."""

from __future__ import annotations

import os

import pytest

from tests.sandbox.conftest import require_backend
from toolgym.sandbox import Limits, open_sandbox

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def container_attrs():
    require_backend("docker")
    with open_sandbox("docker", Limits(timeout_s=5, memory_mb=300, pids=40), pool_size=1) as sb:
        sb.wait_ready(120)
        worker = sb._pool._idle[0]
        worker.container.reload()
        probe = sb.run("import os, resource\nprint(os.getuid(), os.getgid())\n"
                       "print(*resource.getrlimit(resource.RLIMIT_NPROC))").stdout.splitlines()
        yield worker.container.attrs, probe[0] + "\n", probe[1]


def test_container_is_locked_down(container_attrs):
    attrs, ids, nproc = container_attrs
    host, cfg = attrs["HostConfig"], attrs["Config"]
    assert host["NetworkMode"] == "none"
    # the executor (the container's root) keeps what it needs to hand out uids; code runs as 65534
    assert host["CapDrop"] == ["ALL"]
    assert sorted(c.removeprefix("CAP_") for c in host["CapAdd"]) == \
        ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"]
    assert host["LogConfig"]["Type"] == "none"  # responses carry hidden expected outputs
    assert host["IpcMode"] == "none"
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["ReadonlyRootfs"] is True
    assert not host.get("Privileged")
    assert not host.get("Binds") and not attrs.get("Mounts")
    assert set(host["Tmpfs"]) == {"/work", "/tmp"} and all("size=" in v for v in host["Tmpfs"].values())
    assert host["Memory"] > 300 << 20 and host["MemorySwap"] == host["Memory"]
    # a call's processes are bounded near the 40 asked for (+ the executor's own): on runc by the container's
    # pids cgroup; under gVisor that cgroup holds gVisor itself too (its threads and stubs), so it is set far
    # higher and the bound is the call's RLIMIT_NPROC, which gVisor's kernel applies (read inside the call)
    assert host["PidsLimit"]
    if host.get("Runtime", "runc").startswith("runsc"):
        assert 40 <= int(nproc.split()[0]) < 64 and nproc.split()[0] == nproc.split()[1], nproc
    else:
        assert host["PidsLimit"] < 64
    assert host["NanoCpus"] > 0
    # each sandbox runs its programs under uids of its own (sandbox.uids: far above any login uid)
    base = int(next(e.split("=", 1)[1] for e in cfg["Env"] if e.startswith("TG_UID_BASE=")))
    assert cfg["User"] == "0:0" and base >= 1 << 24 and ids == f"{base + 3} {base + 3}\n"
    assert cfg["Labels"]["toolgym.sandbox"] == "1" and cfg["Labels"]["toolgym.pid"] == str(os.getpid())
