"""A call's run: forked through the call template, its streams read under a byte cap until it ends (or
a session's cell answers on its control channel), within its deadline, and its end classified (ok, error,
timeout, oom, output_limit, killed). Stdlib only."""

import json
import os
import select
import signal
import time

import exec_state as state
import frames
from common import OOM_FILES, UID_BASE, UNTRUSTED_UIDS, oom_count, reap


def decode(b):
    return b.decode("utf-8", "replace")


def fork_call(desc, fds):
    """Have the template fork a call; `desc` reaches only that call. Returns its pid."""
    pid = state.TEMPLATE.fork(desc, fds)
    if pid <= 0:
        raise RuntimeError("the call template could not fork")
    return pid


CTL_MAX = 4096  # the largest answer a session interpreter sends on its control channel ({"rc": N})


def _ctl_answer(buf):
    """The session interpreter's answer, once `buf` holds a whole frame: {"rc": int}, or {"bad": True}
    for anything else (a cell may write on the channel itself); None while incomplete."""
    try:
        body = frames.take(buf, CTL_MAX)
    except frames.FrameTooLarge:
        return {"bad": True}
    if body is None:
        return None
    try:
        obj = json.loads(body.decode("utf-8"))
    except ValueError:
        return {"bad": True}
    rc = obj.get("rc") if isinstance(obj, dict) else None
    if not isinstance(rc, int) or isinstance(rc, bool):
        return {"bad": True}
    return {"rc": rc}


REAP_TICK_S = 0.05  # how often orphans are reaped during a call, where they come to us (gVisor)


CPU_TICK_S = 0.25  # how often a session's cell has its CPU time read against its limit


def supervise(pid, fds, deadline, cap, ctl=None, send=b"", over_cpu=None):
    """Read `fds` (stdout, stderr) under a byte cap until `pid` exits (or `ctl` answers).

    `ctl` (a session's control socket, non-blocking) is written (`send`: the cell) and read in this
    same loop, within the deadline: an interpreter that stops reading, or writes part of a frame, can
    only run into the deadline. Without `ctl`, the template's report that `pid` ended stops the loop.
    `over_cpu` (a session's cell): read every CPU_TICK_S; True ends the call with reason "cpu_limit".
    Returns dict(out, err, status, truncated flags, wait status, ctl message)."""
    bufs = {fd: bytearray() for fd in fds}
    trunc = {fd: False for fd in fds}
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    server = None
    pending = memoryview(send)
    ctl_buf = bytearray()
    if ctl is None:  # the call is the template's child: the template reports its end
        server = state.TEMPLATE.sock.fileno()
        poller.register(server, select.POLLIN)
    else:
        poller.register(ctl, select.POLLIN | select.POLLHUP | (select.POLLOUT if pending else 0))
    open_fds = set(fds)
    reason = None
    wstatus = None
    ctl_msg = None
    next_tick = time.monotonic() + CPU_TICK_S
    while True:
        now = time.monotonic()
        left = deadline - now
        if left <= 0:
            reason = "timeout"
            break
        if over_cpu is not None and now >= next_tick:
            if over_cpu():
                reason = "cpu_limit"
                break
            next_tick = now + CPU_TICK_S
        wait_ms = (min(left, next_tick - now) if over_cpu is not None else left) * 1000
        if state.ORPHANS[0]:  # a zombie counts against its uid's RLIMIT_NPROC until it is reaped
            reap()
            wait_ms = min(wait_ms, REAP_TICK_S * 1000)
        events = poller.poll(max(1, int(wait_ms)))
        for fd, ev in events:
            if fd == server:
                state.TEMPLATE.pump()
            elif fd == ctl:
                if pending and ev & select.POLLOUT:
                    try:
                        pending = pending[os.write(ctl, pending):]
                    except BlockingIOError:
                        pass
                    except OSError:
                        ctl_msg = {"dead": True}
                    if not pending:
                        poller.modify(ctl, select.POLLIN | select.POLLHUP)
                if ctl_msg is None and ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                    try:
                        chunk = os.read(ctl, 65536)
                    except BlockingIOError:
                        chunk = None
                    except OSError:
                        chunk = b""
                    if chunk == b"":
                        ctl_msg = {"dead": True}
                    elif chunk:
                        ctl_buf += chunk
                        ctl_msg = _ctl_answer(ctl_buf)
                if ctl_msg is not None:
                    poller.unregister(ctl)
            elif fd in open_fds:
                data = os.read(fd, 65536)
                if not data:
                    poller.unregister(fd)
                    open_fds.discard(fd)
                    continue
                room = cap - len(bufs[fd])
                if len(data) > room:
                    bufs[fd] += data[:max(room, 0)]
                    trunc[fd] = True
                    reason = "output_limit"
                else:
                    bufs[fd] += data
        if reason:
            break
        if ctl is None:
            if pid in state.TEMPLATE.exits:
                wstatus = state.TEMPLATE.wait(pid)
                break  # the program ended; daemons still holding its pipes die next
        elif ctl_msg is not None:
            break
    # drain what is already in the pipes, without waiting for daemons holding them
    for fd in list(open_fds):
        os.set_blocking(fd, False)
        try:
            while len(bufs[fd]) <= cap:
                data = os.read(fd, 65536)
                if not data:
                    break
                room = cap - len(bufs[fd])
                if len(data) > room:
                    bufs[fd] += data[:max(room, 0)]
                    trunc[fd] = True
                    reason = reason or "output_limit"
                    break
                bufs[fd] += data
        except BlockingIOError:
            pass
    out_fd, err_fd = fds
    return {"out": bytes(bufs[out_fd]), "err": bytes(bufs[err_fd]), "reason": reason,
            "out_trunc": trunc[out_fd], "err_trunc": trunc[err_fd], "wstatus": wstatus, "ctl": ctl_msg}


