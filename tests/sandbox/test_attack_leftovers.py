"""Red-team attacks that leave something behind a call or a job, on every backend: SysV IPC (also given
to root with IPC_SET, round 5 A01), POSIX queues, trees deeper than PATH_MAX, files in every writable
place, background processes and daemons, process chains that outlive a job, IPC across a session reset.
Nothing a call leaves survives it, and a job that leaves something is the one that pays.
How these tests are built, and their round ids: tests/sandbox/judging.py.
"""

from __future__ import annotations

import errno
import secrets

import pytest

from tests.sandbox.conftest import under_gvisor
from tests.sandbox.judging import (
    AB,
    ANCESTRY,
    CALL,
    RIGHT,
    assert_all_ac,
    assert_clean,
    assert_no_ac,
    fn,
    gather_batch,
    statuses,
    stdio,
    stdio_job,
)
from toolgym.sandbox import Limits
from toolgym.sandbox.judging import TestCase, ajudge

# =========================================================================== 4. state that survives a call
SYSV_PLANT = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmdt.argtypes = [ctypes.c_void_p]
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
IPC_CREAT = 0o1000

def read_int(path):
    with open(path) as fh:
        v = fh.read().split()[0]
    return None if v == "max" else int(v)

def room():
    """Bytes left in this sandbox's memory cgroup, if it can be read."""
    for lim, cur in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                     ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            limit, used = read_int(lim), read_int(cur)
        except (OSError, ValueError, IndexError):
            continue
        if limit and limit < 1 << 40:
            return limit - used
    return None

