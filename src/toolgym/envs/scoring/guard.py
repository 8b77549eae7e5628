"""A guard around third-party scorers: no scorer may execute the model's text, or act on the host,
in the trainer's process.

Some reasoning-gym scorers `eval()` the model's answer, and sympy's `parse_expr` (used by others)
evaluates Python too: an answer could write host files or rebind the scorer itself for every later
episode. Rather than hunt for such scorers one by one, `guarded()` refuses, on the current thread
and only while a scorer runs, every Python audit event (PEP 578) by which code could run or act:
executing code not loaded from a module file (eval/exec of a string; imports stay allowed), creating
processes, opening files for writing, changing the file system, sockets, ctypes, unpickling. A
refused event raises `ScorerRefused` inside the scorer; whatever the scorer does with that, the
guard remembers it, and the caller scores the answer 0. Parsing (`ast.literal_eval`, `compile` to an
AST) stays allowed: it runs nothing.

The audit hook is installed once, on first use (never at `import toolgym`), and costs one global
read per audit event while no guarded scorer runs.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any

__all__ = ["ScorerRefused", "Guard", "guarded"]

# events refused outright while a guarded scorer runs (docs.python.org/3/library/audit_events.html)
_REFUSED = frozenset({
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.startfile",
    "subprocess.Popen", "pty.spawn", "os.kill", "os.killpg", "os.putenv", "os.unsetenv",
    "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.chflags", "os.lchflags",
    "os.truncate", "os.link", "os.symlink", "os.utime", "os.setxattr", "os.removexattr",
    "shutil.rmtree", "shutil.move", "shutil.copyfile", "shutil.copymode", "shutil.copystat",
    "shutil.chown", "shutil.make_archive", "shutil.unpack_archive",
    "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
    "ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function", "ctypes.addressof", "ctypes.cdata",
    "ctypes.string_at", "ctypes.wstring_at", "ctypes.PyObj_FromPtr", "ctypes.seh_exception",
    "pickle.find_class", "code.__new__", "function.__new__",
    "sys.addaudithook", "sys.settrace", "sys.setprofile", "sys._current_frames",
    "cpython.run_command", "cpython.run_file", "cpython.run_module", "cpython.run_startup",
    "webbrowser.open", "urllib.Request", "http.client.connect", "ftplib.connect", "smtplib.connect",
    "sqlite3.connect", "sqlite3.enable_load_extension", "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "mmap.__new__", "resource.setrlimit", "resource.prlimit", "signal.pthread_kill", "os.chdir",
})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class ScorerRefused(Exception):
    """A guarded scorer tried to run code or act on the host; its answer scores 0."""


class Guard:
    """One guarded call's state: the first refused event, if any (`tripped`)."""

    def __init__(self) -> None:
        self.tripped: str | None = None


_local = threading.local()
_active = 0  # guarded calls in progress, all threads: the hook returns at once when 0
_count_lock = threading.Lock()
_install_lock = threading.Lock()
_installed = False


def _why(event: str, args: tuple[Any, ...]) -> str | None:
    """Why this audit event is refused, or None when it is allowed."""
    if event in _REFUSED:
        return event
    if event == "exec":
        code = args[0] if args else None
        filename = code.co_filename if isinstance(code, types.CodeType) else ""
        if code is not None and filename.endswith(".py") and os.path.isabs(filename) and os.path.isfile(filename):
            return None  # a module loaded from its file: an import
        return "exec of code not loaded from a module file"
    if event == "open" and len(args) >= 3:
        mode, flags = args[1], args[2]
        if isinstance(mode, str):
            if any(c in mode for c in "wax+"):
                return f"open for writing ({mode!r})"
        elif isinstance(flags, int) and flags & _WRITE_FLAGS:
            return "open for writing (flags)"
    return None


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if not _active:
        return
    guard = getattr(_local, "guard", None)
    if guard is None:
        return
    why = _why(event, args)
    if why is not None:
        if guard.tripped is None:
            guard.tripped = why
        raise ScorerRefused(f"refused in a scorer: {why}")


def _install() -> None:
    global _installed
    with _install_lock:
        if not _installed:
            sys.addaudithook(_hook)
            _installed = True


@contextlib.contextmanager
def guarded() -> Iterator[Guard]:
    """Run a third-party scorer inside: refused events raise `ScorerRefused` in it and are kept in
    the yielded Guard (`tripped`), which the caller reads afterwards whatever the scorer returned."""
    global _active
    _install()
    outer = getattr(_local, "guard", None)
    guard = Guard()
    with _count_lock:
        _active += 1
    _local.guard = guard
    try:
        yield guard
    finally:
        _local.guard = outer
        with _count_lock:
            _active -= 1
