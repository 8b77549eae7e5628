"""Per-sandbox cgroups (v1 memory+pids controllers, or v2) for the local backend.

Named toolgym/<owner pid>-<n>, so the cgroups of a crashed run can be found and
removed at the next start-up. The local backend requires both a memory and a pids limit
(`SandboxCgroup.missing`, `check`): it refuses to start without them.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path

ROOT = Path(os.environ.get("TOOLGYM_CGROUP_ROOT", "/sys/fs/cgroup"))
PREFIX = "toolgym"
_SEQ = itertools.count(1)


def _v2() -> bool:
    return (ROOT / "cgroup.controllers").exists()


def controllers() -> dict[str, Path | None]:
    """Parent dirs we may create sandbox cgroups in, per controller (None: unavailable)."""
    out: dict[str, Path | None] = {"memory": None, "pids": None, "cpu": None}
    if os.geteuid() != 0:
        return out
    if _v2():
        try:
            enabled = (ROOT / "cgroup.controllers").read_text().split()
        except OSError:
            return out
        for c in out:
            if c in enabled:
                out[c] = ROOT / PREFIX
        return out
    for c in out:
        base = ROOT / c
        if not (base / "cgroup.procs").exists():
            base = next((p for p in ROOT.glob(f"*{c}*") if (p / "cgroup.procs").exists()
                         and c in p.name.split(",")), base)  # e.g. cpu,cpuacct
        if (base / "cgroup.procs").exists() and os.access(base, os.W_OK):
            out[c] = base / PREFIX
    return out


def _weigh_parent(parent: Path, v2: bool) -> None:
    """All sandboxes together weigh as much as `cores` ordinary processes (the default parent
    weight, one process's, would starve them, executors included, on a busy host)."""
    cores = os.cpu_count() or 1
    try:
        if v2:
            (parent / "cpu.weight").write_text(str(min(10000, 100 * cores)))
        else:
            (parent / "cpu.shares").write_text(str(1024 * cores))
    except OSError:
        pass


class SandboxCgroup:
    """Memory and pids limits for one local sandbox; `kill` and `remove` clean it up."""

    def __init__(self, memory_bytes: int, pids: int, cpus: float = 1.0):
        self.name = f"{os.getpid()}-{next(_SEQ)}"
        self.dirs: dict[str, Path] = {}
        v2 = _v2()
        for ctl, parent in controllers().items():
            if parent is None:
                continue
            if v2 and self.dirs:
                continue  # one unified dir
            try:
                parent.mkdir(exist_ok=True)
                if ctl == "cpu":
                    _weigh_parent(parent, v2)
                if v2:
                    try:
                        (parent / "cgroup.subtree_control").write_text("+memory +pids +cpu")
                    except OSError:
                        pass
                d = parent / self.name
                d.mkdir()
                self.dirs[ctl] = d
            except OSError:
                continue
        self._set_limits(memory_bytes, pids, v2)
        self._set_cpu(cpus, v2)

    def _set_cpu(self, cpus: float, v2: bool) -> None:
        """A CPU quota (like docker's --cpus), so one sandbox cannot take the whole machine."""
        period = 100_000
        quota = str(max(1000, int(cpus * period)))
        if v2:
            self.cpu = self._write("memory", "cpu.max", f"{quota} {period}")
        else:
            self.cpu = self._write("cpu", "cpu.cfs_period_us", str(period)) and \
                self._write("cpu", "cpu.cfs_quota_us", quota)

    def _write(self, ctl: str, name: str, value: str) -> bool:
        d = self.dirs.get(ctl) or (next(iter(self.dirs.values())) if self.dirs and _v2() else None)
        if d is None:
            return False
        try:
            (d / name).write_text(value)
            return True
        except OSError:
            return False

    def _set_limits(self, memory_bytes: int, pids: int, v2: bool) -> None:
        if v2:
            self.memory = self._write("memory", "memory.max", str(memory_bytes))
            self._write("memory", "memory.swap.max", "0")
            self.pids = self._write("memory", "pids.max", str(pids))
            return
        self.memory = self._write("memory", "memory.limit_in_bytes", str(memory_bytes))
        self._write("memory", "memory.memsw.limit_in_bytes", str(memory_bytes))
        self.pids = self._write("pids", "pids.max", str(pids))

    def missing(self) -> str | None:
        """None when the memory and the pids limit are both in place; else one actionable line."""
        lacking = [n for n, ok in (("memory", self.memory), ("pids", self.pids)) if not ok]
        if not lacking:
            return None
        return (f"cannot set a cgroup {' and '.join(lacking)} limit under {ROOT}/{PREFIX} (the local sandbox "
                "needs both; run as root on a host with the memory and pids controllers enabled) "
                "or use backend='docker'")

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    @property
    def oom_file(self) -> str | None:
        d = self.dirs.get("memory")
        if d is None:
            return None
        return str(d / ("memory.events" if _v2() else "memory.oom_control"))

    def pids_in(self) -> set[int]:
        out: set[int] = set()
        for f in self.procs_files:
            try:
                out.update(int(x) for x in Path(f).read_text().split())
            except (OSError, ValueError):
                pass
        return out

    def kill(self) -> None:
        for _ in range(100):
            pids = self.pids_in()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)

    def remove(self) -> None:
        self.kill()
        for d in self.dirs.values():
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
        self.dirs = {}


def check(memory_bytes: int = 256 << 20, pids: int = 64) -> str | None:
    """Create (and remove) one sandbox cgroup: None when memory and pids limits work, else why not."""
    cg = SandboxCgroup(memory_bytes, pids)
    try:
        return cg.missing()
    finally:
        cg.remove()


def list_all() -> list[Path]:
    """Every toolgym sandbox cgroup on this machine (any owner)."""
    out: list[Path] = []
    for parent in {p for p in controllers().values() if p is not None}:
        if parent.is_dir():
            out.extend(p for p in parent.iterdir() if p.is_dir())
    return out


def reap_orphans() -> int:
    """Remove sandbox cgroups whose owning process is gone."""
    n = 0
    for d in list_all():
        owner = d.name.split("-", 1)[0]
        if owner.isdigit() and os.path.exists(f"/proc/{owner}"):
            continue
        try:
            pids = [int(x) for x in (d / "cgroup.procs").read_text().split()]
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
            d.rmdir()
            n += 1
        except (OSError, ValueError):
            pass
    return n
