"""The sandbox's memory bound where its kernel is gVisor's (runsc). Stdlib only.

Under runc the container's memory cgroup holds the sandbox's processes, and at its limit the kernel's
OOM killer takes one of them (a test's first: oom_score_adj 1000): the program that ran the sandbox out
of memory fails, the count in memory.oom_control says so, and the sandbox is replaced. Under gVisor the
host's cgroup holds gVisor's own kernel, one process: at the limit the host kills it, and the whole
sandbox dies with every batch-mate's call in it. So the host gives the container room beyond the
sandbox's memory for gVisor itself, and this guard, a thread of the executor, does the OOM killer's
work inside: while a call runs it reads how much memory gVisor's kernel holds (/proc/meminfo) every
TICK_S, less what gVisor charges each live process beyond what Linux would (`per_process`: it copies on
write in larger units), and past the sandbox's budget it kills the untrusted process with the largest
resident set and counts the kill in a file of the same form as memory.oom_control, which the executor
and the judge harness read as they read that one.
"""

import os
import signal
import threading
import time

from common import uid_of

TICK_S = 0.005
COUNT_FILE = "/dev/.toolgym-oom"


def used_bytes():
    """Memory gVisor's kernel holds for the sandbox: MemTotal - MemAvailable."""
    fields = {}
    with open("/proc/meminfo") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                fields[key] = int(rest.split()[0]) << 10
    return fields["MemTotal"] - fields["MemAvailable"]


def _rss_pages(pid):
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1])
    except (OSError, IndexError, ValueError):
        return -1


class MemoryGuard:
    def __init__(self, budget, per_process, uids):
        self.budget, self.per_process, self.uids, self.kills = budget, per_process, frozenset(uids), 0
        self.busy = threading.Event()  # set while a call runs: no reads between calls
        self._write()
        threading.Thread(target=self._loop, name="memory guard", daemon=True).start()

    def _write(self):
        tmp = COUNT_FILE + ".new"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"oom_kill {self.kills}\n")
        os.replace(tmp, COUNT_FILE)

    def _over(self):
        used = used_bytes()
        if used <= self.budget:
            return False
        procs = sum(1 for name in os.listdir("/proc") if name.isdigit())
        return used - procs * self.per_process > self.budget

    def _victim(self):
        best, best_rss = None, 0
        for name in os.listdir("/proc"):
            if name.isdigit() and uid_of(int(name)) in self.uids:  # real uids: a cleaner's effective one is a program's
                rss = _rss_pages(int(name))
                if rss > best_rss:
                    best, best_rss = int(name), rss
        return best

    def _loop(self):
        while True:
            self.busy.wait()
            try:
                if self._over():
                    victim = self._victim()
                    if victim is not None:
                        os.kill(victim, signal.SIGKILL)
                        self.kills += 1
                        self._write()
                        deadline = time.monotonic() + 0.2  # its memory goes with it: read again once it has
                        while time.monotonic() < deadline and _rss_pages(victim) > 0:
                            time.sleep(0.001)
                        continue
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(TICK_S)
