"""The one fork server of a sandbox: the executor's call template and the judge harness's zygote.

Its owner starts it before it reads anything it must keep to itself (the executor: any request; the
harness: its spec, with the programs, tests, expected outputs and nonce), and it never receives any
of that later: a request is the byte b"f" and file descriptors, the first of them a pipe on which
the owner wrote what the child is to do (JSON, under DESC_MAX bytes). Only the forked child reads
that pipe, so no request ever enters the server's memory, where the next child would find it.
Forking this warm interpreter costs ~1 ms where a fresh ``python`` costs tens of ms.

The server runs as its owner's uid (the sandbox's root), non-dumpable and with nothing open but its
socket, and without the scripts' modules in sys.modules (common.forget_scripts, done once here: every
program of a sandbox runs in one of its children, and imports its own limits.py, never ours); it
dies with its owner. Its children are the owner's business: `child(fds)` (given by the
owner, see executor._call_child and zygote._child) runs in each fresh fork, the server's socket and
descriptors already closed, reads its description, drops to the uid it names and never returns.

Wire format, on a SOCK_SEQPACKET socket pair (int32 in native byte order):
  owner -> server  b"f" with the fds [description pipe, the child's fds...] (MAX_FDS in all)
  server -> owner  b"r" once, when ready;
                   b"p" pid, per request and in order (-1: the fork failed, e.g. a full process table);
                   b"x" pid status, when a child has ended (the server reaps it then).
"""

import fcntl
import gc
import json
import os
import select
import signal
import socket
import struct

from common import PR_SET_DUMPABLE, PR_SET_PDEATHSIG, forget_scripts, pidfd_open, prctl

DESC_MAX = 65536  # a description is written before the fork, so it must fit in the pipe
MAX_FDS = 8  # per request: the description pipe and up to 7 fds of the child
_PID = struct.Struct("i")
_EXIT = struct.Struct("ii")


class ServerDied(RuntimeError):
    """The fork server is gone: its owner can start nothing more."""


# ------------------------------------------------------------------------------ in a child
def description(fd):
    """What the owner asked this child to do (the JSON it wrote on the pipe `fd`, which is closed)."""
    chunks = []
    while True:
        b = os.read(fd, DESC_MAX)
        if not b:
            break
        chunks.append(b)
    os.close(fd)
    return json.loads(b"".join(chunks) or b"{}")


def place(fds):
    """Make `fds` this process's fds 0, 1, 2, ... in order, and close every other one."""
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 64) for fd in fds]  # out of the way of the targets
    for target, fd in enumerate(high):
        os.dup2(fd, target)
    os.closerange(len(high), 1 << 16)


# ------------------------------------------------------------------------------ the server
def _serve(sock, child):
    """Fork a child per request; report each child's end as it happens."""
    live = {}  # pidfd -> pid
    waiting = set()  # children without a pidfd (gVisor has no pidfd_open): found by SIGCHLD
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    wake = None
    while True:
        for fd, _ev in poller.poll():
            if fd in live:
                pid = live.pop(fd)
                poller.unregister(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                sock.send(b"x" + _EXIT.pack(pid, status))
                continue
            if fd == wake:
                _drain(wake)
                for pid in list(waiting):
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        waiting.discard(pid)
                        sock.send(b"x" + _EXIT.pack(pid, status))
                continue
            try:
                msg, fds, _flags, _addr = socket.recv_fds(sock, 16, MAX_FDS)
            except OSError:
                os._exit(0)
            if msg != b"f" or not fds:
                os._exit(0)  # the owner closed the socket (or sent what no owner sends)
            try:
                pid = os.fork()
            except OSError:
                pid = -1  # the owner reports it; the server keeps serving
            if pid == 0:
                try:
                    sock.close()
                    if wake is not None:
                        signal.set_wakeup_fd(-1)
                        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                        os.close(wake)
                    for pfd in live:
                        os.close(pfd)
                    child(fds)
                finally:
                    os._exit(127)
            for f in fds:
                os.close(f)
            if pid > 0:
                pfd = pidfd_open(pid)
                if pfd is None:
                    if wake is None:  # first child without a pidfd: from now on, SIGCHLD says when
                        wake = _sigchld_pipe()
                        poller.register(wake, select.POLLIN)
                    waiting.add(pid)
                    # ended already? then its SIGCHLD came before the pipe: look once now
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        waiting.discard(pid)
                        sock.send(b"p" + _PID.pack(pid))
                        sock.send(b"x" + _EXIT.pack(pid, status))
                        continue
                else:
                    live[pfd] = pid
                    poller.register(pfd, select.POLLIN)
            sock.send(b"p" + _PID.pack(pid))


def _sigchld_pipe():
    """The read end of a pipe that SIGCHLD writes to (signal.set_wakeup_fd): how the server learns that a
    child ended where the kernel has no pidfds. On Linux the pidfds come first and this stays quiet."""
    rd, wr = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wr, warn_on_full_buffer=False)
    return rd


