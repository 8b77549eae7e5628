"""A stateful session: one persistent interpreter per sandbox (a call of kind "session", see
exec_child.py), sent its cells on a control socket, stopped between cells and charged for all the CPU
it uses during one. Stdlib only."""

import os
import signal
import socket
import time

import exec_state as state
import frames
from common import RUN_UID, oom_count, other_pids, pidfd_open, proc_identity, uid_of
from exec_child import call_limits
from exec_clean import check_health, clean_uids, keep_pids, kill_all, remove_dir
from exec_supervise import classify, decode, fork_call, supervise


def _session_start(lim):
    cwd = os.path.join(state.WORKROOT, "session")
    os.makedirs(cwd, 0o700, exist_ok=True)
    os.chown(cwd, RUN_UID, RUN_UID)
    parent, child = socket.socketpair()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        desc = {"kind": "session", "uid": RUN_UID, "cwd": cwd, "lim": dict(lim, cpu_s=1e6)}
        pid = fork_call(desc, [null, out_w, err_w, child.fileno()])
    finally:
        child.close()
        for fd in (null, out_w, err_w):
            os.close(fd)
    parent.setblocking(False)  # written and read only within a cell's deadline (see supervise)
    # the interpreter is the template's child: its pidfd names it alone; where the kernel has no pidfds
    # (gVisor), its pid and start time do (the template may reap it once it ends, and the pid be reused)
    pidfd = pidfd_open(pid)
    start = None
    if pidfd is None:
        try:
            start = proc_identity(pid)[0]
        except OSError:
            pass  # it ended already: nothing is signalled by its pid, and its cell reports that
    return {"pid": pid, "pidfd": pidfd, "start": start, "ctl": parent.detach(), "out": out_r, "err": err_r,
            "lim": lim}


def _signal_session(s, sig):
    """SIGSTOP (freeze) or SIGCONT (thaw) the session's interpreter, all its threads at once."""
    try:
        if s["pidfd"] is None:
            if proc_identity(s["pid"])[0] == s["start"]:
                os.kill(s["pid"], sig)
        else:
            signal.pidfd_send_signal(s["pidfd"], sig)
    except OSError:
        pass  # it died: its cell reports that


_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_of(pid):
    """CPU seconds of process `pid` (all its threads) and of the children it reaped; 0 once gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])) / _TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


def _session_cpu(s):
    """CPU seconds of the session: its interpreter (and what it reaped) and its live processes. A child
    killed after an earlier cell and reaped in this one is charged to this one: the session's own time."""
    keep = keep_pids()
    return _cpu_of(s["pid"]) + sum(_cpu_of(p) for p in other_pids(keep) if uid_of(p) == RUN_UID)


def session_kill():
    s = state.SESSION
    state.SESSION = None
    if s is None:
        return
    try:
        os.killpg(s["pid"], signal.SIGKILL)
    except OSError:
        pass
    state.TEMPLATE.wait(s["pid"])
    for fd in (s["ctl"], s["out"], s["err"], s["pidfd"]):
        if fd is None:
            continue
        try:
            os.close(fd)
        except OSError:
            pass
    clean_uids((RUN_UID,))
    kill_all()
    remove_dir(os.path.join(state.WORKROOT, "session"))


def op_session_run(req):
    code = req.get("code")
    if not isinstance(code, str):
        return {"ok": False, "error": "malformed request: 'code' must be a string"}
    try:
        lim = call_limits(req)
    except (TypeError, ValueError, AttributeError) as exc:
        return {"ok": False, "error": f"malformed request: {exc}"}
    restarted = False
    if state.SESSION is None or req.get("reset"):
        restarted = state.SESSION is not None
        session_kill()
        state.SESSION = _session_start(lim)
    s = state.SESSION
    oom_before = oom_count()
    t0 = time.monotonic()
    cell = frames.encode({"code": code, "stdin": req.get("stdin") or "", "cpu_s": lim["cpu_s"]})
    # between cells the interpreter is stopped (and whatever it started: the cleaner killed the rest);
    # the cell's CPU limit counts the session's time, threads and children included (read every
    # CPU_TICK_S), and holds where SIGXCPU is ignored
    _signal_session(s, signal.SIGCONT)
    budget = _cpu_of(s["pid"]) + lim["cpu_s"] + 1.0  # between cells nothing else of it lives (bar zombies)
    res = supervise(s["pid"], (s["out"], s["err"]), t0 + lim["timeout_s"], lim["output_bytes"], ctl=s["ctl"],
                     send=cell, over_cpu=lambda: _session_cpu(s) > budget)
    _signal_session(s, signal.SIGSTOP)
    msg = res["ctl"]
    alive = msg is not None and "rc" in msg and res["reason"] is None
    if alive:
        res["wstatus"] = (int(msg["rc"]) & 0xFF) << 8
    else:
        pid = s["pid"]
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        res["wstatus"] = state.TEMPLATE.wait(pid)
        if res["reason"] == "output_limit":
            res["wstatus"] = None
    status, exit_code, oom = classify(res, oom_before)
    if not alive:
        session_kill()
    out = {"stdout": decode(res["out"]), "stderr": decode(res["err"]), "exit_code": exit_code,
           "status": status, "duration_s": time.monotonic() - t0,
           "stdout_truncated": res["out_trunc"], "stderr_truncated": res["err_trunc"], "files": {}}
    health = check_health(oom)
    return {"ok": True, "result": out, "health": health, "state_lost": not alive, "restarted": restarted}


def op_session_stop(req):
    session_kill()
    return {"ok": True, "health": check_health(False)}
