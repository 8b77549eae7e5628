"""The executor's state, shared by its modules (executor.py and the exec_*.py it imports). Stdlib only.

What main() sets once (the work root, whether /tmp is wiped, why the sandbox refuses to serve), and what
the executor holds between requests: the call template, the standing cleaners, the live session."""

WORKROOT = "/work"
WIPE_TMP = False
REFUSED = None  # why this sandbox refuses to run anything (a hardening step failed)
TEMPLATE = None  # the call template: a forkserver.ForkServer
SESSION = None  # dict(pid, pidfd, start, ctl, out, err, lim) of the live session interpreter
CLEANERS = {}  # untrusted uid -> its standing cleaner.Cleaner
SEQ = [0]  # calls so far: each gets its own dir
BASE_TASKS = [None]  # tasks in the sandbox's pids cgroup when no call runs
ORPHANS = [False]  # whether orphans of a call come to us during it (no subreaper below us): reaped as it runs
NPROC = [None]  # RLIMIT_NPROC of every call, where the host asks for one (--nproc: gVisor)
GUARD = [None]  # the memory guard, where the sandbox's kernel is gVisor's (memguard.py)