def classify(res, oom_before):
    wstatus = res["wstatus"]
    exit_code = None
    sig = None
    if wstatus is not None:
        if os.WIFEXITED(wstatus):
            exit_code = os.WEXITSTATUS(wstatus)
        elif os.WIFSIGNALED(wstatus):
            sig = os.WTERMSIG(wstatus)
            exit_code = -sig
    oom = oom_count() > oom_before
    err = res["err"][-4096:]
    if oom:  # the kernel's OOM killer struck during the call: that is why it failed
        status = "oom"
    elif res["reason"] in ("timeout", "cpu_limit"):
        status = "timeout"
    elif res["reason"] == "output_limit":
        status = "output_limit"
    elif (exit_code and (b"MemoryError" in err or b"std::bad_alloc" in err or
                                b"Cannot allocate memory" in err or b"out of memory" in err)):
        status = "oom"
    elif sig == signal.SIGXCPU:
        status = "timeout"
    elif sig in (signal.SIGKILL, signal.SIGTERM):
        status = "killed"
    elif exit_code == 0:
        status = "ok"
    else:
        status = "error"
    return status, exit_code, oom


def _spawn(desc, stdin_fd, extra=()):
    """Fork a call through the template: Python in the forked interpreter, else exec. `extra`: fds
    the call gets from 3 on."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    null = None
    if stdin_fd is None:
        stdin_fd = null = os.open(os.devnull, os.O_RDONLY)
    try:
        pid = fork_call(desc, [stdin_fd, out_w, err_w, *extra])
    except BaseException:
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
        if null is not None:
            os.close(null)
    return pid, out_r, err_r


def run_one(desc, stdin_fd, lim, oom_before):
    t0 = time.monotonic()
    extra = ()
    if desc["uid"] == 0 and desc["kind"] == "python":  # the judge harness: it cleans up through our cleaners
        extra = [state.CLEANERS[uid].sock.fileno() for uid in UNTRUSTED_UIDS]
        desc = dict(desc, env={"TG_CLEANERS": ",".join(str(state.CLEANERS[uid].pid) for uid in UNTRUSTED_UIDS),
                               "TG_OOM_FILES": ":".join(OOM_FILES), "TG_UID_BASE": str(UID_BASE)})
    pid, out_r, err_r = _spawn(dict(desc, lim=lim), stdin_fd, extra)
    try:
        res = supervise(pid, (out_r, err_r), t0 + lim["timeout_s"], lim["output_bytes"])
    finally:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        os.close(out_r)
        os.close(err_r)
    if res["wstatus"] is None:
        res["wstatus"] = state.TEMPLATE.wait(pid)
    status, exit_code, oom = classify(res, oom_before)
    return {"stdout": decode(res["out"]), "stderr": decode(res["err"]), "exit_code": exit_code,
            "status": status, "duration_s": time.monotonic() - t0,
            "stdout_truncated": res["out_trunc"], "stderr_truncated": res["err_trunc"]}, oom
