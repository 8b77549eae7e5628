"""Channels through the host kernel's shared state (threat model, residual risks): open between Docker
sandboxes on runc, where every sandbox shares the host's one kernel, and closed under gVisor's runsc,
where each sandbox has a kernel of its own. Each test moves a host-wide count from sandbox A and reads
it from sandbox B, both open at once."""

from __future__ import annotations

import ctypes
import dataclasses
import mmap
import os

import pytest

from tests.requirements import need
from tests.sandbox.conftest import LIMITS, require_backend
from toolgym.sandbox import open_sandbox

PIPES = 20000
# Linux hands pipe inode numbers out in per-CPU batches of 1,024 from one global counter: a reader sees
# another sandbox's pipes once it takes a fresh batch, so it makes more than a batch before it reads
OWN_PIPES = 1100
AIO_EVENTS = 256

# B's view of the counts: its next pipe's and socket's inode numbers (one counter of the whole kernel on
# Linux, round-8 r04) and the host-wide counts under /proc/sys (aio contexts y03, ptys y08); "-" where there is no file
READ = f"""
import os, socket
OWN_PIPES = {OWN_PIPES}
def count(path):
    try:
        with open(path) as fh:
            return fh.read().split()[0]
    except OSError:
        return "-"
for _ in range(OWN_PIPES):
    r, w = os.pipe()
    os.close(r)
    os.close(w)
r, w = os.pipe()
s1, s2 = socket.socketpair()
print(os.fstat(r).st_ino, count("/proc/sys/fs/aio-nr"), count("/proc/sys/kernel/pty/nr"), os.fstat(s1.fileno()).st_ino)
"""
MAKE_PIPES = f"import os\nfor _ in range({PIPES}):\n    r, w = os.pipe(); os.close(r); os.close(w)\nprint('made')"
# held in a session's interpreter between cells: an aio context (io_setup) and an open pty
HOLD = f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
ctx = ctypes.c_ulong(0)
aio = libc.syscall(206, {AIO_EVENTS}, ctypes.byref(ctx))  # io_setup (x86_64)
pty = os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)
print(aio, pty >= 0)
"""


def _runtime_ready(runtime: str) -> None:
    require_backend("docker")
    if runtime == "runc":
        return
    import docker

    runtimes = docker.from_env(timeout=10).info().get("Runtimes") or {}
    need(runtime in runtimes, f"the Docker engine has no {runtime} runtime (scripts/setup.sh registers it)")


@pytest.fixture(scope="module", params=("runc", "runsc"))
def pair(request):
    _runtime_ready(request.param)
    rt = request.param  # named even for runc: TOOLGYM_SANDBOX_RUNTIME=runsc would make a default runtime runsc
    # 20,000 pipes take over 3 s under gVisor's ptrace platform (timeout on a quiet machine): a longer wall limit
    limits = dataclasses.replace(LIMITS, timeout_s=max(LIMITS.timeout_s, 30))
    a = open_sandbox("docker", limits, pool_size=1, runtime=rt)
    b = open_sandbox("docker", limits, pool_size=1, runtime=rt)
    yield request.param, a, b
    a.close()
    b.close()


def _counts(sb) -> list[str]:
    res = sb.run(READ, language="python")
    assert res.status == "ok", res
    return res.stdout.split()


def test_pipe_and_socket_inode_numbers_carry_another_sandboxs_pipes_only_on_runc(pair):
    runtime, a, b = pair
    first = _counts(b)
    assert a.run(MAKE_PIPES, language="python").stdout == "made\n"
    then = _counts(b)
    pipe, sock = int(then[0]) - int(first[0]), int(then[3]) - int(first[3])
    if runtime == "runc":
        assert pipe > OWN_PIPES + PIPES // 2  # r04 open: B's numbers moved by A's pipes
        assert sock > OWN_PIPES + PIPES // 2  # sockets draw from the same counter
    else:
        assert OWN_PIPES <= pipe < OWN_PIPES + 100  # B's own pipes only: A's kernel is not B's
        assert sock < OWN_PIPES + 100, (first, then)  # no pipe of A's moved B's socket numbers


def test_host_wide_counts_under_proc_sys_reach_another_sandbox_only_on_runc(pair):
    runtime, a, b = pair
    before = _counts(b)[1:3]
    if runtime != "runc":
        assert before == ["-", "-"]  # no host-wide count to read at all
    with a.session() as s:
        held = s.run(HOLD)
        during = _counts(b)[1:3]
    if runtime == "runc":
        assert held.stdout == "0 True\n", held
        assert int(during[0]) - int(before[0]) >= AIO_EVENTS  # y03 open
        assert int(during[1]) - int(before[1]) >= 1  # y08 open
    else:
        assert during == ["-", "-"]


# y04, the page cache of the image's files (one copy on the host, shared by every sandbox). Its read side is a
# first read's time (a file another sandbox read is served from the host's page cache: 3 MB in ~0.5 ms on runc,
# ~3 ms on runsc, against ~3-8 ms and 4-170 ms from disk, measured on this host), which a test may not assert;
# mincore(2) reports every page resident to a program that cannot write the file (Linux 5.0+) or asks gVisor's
# own cache (runsc), so it reads nothing either way. What a test can show is the write side: a program that
# drops a file's pages from the host's page cache (posix_fadvise DONTNEED, passed through overlayfs) makes
# "cold" one value of a bit and "warm" the other, at will.
EVICT = """
import importlib.util, os
path = importlib.util.find_spec("pydoc_data.topics").origin
fd = os.open(path, os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
print(path)
"""


def _host_file(path: str) -> str:
    """Where the sandbox image's file `path` lies on the host (a layer of Docker's overlay2 storage)."""
    import docker

    from toolgym.sandbox.image import image_name

    data = docker.from_env(timeout=10).images.get(image_name()).attrs["GraphDriver"]["Data"]
    layers = [data.get("UpperDir") or "", *(data.get("LowerDir") or "").split(":")]
    found = [d + path for d in layers if d and os.path.isfile(d + path)]
    need(bool(found), f"the image's layers are not readable here (storage driver {data})")
    return found[0]


def _resident(path: str) -> tuple[int, int]:
    """(pages of `path` in the host's page cache, pages): mincore tells the truth to the file's owner (root)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        vec = (ctypes.c_ubyte * pages)()
        try:
            assert libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec) == 0, ctypes.get_errno()
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)
    return sum(v & 1 for v in vec), pages