left = room()
target = (left - (48 << 20)) if left else (200 << 20)
seg, made = 32 << 20, 0
while made + seg <= target:
    sid = libc.shmget(0, seg, IPC_CREAT | 0o666)  # IPC_PRIVATE
    if sid < 0:
        break
    addr = libc.shmat(sid, None, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        break
    ctypes.memset(addr, 1, seg)  # charged to the memory cgroup, and stays charged
    libc.shmdt(addr)
    made += seg
print("shm MiB", made >> 20)
print("msg", libc.msgget(0x7467, IPC_CREAT | 0o666) >= 0)
print("sem", libc.semget(0x7468, 1, IPC_CREAT | 0o666) >= 0)
'''
SYSV_LOOK = r'''
def rows(name):
    try:
        with open("/proc/sysvipc/" + name) as fh:
            return len(fh.read().splitlines()) - 1
    except OSError:
        return 0
print("ipc", rows("shm"), rows("msg"), rows("sem"))
block = b"x" * (150 << 20)  # touched: really charged
print("allocated", len(block) >> 20)
'''


@pytest.mark.slow
def test_sysv_ipc_does_not_survive_a_call(sb):
    """round 1, route 4 (state that survives a call)."""
    r = sb.run(SYSV_PLANT, limits=Limits(timeout_s=20, memory_mb=256))
    assert r.status == "ok", r
    assert "shm MiB" in r.stdout and int(r.stdout.split("shm MiB")[1].split()[0]) >= 64, r.stdout
    assert "msg True" in r.stdout and "sem True" in r.stdout, r.stdout  # the attack's objects existed
    r = sb.run(SYSV_LOOK, limits=Limits(timeout_s=20, memory_mb=256))
    assert r.status == "ok", f"a legitimate call after the plant was starved of memory: {r}"
    assert "ipc 0 0 0" in r.stdout, f"SysV objects (shm, msg, sem) survived the call: {r.stdout}"
    assert "allocated 150" in r.stdout
    assert_clean(sb)


def test_posix_message_queue_does_not_survive_a_call(sb):
    """round 1, route 4 (state that survives a call)."""
    name = "/tgq" + secrets.token_hex(6)
    mq = (r'''
import ctypes, os
lib = ctypes.CDLL(None, use_errno=True)
try:
    mq_open = lib.mq_open
except AttributeError:
    mq_open = ctypes.CDLL("librt.so.1", use_errno=True).mq_open
mq_open.restype = ctypes.c_int
mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
''' + f"NAME = {name.encode()!r}\n")
    r = sb.run(mq + "print('created', mq_open(NAME, os.O_CREAT | os.O_RDWR, 0o666, None) >= 0, ctypes.get_errno())",
               limits=CALL)
    if under_gvisor(sb):  # no /dev/mqueue there, so no wipe could see a queue: none may be made (ENOSYS)
        assert (r.status, r.stdout) == ("ok", f"created False {errno.ENOSYS}\n"), r
    else:
        assert (r.status, r.stdout.split()[:2]) == ("ok", ["created", "True"]), r  # the attack's queue existed
    look = mq + ("print('opened', mq_open(NAME, os.O_RDONLY, 0, None) >= 0)\n"
                 "print('listed', os.path.isdir('/dev/mqueue') and NAME.decode()[1:] in os.listdir('/dev/mqueue'))\n")
    r = sb.run(look, limits=CALL)
    assert r.status == "ok", r
    assert r.stdout == "opened False\nlisted False\n", r.stdout


DEEP = r'''
import os
def deep(top, depth):
    os.chdir(top)
    os.mkdir("tgdeep")
    os.chdir("tgdeep")
    for _ in range(depth):
        os.mkdir("dd")
        os.chdir("dd")
    with open("marker", "w") as fh:
        fh.write("x")
    return depth
work = os.getcwd()
made = []
for top in ("/tmp", work):
    try:
        made.append(deep(top, 2100))
    except OSError as e:
        made.append(repr(e))
os.chdir(work)
print("made", made)
'''


def test_a_tree_deeper_than_path_max_does_not_survive(sb):
    """round 1, route 4 (state that survives a call)."""
    r = sb.run(DEEP, limits=Limits(timeout_s=20, memory_mb=256))
    # untrusted code must not make the sandbox itself fail (a judge call would raise JudgeError)
    assert r.status != "sandbox_error", r
    assert r.stdout.startswith("made [2100, 2100]"), r  # the trees were made
    look = ("import os, sys\n"
            "print([e for e in os.listdir('/tmp') if not sys.prefix.startswith('/tmp/' + e + '/')],"
            " sorted(os.listdir('..')), os.path.basename(os.getcwd()))\n"
            "open('/tmp/ok', 'w').write('x')\nopen('ok', 'w').write('x')\nprint('writable')\n")
    r = sb.run(look, limits=CALL)
    assert r.status == "ok", r
    tmp, rest = r.stdout.split("] ", 1)
    assert tmp == "[", f"left in /tmp: {r.stdout}"
    siblings, me = rest.splitlines()[0].rsplit("] ", 1)
    assert siblings == f"['{me}'", f"left in the work root: {r.stdout}"
    assert r.stdout.endswith("writable\n")
    assert_clean(sb)


async def test_a_deep_tree_in_a_judged_program_fails_only_that_program(sb):
    """round 1, route 4 (state that survives a call).

    The judge must return verdicts, not raise, when a program leaves a tree its cleanup
    cannot walk; and a batch-mate's verdict stays its own."""
    t = [TestCase(call="add", args=[1, 2], expected=3)]
    attacker = DEEP + "def add(a, b):\n    return a - b\n"
    reports = await gather_batch(sb, ajudge(sb, attacker, t, mode="function", time_limit_s=5.0),
                                 ajudge(sb, RIGHT, t, mode="function"))
    assert_no_ac(reports[0])
    assert_all_ac(reports[1], "batch-mate")
    r = stdio(sb, DEEP + "print(0)\n", [TestCase(input="", output="1\n")], time_limit_s=5.0)
    assert_no_ac(r)
    assert_all_ac(stdio(sb, "print(1)\n", [TestCase(input="", output="1\n")]), "control")


PLANT_EVERYWHERE = r'''
import os, sys
TAG = sys.argv[1]
dirs = ["/", "/tmp", "/var/tmp", "/dev", "/dev/shm", "/dev/mqueue", "/home", "/run", "/root", "/mnt", "/srv",
        "/media", "/opt", "/var", "/etc", "/usr/local", "/work", os.getcwd(), os.path.dirname(os.getcwd()),
        os.path.expanduser("~"), os.environ.get("TMPDIR", "/tmp")]
with open("/proc/self/mountinfo") as fh:
    dirs += [line.split()[4] for line in fh]
for top in ("/", "/var", "/run", "/dev"):
    try:
        dirs += [os.path.join(top, e) for e in os.listdir(top)]
    except OSError:
        pass
made = []
for d in dict.fromkeys(dirs):
    if not os.path.isdir(d) or d.startswith(("/proc", "/sys")) or os.path.realpath(d) == os.getcwd():
        continue
    p = os.path.join(d, TAG)
    try:
        fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
        os.close(fd)
        made.append(p)
    except OSError:
        pass
    try:
        os.mkdir(p + "d")
        made.append(p + "d")
    except OSError:
        pass
print("\n".join(made))
'''


def test_files_planted_in_every_writable_place_are_gone(sb):
    """round 1, route 4 (state that survives a call)."""
    tag = "tgplant" + secrets.token_hex(6)
    r = sb.run(PLANT_EVERYWHERE, argv=[tag], limits=CALL)
    assert r.status == "ok", r
    planted = r.stdout.split()
    assert any(p.startswith("/tmp/") for p in planted), planted  # at least /tmp is writable: a real plant
    look = ("import os, sys\nfor p in sys.argv[1:]:\n    print(p, os.path.lexists(p))\n")
    r = sb.run(look, argv=planted, limits=CALL)
    assert r.status == "ok", r
    survivors = [line.split()[0] for line in r.stdout.splitlines() if line.endswith(" True")]
    assert survivors == [], f"planted files survived into the next call: {survivors}"


DAEMONS = {
    "setsid + double fork, SIGTERM/SIGHUP/SIGINT ignored": r'''
import os, signal, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        os.close(1)
        os.close(2)
        time.sleep(60)
    os._exit(0)
os.wait()
print("left")
''',
    "a process that keeps forking a new child": r'''
import os, signal, time
if os.fork() == 0:
    os.close(1)
    os.close(2)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        if os.fork() != 0:
            os._exit(0)
        os.setsid()
        time.sleep(0.002)
    os._exit(0)
os.wait()
print("left")
''',
    "a chain of setsid processes ten deep": r'''
import os, signal, time
def link(n):
    if os.fork() == 0:
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        if n:
            link(n - 1)
        time.sleep(60)
        os._exit(0)
os.close(2)
link(10)
print("left", flush=True)
os.close(1)
time.sleep(0.2)
''',
}


@pytest.mark.parametrize("name", list(DAEMONS))
def test_background_processes_do_not_survive_the_call(sb, name):
    """round 1, route 4 (state that survives a call)."""
    r = sb.run(DAEMONS[name], limits=CALL)
    assert r.stdout.startswith("left"), r
    assert_clean(sb)


CHAIN_KILLER = ANCESTRY + r'''
import sys
if os.fork() == 0:
    os.setsid()
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, signal.SIG_IGN)
    os.close(0)
    os.close(1)
    os.close(2)
    end = time.monotonic() + 4
    while time.monotonic() < end:
        if os.fork() != 0:
            os._exit(0)  # a new pid every round: a sweep that lists, then kills, misses it
        os.setsid()
        try:
            hit_batch_mates(signal.SIGKILL, 0.005)
        except Exception:
            pass
    os._exit(0)
