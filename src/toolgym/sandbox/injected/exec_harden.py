"""The executor's hardening: every step that keeps sandboxed code in its place, checked at start-up. Stdlib
only. Each step fails closed: the reason it did not hold makes the sandbox refuse every request."""

import os

import exec_state as state
from common import (
    PR_GET_DUMPABLE,
    PR_GET_NO_NEW_PRIVS,
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    PR_SET_NO_NEW_PRIVS,
    RUN_UID,
    gvisor_filter,
    prctl,
)

# CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_KILL, CAP_SETGID, CAP_SETUID
CAPS = (1 << 0) | (1 << 1) | (1 << 3) | (1 << 5) | (1 << 6) | (1 << 7)


def _status_fields():
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, val = line.partition(":")
            out[key] = val.strip()
    return out


def harden():
    """Every step that keeps sandboxed code in its place; None when all hold, else why not."""
    try:
        if os.getuid() != 0:
            return ("the executor must start as the sandbox's root (it runs code as uid "
                    f"{RUN_UID}); it runs as uid {os.getuid()}")
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        prctl(PR_SET_DUMPABLE, 0)  # /proc/1/{mem,fd,environ} stay closed to everything else
        if prctl(PR_GET_DUMPABLE, 0) != 0:
            return "the executor is still dumpable after PR_SET_DUMPABLE 0"
        try:
            prctl(PR_SET_CHILD_SUBREAPER, 1)  # calls' processes are ours even when not PID 1
        except OSError:
            if os.getpid() != 1:
                raise
            state.ORPHANS[0] = True  # gVisor: no subreapers, so a judge harness's orphans come to us
        if prctl(PR_GET_NO_NEW_PRIVS, 0) != 1:  # asked of the kernel: gVisor's /proc has no NoNewPrivs line
            return "no_new_privs is not set"
        st = _status_fields()
        if st.get("Seccomp") != "2":
            return (f"no seccomp filter is active (Seccomp: {st.get('Seccomp')}); "
                    "run the sandbox with its seccomp profile")
        eff = int(st.get("CapEff", "0"), 16)
        if eff != CAPS:
            return (f"unexpected capabilities {eff:#x} (need exactly {CAPS:#x}: "
                    "SETUID, SETGID, KILL, CHOWN, DAC_OVERRIDE, FOWNER)")
    except (OSError, ValueError) as exc:
        return f"hardening failed: {exc}"
    return None


def bound(nproc, gvisor_rules):
    """Where the sandbox's kernel is gVisor's (the host says so: --nproc, --gvisor-filter): every call's uid
    may have at most `nproc` processes (the container's pids cgroup holds gVisor itself too, and a program
    that filled it took the whole sandbox down), mq_open is refused and clone3 is ENOSYS (gvisor_filter).
    None, else why not."""
    try:
        if nproc is not None:
            state.NPROC[0] = int(nproc)  # every call's processes (exec_child._set_rlimits), not the executor's own threads
        if gvisor_rules:
            gvisor_filter()
            state.ORPHANS[0] = True  # gVisor lets only PID 1 be a subreaper: a judge harness's orphans come to us
    except (OSError, ValueError, KeyError) as exc:
        return f"the process bound or the gVisor filter did not hold: {exc!r}"
    return None


def own_workroot():
    """The work root belongs to root and no untrusted uid may write there (mode 0755): a call writes only
    in its own dir below it, which goes with the call, so nothing a job leaves at the top reaches the next
    one. None when that holds, else why not (the sandbox then refuses to serve)."""
    try:
        os.makedirs(state.WORKROOT, exist_ok=True)
        os.chown(state.WORKROOT, 0, 0)
        os.chmod(state.WORKROOT, 0o755)
        st = os.stat(state.WORKROOT)
    except OSError as exc:
        return f"the work root {state.WORKROOT} cannot be made root's own: {exc}"
    if st.st_uid != 0 or st.st_mode & 0o7777 != 0o755:
        return f"the work root {state.WORKROOT} stays writable by others (mode {st.st_mode & 0o7777:o})"
    return None