def _drain(fd):
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def _run(sock, child):
    """The server process, from its fork on: nothing open but `sock`, then serve."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # never the owner's streams
        os.dup2(null, fd)
    keep = sock.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, 1 << 16)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    prctl(PR_SET_DUMPABLE, 0)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # once here, not in each child: the scan touches every module, so each child paid ~80 copied pages
    forget_scripts()
    # no gc.collect() first: the holes it leaves in the heap are where each child's objects go, one copied
    # page each (~20 more per child, measured)
    gc.freeze()  # children never scan (and so never copy) the server's objects
    sock.send(b"r")
    _serve(sock, child)


# ------------------------------------------------------------------------------ the owner's handle
class ForkServer:
    """The owner's handle: forks the server now. Ask for children with `request` (their pids come in
    order from `next_pid`) or `fork`; `exits` holds the wait status of each child that has ended and
    was not yet collected with `wait`; the socket (`sock`) is readable when a report is waiting."""

    def __init__(self, child, name="the fork server"):
        parent, sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                parent.close()
                _run(sock, child)
            finally:
                os._exit(127)
        sock.close()
        self.pid, self.sock, self.name, self.exits = pid, parent, name, {}
        self.children = set()  # forked and not yet collected with `wait`
        try:
            ready = self._recv()
        except ServerDied:
            ready = None
        if ready != b"r":
            self.close()
            raise ServerDied(f"{name} did not start")

    def _recv(self):
        msg = self.sock.recv(64)
        if not msg:
            raise ServerDied(f"{self.name} died")
        return msg

    def pump(self):
        """Take one report from the server (an ended child's goes into `exits`); returns it."""
        msg = self._recv()
        if msg[:1] == b"x":
            pid, status = _EXIT.unpack(msg[1:])
            self.exits[pid] = status
        return msg

    def request(self, desc, fds):
        """Ask for a child that is told `desc` (JSON data) and handed `fds` (the caller still owns them,
        and closes them). ValueError when `desc` does not fit in a pipe, or there are too many fds."""
        if len(fds) >= MAX_FDS:
            raise ValueError(f"a child gets at most {MAX_FDS - 1} fds")
        data = json.dumps(desc).encode()
        r, w = os.pipe()
        try:
            os.set_blocking(w, False)
            try:
                written = os.write(w, data) if len(data) < DESC_MAX else 0
            except BlockingIOError:
                written = 0
            if written != len(data):
                raise ValueError("the child's description is too large")
            os.close(w)
            w = -1
            socket.send_fds(self.sock, [b"f"], [r, *fds])
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)

    def next_pid(self):
        """The pid of the next child asked for, or -1 when it could not be forked."""
        while True:
            msg = self.pump()
            if msg[:1] == b"p":
                (pid,) = _PID.unpack(msg[1:])
                if pid > 0:
                    self.exits.pop(pid, None)  # an earlier child of that pid that nobody waited for
                    self.children.add(pid)
                return pid

    def fork(self, desc, fds):
        """`request` and `next_pid` in one."""
        self.request(desc, fds)
        return self.next_pid()

    def wait(self, pid):
        """The wait status of child `pid`, once it has ended (kill it first, or know that it ended); None
        when it is no child of the server or was collected already (as waitpid's ECHILD)."""
        if pid not in self.children:
            return None
        while pid not in self.exits:
            self.pump()
        self.children.discard(pid)
        return self.exits.pop(pid)

    def close(self):
        self.sock.close()
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except OSError:
            pass