def test_a_program_drops_an_image_files_pages_from_the_host_page_cache_only_on_runc(pair):
    runtime, a, _ = pair
    need(os.geteuid() == 0, "reading the host's page cache of an image file takes its owner (root)")
    res = a.run(EVICT)
    assert res.status == "ok", res
    host = _host_file(res.stdout.strip())
    with open(host, "rb") as fh:  # warm on the host: every page in its page cache
        fh.read()
    warm, pages = _resident(host)
    assert warm == pages > 100
    assert a.run(EVICT).status == "ok"
    after, _ = _resident(host)
    if runtime == "runc":
        assert after < pages // 2  # y04's write side open: the program made the file cold for every sandbox
    else:
        assert after == pages  # gVisor keeps the advice to its own cache: the host's stays as it was


def test_an_unknown_runtime_is_one_clear_line(monkeypatch):
    require_backend("docker")
    from toolgym.errors import SandboxUnavailable

    monkeypatch.setenv("TOOLGYM_SANDBOX_RUNTIME", "no-such-runtime")
    with pytest.raises(SandboxUnavailable) as err:
        open_sandbox("docker", LIMITS, pool_size=1)
    msg = str(err.value)
    assert "\n" not in msg and "'no-such-runtime'" in msg and "runc" in msg and "TOOLGYM_SANDBOX_RUNTIME" in msg


def test_the_runsc_container_is_read_back_as_runsc_and_locked_down():
    _runtime_ready("runsc")
    with open_sandbox("docker", LIMITS, pool_size=1, runtime="runsc") as sb:
        sb.wait_ready(120)
        worker = sb._pool._idle[0]
        worker.container.reload()
        host = worker.container.attrs["HostConfig"]
        res = sb.run("import os\nprint(os.uname().release, os.getuid() > 65535)")
    assert host["Runtime"] == "runsc"
    assert host["NetworkMode"] == "none" and host["CapDrop"] == ["ALL"] and host["ReadonlyRootfs"] is True
    assert "no-new-privileges" in host["SecurityOpt"]
    # gVisor's own kernel answers (it reports 4.4.0), and the program runs under the sandbox's own uid
    assert res.stdout == "4.4.0 True\n", res