print(-1)
'''


@pytest.mark.slow
async def test_a_surviving_process_chain_cannot_kill_later_jobs(sb):
    """round 1, route 5 (batch-mates)."""
    tests = [TestCase(input=f"{i} {i}\n", output=f"{2 * i}\n") for i in range(4)]
    honest = "import time\na, b = map(int, input().split())\ntime.sleep(0.1)\nprint(a + b)\n"
    solo = stdio(sb, honest, tests)
    assert_all_ac(solo, "control alone")
    reports = await gather_batch(sb, ajudge(sb, CHAIN_KILLER, tests[:1]),
                                 ajudge(sb, honest, tests), ajudge(sb, honest, tests))
    assert_no_ac(reports[0])
    for r in reports[1:]:
        assert statuses(r) == statuses(solo), r.verdicts
    assert_clean(sb)


# =========================================================================== 8. daemons in a batch
DAEMON_RIGHT = RIGHT + r'''
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(30)
    os._exit(0)
os.wait()
time.sleep(0.4)  # long enough for a batch-mate's test to run while the daemon lives, if jobs overlapped
'''
# A right program that passes only if no process of its uid but itself exists: it sees a
# batch-mate's daemon if one survived into its job.
ALONE = r'''
import os
def _mates():
    me, uid = os.getpid(), os.getuid()
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != me:
            try:
                st = open(f"/proc/{p}/status").read()
            except OSError:
                continue
            if st.split("Uid:")[1].split()[0] == str(uid) and "State:\tZ" not in st:
                out.append(p)
    return out
def add(a, b):
    return a + b if not _mates() else a - b
'''


@pytest.mark.slow
async def test_a_daemon_in_a_batch_reaches_no_other_job(sb):
    """round 1, route 8 (daemons in a batch)."""
    # The daemon is the program's own business (its right answer passes, as alone); it must
    # be dead before any batch-mate runs, and every batch-mate keeps its solo verdict.
    test = [TestCase(code="assert add(1, 2) == 3")]
    solo_right = fn(sb, RIGHT, test)
    solo_daemon = fn(sb, DAEMON_RIGHT, test)
    solo_alone = fn(sb, ALONE, test)
    assert_all_ac(solo_right, "control alone")
    assert_all_ac(solo_alone, "the uid check alone")
    for round_ in range(5):
        reports = await gather_batch(sb, ajudge(sb, RIGHT, test, mode="function"),
                                     ajudge(sb, DAEMON_RIGHT, test, mode="function"),
                                     ajudge(sb, ALONE, test, mode="function"),
                                     *[ajudge(sb, RIGHT, test, mode="function") for _ in range(3)])
        assert statuses(reports[1]) == statuses(solo_daemon), (round_, reports[1].verdicts)
        assert_all_ac(reports[2], f"round {round_}: a batch-mate's daemon was alive in the next job")
        for i in (0, 3, 4, 5):
            assert statuses(reports[i]) == statuses(solo_right), (round_, i, reports[i].verdicts)
    assert_clean(sb)


SHM_MAKE = r'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
sid = libc.shmget(0x7467, 4096, 0o1666)
ctypes.memmove(libc.shmat(sid, None, 0), b"planted-before-reset", 20)
print("made", sid)
'''
SHM_READ = r'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
sid = libc.shmget(0x7467, 4096, 0)
print("found" if sid >= 0 and ctypes.string_at(libc.shmat(sid, None, 0), 20) == b"planted-before-reset" else "gone")
'''


def test_session_reset_leaves_no_ipc(sb):
    """round 2, robustness."""
    with sb.session() as s:
        assert "made" in s.run(SHM_MAKE).stdout
        assert s.run(SHM_READ).stdout.strip() == "found"  # control: state within a session stays
        s.reset()
        assert s.run(SHM_READ).stdout.strip() == "gone"







# ================================================================ A01: IPC objects given to root
IPC = r'''
import ctypes, errno, os
_libc = ctypes.CDLL(None, use_errno=True)
_libc.shmat.restype = ctypes.c_void_p
_libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
_libc.shmdt.argtypes = [ctypes.c_void_p]
IPC_PRIVATE, IPC_CREAT, IPC_SET, IPC_STAT = 0, 0o1000, 1, 2


def _give_to_root(ctl, ident, *pre):
    """Its owner may hand an object to any uid (IPC_SET); its creator stays the program's uid."""
    buf = ctypes.create_string_buffer(512)
    ctl(ident, *pre, IPC_STAT, buf)
    ctypes.c_uint32.from_buffer(buf, 4).value = 0  # struct ipc_perm: key, then the owner's uid
    return ctl(ident, *pre, IPC_SET, buf)


def _shm(nbytes):
    ident = _libc.shmget(IPC_PRIVATE, nbytes, IPC_CREAT | 0o644)
    addr = _libc.shmat(ident, None, 0)
    ctypes.memset(addr, 1, nbytes)  # charged to the sandbox's memory, and it stays when we detach
    _libc.shmdt(ctypes.c_void_p(addr))
    _give_to_root(_libc.shmctl, ident)


def _owners():
    if not os.path.isdir("/proc/sysvipc"):
        return _owners_by_id()
    out = []
    for kind, col in (("shm", 7), ("msg", 7), ("sem", 4)):
        out += [row.split()[col] for row in open("/proc/sysvipc/" + kind).read().splitlines()[1:]]
    return out


def _owners_by_id():
    """gVisor has no /proc/sysvipc; it hands out each kind's ids in order, so every object that exists has
    an id below a new one's: ask each (IPC_STAT; EINVAL: none)."""
    out, buf = [], ctypes.create_string_buffer(512)
    for make, ctl in ((lambda: _libc.shmget(IPC_PRIVATE, 1, IPC_CREAT | 0o600), _libc.shmctl),
                      (lambda: _libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o600), _libc.msgctl),
                      (lambda: _libc.semget(IPC_PRIVATE, 1, IPC_CREAT | 0o600), lambda i, *a: _libc.semctl(i, 0, *a))):
        top = make()
        ctl(top, 0, None)  # IPC_RMID
        for ident in range(1, top):
            if ctl(ident, IPC_STAT, buf) == 0:
                out.append(str(ctypes.c_uint32.from_buffer(buf, 4).value))
            elif ctypes.get_errno() != errno.EINVAL:
                out.append("?")  # one exists, not readable to us
    return out


def _plant():
    """One object of each kind, each given to root."""
    _shm(1 << 20)
    _give_to_root(_libc.msgctl, _libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o644))
    _give_to_root(_libc.semctl, _libc.semget(IPC_PRIVATE, 1, IPC_CREAT | 0o644), 0)


def _room():
    """Bytes the sandbox has left: its memory cgroup's; under gVisor (no cgroup files) its executor's memory
    budget (its command line) less what gVisor's kernel holds (/proc/meminfo)."""
    cg = "/sys/fs/cgroup/memory/"
    try:
        return int(open(cg + "memory.limit_in_bytes").read()) - int(open(cg + "memory.usage_in_bytes").read())
    except OSError:
        argv = open("/proc/1/cmdline").read().split("\0")
        info = {line.split(":")[0]: int(line.split()[1]) << 10 for line in open("/proc/meminfo")}
        return int(argv[argv.index("--memory-budget") + 1]) - (info["MemTotal"] - info["MemAvailable"])


def _fill(headroom_mb):
    """Shared memory given to root until the sandbox has `headroom_mb` left."""
    while _room() > (headroom_mb + 16) << 20:
        _shm(16 << 20)
'''
IPC_PLANTER = IPC + "_plant()\nprint('owners', *_owners())\n"
IPC_LOOK = IPC + "print(len(_owners()))\n"
IPC_FILLER = IPC + "_fill(100)\nprint('filled', len(_owners()))\n"
NEEDS_160_MB = "b = bytes([1]) * (160 << 20)\n" + AB  # well inside its 256 MiB, more than 100 MiB


async def test_ipc_objects_given_to_root_do_not_survive_the_job(sb):
    """round 5, A01."""
    planter, look = await gather_batch(sb, stdio_job(sb, IPC_PLANTER, [TestCase(input="", output="never\n")]),
                                       stdio_job(sb, IPC_LOOK, [TestCase(input="", output="0\n")]))
    assert planter.verdicts[0].got.split() == ["owners", "0", "0", "0"], planter.verdicts  # the attack took
    assert_all_ac(look, "a batch-mate of the IPC planter sees no IPC object")
    assert_clean(sb)


@pytest.mark.slow
async def test_shared_memory_given_to_root_does_not_starve_a_batch_mate(sb):
    """round 5, A01."""
    # the filler gets time to fill the sandbox even on a loaded machine (in 2 s it sometimes did not)
    filler, honest = await gather_batch(sb, stdio_job(sb, IPC_FILLER, [TestCase(input="", output="never\n")],
                                                      time_limit_s=20),
                                        stdio_job(sb, NEEDS_160_MB))
    assert filler.verdicts[0].got.startswith("filled"), filler.verdicts  # it did fill the sandbox
    assert_all_ac(honest, "a batch-mate of the shared-memory filler")
    assert_all_ac(await stdio_job(sb, NEEDS_160_MB), "control: alone")
