"""The local backend's hardening, checked for real (bubblewrap, the kernel, no mocks).

Most tests build the sandbox's bwrap argv with the backend's own functions and run a
small Python program inside it directly, so they hold whatever the executor does:
the allowlisted mounts, the capabilities, the seccomp filter (each denied syscall is
called through ctypes and must fail with EPERM, against an unfiltered run of the same
sandbox that shows the filter made the difference), user namespaces, /dev/shm, the
non-root and no-cgroup refusals. The tests at the end go through `open_sandbox("local")`,
so they also need the executor (which runs calls as its sandbox's own unprivileged uid).

They need root on x86_64 (the local backend refuses anything else); without root they
are skipped, or fail when CI is set.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import toolgym
from tests.requirements import need
from toolgym.errors import SandboxUnavailable
from toolgym.sandbox import Limits, cgroups, local_backend, open_sandbox, seccomp
from toolgym.sandbox.local_backend import CAPS, NOT_ROOT, bwrap_prefix

REPO = Path(toolgym.__file__).resolve().parents[2]
X86_64 = platform.machine() == "x86_64"
CAP_BITS = {"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_FOWNER": 3, "CAP_KILL": 5, "CAP_SETGID": 6,
            "CAP_SETUID": 7}
SIX_CAPS = sum(1 << CAP_BITS[c] for c in CAPS)
UNISTD = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")


def _need_root_sandbox() -> dict:
    why = None
    if not X86_64:
        why = f"the local sandbox is x86_64 only (this is {platform.machine()})"
    elif os.geteuid() != 0:
        why = "the local sandbox runs only as root"
    else:
        tool = local_backend.probe()
        if tool["tool"] is None:
            why = f"the local sandbox is unavailable: {tool['why']}"
        else:
            return tool
    need(False, f"the local hardening tests cannot run: {why}")


@pytest.fixture(scope="module")
def tool() -> dict:
    return _need_root_sandbox()


def run_inside(tool: dict, code: str, *, filtered: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run `python -I -c code` in the local sandbox exactly as the backend builds it (without a
    cgroup), as the sandbox's root with the executor's capabilities."""
    keep = local_backend._keep_dirs(sys.executable)
    fd = seccomp.program_fd()
    try:
        argv = bwrap_prefix(tool["path"], tool["setpriv"], keep, local_backend._workroot(keep), 16, 16, fd)
        if not filtered:  # the control: the same sandbox without the filter
            i = argv.index("--seccomp")
            del argv[i:i + 2]
        return subprocess.run([*argv, sys.executable, "-I", "-c", code], capture_output=True, text=True,
                              timeout=timeout, pass_fds=(fd,), env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    finally:
        os.close(fd)


def inside_json(tool: dict, code: str, **kw) -> dict:
    r = run_inside(tool, "import json\n" + code, **kw)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- the BPF program
def test_seccomp_numbers_match_the_x86_64_syscall_table():
    need(UNISTD.is_file(), f"{UNISTD} missing (apt-get install linux-libc-dev)")
    table = dict(re.findall(r"#define __NR_(\w+)\s+(\d+)", UNISTD.read_text()))
    checked = 0
    for name, nr in seccomp.SYSCALLS_X86_64.items():
        if name in table:
            assert int(table[name]) == nr, name
            checked += 1
        else:  # newer than these headers
            assert nr > max(int(v) for v in table.values()), name
    assert checked >= len(seccomp.SYSCALLS_X86_64) - 1


def test_seccomp_program_shape():
    raw = seccomp.program()
    assert len(raw) % 8 == 0 and len(raw) // 8 < 256
    insns = seccomp.decode(raw)
    assert insns[0] == (seccomp.BPF_LD_W_ABS, 0, 0, seccomp.OFF_ARCH)
    assert insns[1][0] == seccomp.BPF_JEQ_K and insns[1][3] == seccomp.AUDIT_ARCH_X86_64
    for i, (code, jt, jf, _k) in enumerate(insns):  # every jump lands inside the program
        if code & 0x07 == 0x05:
            assert i + 1 + max(jt, jf) < len(insns)
    assert insns[-1][0] == seccomp.BPF_RET_K
    ev, nr = seccomp.evaluate, seccomp.SYSCALLS_X86_64
    eperm = seccomp.SECCOMP_RET_ERRNO | errno.EPERM
    for name in seccomp.DENY_EPERM:
        assert ev(raw, nr[name]) == eperm, name
    assert ev(raw, nr["clone3"]) == seccomp.SECCOMP_RET_ERRNO | errno.ENOSYS
    enolck = seccomp.SECCOMP_RET_ERRNO | errno.ENOLCK
    assert ev(raw, nr["flock"], (3, 1)) == enolck
    for cmd in (6, 7, 37, 38):  # F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW
        assert ev(raw, nr["fcntl"], (3, cmd)) == enolck, cmd
    for cmd in (1, 3, 4, 5, 36):  # F_GETFD F_GETFL F_SETFL F_GETLK F_OFD_GETLK
        assert ev(raw, nr["fcntl"], (3, cmd)) == seccomp.SECCOMP_RET_ALLOW, cmd
    for cmd in (1024, 1026):  # F_SETLEASE, F_NOTIFY: watches on a shared inode (round-6 y05)
        assert ev(raw, nr["fcntl"], (3, cmd)) == eperm, cmd
    assert ev(raw, nr["io_setup"], (1, 0)) == seccomp.SECCOMP_RET_ERRNO | errno.ENOSYS
    for flag in (0x80, 0x20000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000):
        assert ev(raw, nr["clone"], (flag | 0x11,)) == eperm, hex(flag)
    assert ev(raw, nr["personality"], (8,)) == eperm
    # honest calls pass
    allow = seccomp.SECCOMP_RET_ALLOW
    assert ev(raw, nr["clone"], (0x01200011,)) == allow  # glibc fork: CLONE_CHILD_SETTID|CLEARTID|SIGCHLD
    assert ev(raw, nr["clone"], (0x003D0F00,)) == allow  # pthread_create's flags
    assert ev(raw, nr["personality"], (0xFFFFFFFF,)) == allow and ev(raw, nr["personality"], (0,)) == allow
    for honest in (0, 1, 39, 57, 59, 61, 231, 434):  # read write getpid fork execve wait4 exit_group pidfd_open
        assert ev(raw, honest) == allow, honest
    # another ABI: 32-bit calls are killed, x32 numbers refused
    assert ev(raw, 1, arch=0x40000003) == seccomp.SECCOMP_RET_KILL_PROCESS
    assert ev(raw, 0x40000000 | 272) == eperm and ev(raw, 0x40000000 | 39) == eperm


def test_bwrap_argv_is_an_allowlist(tool):
    keep = local_backend._keep_dirs(sys.executable)
    argv = bwrap_prefix(tool["path"], tool["setpriv"], keep, local_backend._workroot(keep), 16, 16, 9)
    pairs = [(argv[i], argv[i + 1]) for i in range(len(argv) - 1)]
    assert ("--ro-bind", "/") not in pairs and "--bind" not in argv and "--unshare-user" not in argv
    assert "--die-with-parent" not in argv and ("--seccomp", "9") in pairs
    binds = {argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind" and not argv[i + 2].startswith("/proc/")}
    assert {argv[i + 2] for i, a in enumerate(argv) if a == "--ro-bind" and argv[i + 1] == "/dev/null"} <= {
        f"/proc/{p}" for p in local_backend.PROC_MASK}
    assert binds == {"/usr", "/etc", *keep, *(d for d in local_backend.USR_LINKS
                                               if os.path.isdir(d) and not os.path.islink(d))}
    for d in keep:  # the interpreter's prefix itself, nothing above it
        assert str(REPO) != d and not str(REPO).startswith(d + "/")
    assert argv[argv.index("--cap-drop") + 1] == "ALL"


# ----------------------------------------------------------------------------- seccomp, for real
CLONE_THREAD = 0x10000
NS_FLAGS = {"NEWNS": 0x20000, "NEWCGROUP": 0x02000000, "NEWUTS": 0x04000000, "NEWIPC": 0x08000000,
            "NEWUSER": 0x10000000, "NEWPID": 0x20000000, "NEWNET": 0x40000000, "NEWTIME": 0x80}
AT_FDCWD = -100
# harmless arguments: unfiltered, each of these fails on its own arguments, or the kernel's
# capability check, or does something confined to a throwaway child (a key lookup, an O_PATH fd)
DENIED = {
    "unshare": [0x10000000], "setns": [-1, 0], "mount": [0, 0, 0, 0, 0], "umount2": ["/nonexistent", 0],
    "pivot_root": [".", "."], "chroot": ["/"], "open_tree": [AT_FDCWD, "/", 0],
    "open_tree_attr": [AT_FDCWD, "/", 0, 0, 0], "move_mount": [-1, "", -1, "", 0], "fsopen": ["tmpfs", 0],
    "fsconfig": [-1, 0, 0, 0, 0], "fsmount": [-1, 0, 0], "fspick": [AT_FDCWD, "/", 0],
    "mount_setattr": [-1, "", 0, 0, 0], "ptrace": [0, 0, 0, 0], "process_vm_readv": ["pid", 0, 0, 0, 0, 0],
    "process_vm_writev": ["pid", 0, 0, 0, 0, 0], "pidfd_getfd": [-1, 0, 0], "kexec_load": [0, 0, 0, 0],
    "kexec_file_load": [-1, -1, 0, 0, 0], "init_module": [0, 0, ""], "finit_module": [-1, "", 0],
    "delete_module": ["toolgym_none", 0], "bpf": [0x7FFF, 0, 0], "perf_event_open": [0, 0, -1, -1, 0],
    "userfaultfd": [0], "keyctl": [0, -2, 0], "add_key": ["toolgym-none", "x", 0, 0, -2],
    "request_key": ["user", "toolgym-none", 0, 0], "reboot": [0, 0, 0, 0], "swapon": [0, 0], "swapoff": [0],
    "open_by_handle_at": [-1, 0, 0], "name_to_handle_at": [AT_FDCWD, "/", 0, 0, 0],
    "io_uring_setup": [1, 0], "io_uring_enter": [-1, 0, 0, 0, 0, 0], "io_uring_register": [-1, 0, 0, 0],
    "quotactl": [0, 0, 0, 0], "acct": [0], "settimeofday": [0, 0], "clock_settime": [0, 0],
    "adjtimex": ["buf"], "iopl": [0], "ioperm": [0, 0, 0], "syslog": [10, 0, 0], "personality": [8],
    "vhangup": [], "lookup_dcookie": [0, 0, 0], "clone3": [0, 0],
    **{f"clone({f})": [v | CLONE_THREAD, 0, 0, 0, 0] for f, v in NS_FLAGS.items()},
}
HONEST = {"getpid": [], "personality(query)": [0xFFFFFFFF], "personality(0)": [0],
          "clone(CLONE_THREAD)": [CLONE_THREAD, 0, 0, 0, 0]}
# unfiltered, these do not fail with EPERM on any kernel >= 5.6 whatever its sysctls: the
# filter is what makes them fail (clone(NEW*|CLONE_THREAD) is an EINVAL, before any namespace check)
NOT_EPERM_UNFILTERED = ("setns", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "personality", "keyctl",
                        "open_tree", "clone3", *(f"clone({f})" for f in NS_FLAGS))

PROBE = r"""
import ctypes, json, os, sys
CASES, NRS, UID = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
if UID:
    os.setgroups([]); os.setgid(UID); os.setuid(UID)

def arg(a):
    if a == "pid":
        return ctypes.c_long(os.getpid())
    if a == "buf":
        return ctypes.create_string_buffer(1024)
    if isinstance(a, str):
        return ctypes.c_char_p(a.encode())
    return ctypes.c_long(a)

def one(name, args):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # each call in a throwaway child
        os.close(r)
        ctypes.set_errno(0)
        ret = libc.syscall(ctypes.c_long(NRS[name]), *[arg(a) for a in args])
        os.write(w, json.dumps([ret, ctypes.get_errno() if ret == -1 else 0]).encode())
        os._exit(0)
    os.close(w)
    data = os.read(r, 200)
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data) if data else ["died", 0]

print(json.dumps({name: one(name, args) for name, args in CASES.items()}))
"""


def _probe_syscalls(tool: dict, cases: dict, uid: int = 0, filtered: bool = True) -> dict:
    nrs = {name: seccomp.SYSCALLS_X86_64.get(name.split("(")[0], {"getpid": 39}.get(name)) for name in cases}
    r = run_inside(tool, f"import sys; sys.argv[1:] = [{json.dumps(json.dumps([cases, nrs, uid]))}]\n" + PROBE,
                   filtered=filtered)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("uid", [0, 65534], ids=["sandbox-root", "uid-65534"])
def test_every_denied_syscall_fails_inside_the_sandbox(tool, uid):
    got = _probe_syscalls(tool, DENIED, uid)
    want = {name: [-1, errno.ENOSYS if name == "clone3" else errno.EPERM] for name in DENIED}
    assert got == want
    honest = _probe_syscalls(tool, HONEST, uid)  # the control: ordinary calls still reach the kernel
    assert honest["getpid"][0] > 0 and honest["personality(query)"][0] >= 0 and honest["personality(0)"][0] >= 0
    assert honest["clone(CLONE_THREAD)"] == [-1, errno.EINVAL]  # refused by the kernel, not the filter


def test_without_the_filter_the_same_calls_behave_differently(tool):
    """The same sandbox without --seccomp: what EPERM above comes from the filter, not the caps."""
    filtered = _probe_syscalls(tool, DENIED)
    bare = _probe_syscalls(tool, DENIED, filtered=False)
    differ = sorted(n for n in DENIED if bare[n] != filtered[n])
    assert set(NOT_EPERM_UNFILTERED) <= set(differ), (differ, bare)


def test_user_namespaces_cannot_be_made_inside(tool):
    code = ("import json, os, subprocess, threading\n"
            "def sh(*cmd, uid=0):\n"
            "    pre = (lambda: (os.setgroups([]), os.setgid(uid), os.setuid(uid))) if uid else None\n"
            "    r = subprocess.run(list(cmd), capture_output=True, text=True, preexec_fn=pre)\n"
            "    return [r.returncode, r.stderr.strip()[-120:]]\n"
            "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"  # clone3 -> ENOSYS -> clone
            "print(json.dumps({'Ur': sh('unshare', '-Ur', 'true'), 'U': sh('unshare', '-U', 'true'),\n"
            "  'Ur_nobody': sh('unshare', '-Ur', 'true', uid=65534), 'nm': sh('unshare', '-m', 'true'),\n"
            "  'true': sh('true'), 'true_nobody': sh('sh', '-c', 'id -u', uid=65534)}))")
    out = inside_json(tool, code)
    for attack in ("Ur", "U", "Ur_nobody", "nm"):
        assert out[attack][0] != 0 and "Operation not permitted" in out[attack][1], out
    assert out["true"] == [0, ""] and out["true_nobody"][0] == 0  # honest processes (fork, exec, threads)


# ----------------------------------------------------------------------------- capabilities
def test_capabilities_are_exactly_the_executors_six(tool):
    code = ("import json, os\n"
            "def st():\n"
            "    return {k: v.strip() for k, _, v in (l.partition(':') for l in open('/proc/self/status'))}\n"
            "s = st()\n"
            "open('/tmp/f', 'w').close(); os.chown('/tmp/f', 65534, 65534)\n"  # CAP_CHOWN works
            "os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"  # CAP_SETUID/SETGID work
            "u = st()\n"
            "print(json.dumps({'root': s, 'nobody': u, 'owner': os.stat('/tmp/f').st_uid}))")
    out = inside_json(tool, code)
    root, nobody = out["root"], out["nobody"]
    assert int(root["CapEff"], 16) == SIX_CAPS == 0xEB
    assert int(root["CapPrm"], 16) == SIX_CAPS and int(root["CapBnd"], 16) == SIX_CAPS
    assert int(root["CapInh"], 16) == 0 and int(root["CapAmb"], 16) == 0
    assert (root["NoNewPrivs"], root["Seccomp"], root["Uid"].split()[0]) == ("1", "2", "0")
    assert int(nobody["CapEff"], 16) == 0 and int(nobody["CapPrm"], 16) == 0
    assert out["owner"] == 65534


# ----------------------------------------------------------------------------- the filesystem
def _toolgym_home() -> Path:
    from toolgym._assets.cache import cache_root

    return cache_root()


def test_host_files_outside_the_allowlist_are_absent(tool, tmp_path):
    planted = Path("/tmp") / f"toolgym-hardening-{os.getpid()}"
    planted.write_text("host secret")
    home = _toolgym_home()
    keep = local_backend._keep_dirs(sys.executable)
    workroot = local_backend._workroot(keep)
    # the dirs above the interpreter's prefixes hold nothing but the way down to them
    skeleton: dict[str, set[str]] = {}
    for d in [*keep, workroot]:
        for parent, child in zip(Path(d).parents, [Path(d), *Path(d).parents], strict=False):
            if str(parent) != "/":
                skeleton.setdefault(str(parent), set()).add(child.name)
    try:
        paths = [str(REPO / "pyproject.toml"), str(REPO / "src"), str(REPO / ".git"), "/root/.cache", str(home),
                 os.path.expanduser("~/.cache"), "/home", "/run/docker.sock", "/var", "/mnt", "/srv", "/media",
                 "/opt", "/boot", "/sys/kernel", "/sys/fs/cgroup/memory", str(planted), str(tmp_path)]
        code = (f"import json, os\npaths = {paths!r}\n"
                "mounts = [l.split()[4] for l in open('/proc/self/mountinfo')]\n"
                f"skel = {sorted(skeleton)!r}\n"
                "print(json.dumps({'exists': {p: os.path.exists(p) for p in paths}, 'mounts': mounts,\n"
                "  'skeleton': {d: sorted(os.listdir(d)) for d in skel},\n"
                "  'passwd': open('/etc/passwd').read()[:4], 'cwd': os.getcwd(), 'listing': sorted(os.listdir('/'))}))")
        out = inside_json(tool, code)
    finally:
        planted.unlink()
    assert not any(out["exists"].values()), out["exists"]
    assert out["skeleton"] == {d: sorted(names) for d, names in skeleton.items()}
    allowed = {"/", "/usr", "/etc", "/proc", "/dev", "/tmp", workroot, *keep,
               *(d for d in local_backend.USR_LINKS if os.path.isdir(d) and not os.path.islink(d))}
    extra = [m for m in out["mounts"] if m not in allowed and not m.startswith(("/proc/", "/dev/"))]
    assert not extra, f"mounts outside the allowlist: {extra}"
    # honest control: the system and the interpreter are there
    assert out["passwd"] == "root" and out["cwd"] == workroot
    assert set(out["listing"]) <= {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "proc", "dev",
                                   "tmp", "work", "run", "sys", *(Path(k).parts[1] for k in keep)}


def test_nothing_but_the_scratch_dirs_is_writable(tool):
    keep = local_backend._keep_dirs(sys.executable)
    workroot = local_backend._workroot(keep)
    # and whichever of /work and /run is not the work root (a venv under /work moves it to /run)
    targets = ["/", "/etc", "/usr", "/usr/bin", "/dev", "/proc/sys/kernel", keep[0], "/work" if
               workroot.startswith("/run/") else "/run"]
    code = (f"import json, os\nres = {{}}\nfor d in {[*targets, '/tmp', workroot, '/dev/shm']!r}:\n"
            "    try:\n        open(os.path.join(d, 'planted'), 'w').close(); res[d] = 'written'\n"
            "    except OSError as e:\n        res[d] = e.strerror\n"
            "for f in ('/proc/sys/kernel/hostname', '/proc/sys/vm/swappiness', '/sys/fs/cgroup/memory/x'):\n"
            "    try:\n        fd = os.open(f, os.O_WRONLY | os.O_CREAT)\n        os.write(fd, b'1')\n"
            "        res[f] = 'written'\n    except OSError as e:\n        res[f] = e.strerror\n"
            "res['name'] = os.uname().nodename\nprint(json.dumps(res))")
    out = inside_json(tool, code)  # as the sandbox's root, which holds CAP_DAC_OVERRIDE
    for d in [*targets, "/proc/sys/kernel/hostname", "/proc/sys/vm/swappiness", "/sys/fs/cgroup/memory/x"]:
        assert out[d] != "written", (d, out)
    assert out["/tmp"] == out[workroot] == out["/dev/shm"] == "written"  # the control
    assert out["name"] == "sandbox"


def test_dev_shm_is_not_the_hosts(tool):
    host_shm = Path("/dev/shm")
    if not host_shm.is_dir():
        pytest.skip("this host has no /dev/shm")
    planted = host_shm / f"toolgym-hardening-{os.getpid()}"
    planted.write_text("host")
    try:
        code = (f"import json, os\nseen = os.path.exists({str(planted)!r})\n"
                "open('/dev/shm/from-inside-%d' % os.getpid(), 'w').write('x')\n"
                "print(json.dumps({'seen': seen, 'listing': os.listdir('/dev/shm'), "
                "'dev': sorted(os.listdir('/dev'))}))")
        out = inside_json(tool, code)
    finally:
        planted.unlink()
    assert out["seen"] is False and out["listing"] == [n for n in out["listing"] if n.startswith("from-inside-")]
    assert not [p for p in host_shm.iterdir() if p.name.startswith("from-inside-")]
    assert set(out["dev"]) <= {"core", "fd", "full", "mqueue", "null", "ptmx", "pts", "random", "shm", "stderr",
                               "stdin", "stdout", "tty", "urandom", "zero"}, out["dev"]


# ----------------------------------------------------------------------------- refusals
def _as_nobody(code: str) -> str:
    """Run `code` (a function body returning a str) in a forked child as uid/gid 65534."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            scope: dict = {}
            exec("def f():\n" + "\n".join("    " + line for line in code.splitlines()), scope)
            out = scope["f"]()
        except BaseException as exc:  # noqa: BLE001
            out = f"child failed: {type(exc).__name__}: {exc}"
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode()


def test_non_root_gets_a_one_line_refusal():
    if not X86_64:
        pytest.skip("elsewhere the architecture is refused first")
    if os.geteuid() != 0:  # already not root: try it here
        with pytest.raises(SandboxUnavailable) as exc:
            local_backend.LocalBackend(Limits())
        assert str(exc.value) == NOT_ROOT
        return
    code = ("from toolgym.errors import SandboxUnavailable\n"
            "from toolgym.sandbox import Limits, open_sandbox\n"
            "from toolgym.sandbox.local_backend import LocalBackend\n"
            "out = []\n"
            "for make in (lambda: LocalBackend(Limits()), lambda: open_sandbox('local', pool_size=1)):\n"
            "    try:\n        make()\n        out.append('STARTED')\n"
            "    except SandboxUnavailable as e:\n        out.append(str(e))\n"
            "return '\\x00'.join(out)")
    out = _as_nobody(code).split("\x00")
    assert out == [NOT_ROOT, NOT_ROOT], out
    assert "\n" not in NOT_ROOT and "root" in NOT_ROOT and "docker" in NOT_ROOT
    # the honest control: root gets a sandbox
    _need_root_sandbox()
    with open_sandbox("local", Limits(timeout_s=5), pool_size=1, warm=False) as sb:
        assert sb.backend == "local"


def test_root_without_a_cgroup_is_refused_not_degraded(tool, tmp_path):
    """No memory/pids controllers (TOOLGYM_CGROUP_ROOT at an empty dir): refused, no rlimit-only fallback."""
    code = ("from toolgym.errors import SandboxUnavailable\nfrom toolgym.sandbox import Limits\n"
            "from toolgym.sandbox.local_backend import LocalBackend\n"
            "try:\n    LocalBackend(Limits()); print('STARTED')\nexcept SandboxUnavailable as e:\n    print(e)")
    env = {**os.environ, "TOOLGYM_CGROUP_ROOT": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    line = r.stdout.strip()
    assert r.returncode == 0 and "\n" not in line and "cgroup" in line and "docker" in line, (r.stdout, r.stderr)
    assert not list(tmp_path.iterdir())
    # the control: with the host's cgroups a backend is made, and its probe cgroup is gone again
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={k: v for k, v in os.environ.items() if k != "TOOLGYM_CGROUP_ROOT"})
    assert r.stdout.strip() == "STARTED", (r.stdout, r.stderr)


def test_probe_reports_bubblewrap_only(tool):
    assert tool["tool"] == "bwrap" and "unshare" not in json.dumps(tool)
    from toolgym.sandbox.doctor import local_status

    st = local_status()
    assert st["available"] and st["tool"] == "bwrap" and "seccomp filter" in st["isolation"]


# ----------------------------------------------------------------------------- through the executor
# These go through open_sandbox("local"), so they also need the executor that runs as the
# sandbox's root and hands calls to uid 65534.
@pytest.fixture(scope="module")
def local_sb(tool):
    box = open_sandbox("local", Limits(timeout_s=10, memory_mb=256, pids=64), pool_size=1)
    box.wait_ready(120)
    yield box
    box.close()


def test_executor_calls_run_filtered_and_unprivileged(local_sb):
    nr = seccomp.SYSCALLS_X86_64
    code = ("import ctypes, json, os, subprocess, threading\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "st = {k: v.strip() for k, _, v in (l.partition(':') for l in open('/proc/self/status'))}\n"
            "def sc(nr, *a):\n    r = libc.syscall(nr, *a)\n    return [r, ctypes.get_errno() if r == -1 else 0]\n"
            f"res = {{'unshare': sc({nr['unshare']}, 0x10000000), 'setns': sc({nr['setns']}, -1, 0),\n"
            f"       'ptrace': sc({nr['ptrace']}, 0, 0, 0, 0), 'bpf': sc({nr['bpf']}, 0x7fff, 0, 0),\n"
            f"       'io_uring_setup': sc({nr['io_uring_setup']}, 1, 0), 'keyctl': sc({nr['keyctl']}, 0, -2, 0)}}\n"
            "u = subprocess.run(['unshare', '-Ur', 'true'], capture_output=True)\n"
            "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
            "print(json.dumps({'res': res, 'uid': os.getuid(), 'seccomp': st['Seccomp'], 'nnp': st['NoNewPrivs'],\n"
            f"  'capeff': st['CapEff'], 'unshare_rc': u.returncode,\n"
            f"  'repo': os.path.exists({str(REPO / 'pyproject.toml')!r})}}))")
    r = local_sb.run(code)
    assert r.status == "ok", r
    out = json.loads(r.stdout)
    assert all(v == [-1, errno.EPERM] for v in out["res"].values()), out["res"]
    assert out["unshare_rc"] != 0 and out["repo"] is False
    # the sandbox's own program uid (sandbox.uids: far above any login uid, none shared with another sandbox)
    assert out["uid"] >= 1 << 24 and (out["seccomp"], out["nnp"], int(out["capeff"], 16)) == ("2", "1", 0)
    r = local_sb.run("unshare -Ur true; echo rc=$?; id -u", language="bash")
    assert "rc=0" not in r.stdout and r.stdout.strip().endswith(str(out["uid"])), r
    assert local_sb.run("print(6 * 7)").stdout == "42\n"  # the control


def test_no_file_lock_can_be_taken_on_the_hosts_files_shared_by_every_sandbox(local_sb):
    """Red team round 5, x06: /usr is the host's, bound by inode into every local sandbox, so a lock a
    solver took on a stdlib file (one per bit of its answer) was seen by a copier judged at the same time
    in another sandbox: AC. No lock can be taken now (ENOLCK); reading a lock's state and honest fcntl
    calls still work."""
    code = ("import errno, fcntl, json, os, struct\n"
            "fd = os.open(os.__file__, os.O_RDONLY)\n"
            "def tried(fn):\n    try:\n        fn()\n        return 0\n    except OSError as e:\n        return e.errno\n"
            "lk = struct.pack('hhqqi', fcntl.F_RDLCK, 0, 0, 0, 0)\n"
            "out = {'flock': tried(lambda: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)),\n"
            "       'setlk': tried(lambda: fcntl.fcntl(fd, fcntl.F_SETLK, lk)),\n"
            "       'ofd': tried(lambda: fcntl.fcntl(fd, fcntl.F_OFD_SETLK, lk)),\n"
            "       'getlk': tried(lambda: fcntl.fcntl(fd, fcntl.F_GETLK, lk)),\n"
            "       'getfl': tried(lambda: fcntl.fcntl(fd, fcntl.F_GETFL))}\n"
            "print(json.dumps(out))\n")
    r = local_sb.run(code)
    assert r.status == "ok", r
    out = json.loads(r.stdout)
    assert (out["flock"], out["setlk"], out["ofd"]) == (errno.ENOLCK,) * 3, out
    assert (out["getlk"], out["getfl"]) == (0, 0), out


def test_no_watch_can_be_set_on_the_hosts_files_shared_by_every_sandbox(local_sb):
    """Round-6 red team y05/y09/y03: an inotify or fanotify watch (or dnotify) on a /usr file saw another
    local sandbox open it (AC through the opens), and io_setup moved the host's AIO count that every sandbox
    reads. All are refused now."""
    code = ("import ctypes, errno, fcntl, json, os\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "def sc(r):\n    return 0 if r >= 0 else ctypes.get_errno()\n"
            "ctx = ctypes.c_ulong(0)\n"
            "fd = os.open(os.path.dirname(os.__file__), os.O_RDONLY)\n"
            "def notify():\n    try:\n        fcntl.fcntl(fd, fcntl.F_NOTIFY, fcntl.DN_ACCESS)\n        return 0\n"
            "    except OSError as e:\n        return e.errno\n"
            "print(json.dumps({'inotify': sc(libc.inotify_init1(0)), 'fanotify': sc(libc.fanotify_init(0, 0)),\n"
            "                  'dnotify': notify(), 'aio': sc(libc.syscall(206, 1, ctypes.byref(ctx)))}))\n")  # io_setup
    r = local_sb.run(code)
    assert r.status == "ok", r
    out = json.loads(r.stdout)
    assert out == {"inotify": errno.EPERM, "fanotify": errno.EPERM, "dnotify": errno.EPERM, "aio": errno.ENOSYS}, out


def test_local_worker_has_memory_and_pids_limits(local_sb):
    worker = local_sb._pool.acquire()
    try:
        cg = worker.cgroup
        assert cg is not None and cg.memory and cg.pids and cg.missing() is None
        assert worker.proc is not None and set(cg.pids_in())  # the sandbox's processes are inside
        assert any(str(d).endswith(cg.name) for d in cg.dirs.values())
    finally:
        local_sb._pool.release(worker)
    assert local_sb.run("print('ok')").stdout == "ok\n"


def test_closing_removes_the_cgroups(tool):
    def ours() -> set[str]:
        return {str(p) for p in cgroups.list_all() if p.name.startswith(f"{os.getpid()}-")}

    before = ours()
    box = open_sandbox("local", Limits(timeout_s=5), pool_size=1)
    box.wait_ready(120)
    mine = ours() - before
    assert mine and box.run("print(1)").stdout == "1\n"
    box.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and ours() & mine:
        time.sleep(0.1)
    assert not ours() & mine


def test_threads_can_start_sandboxes_concurrently(tool):
    """The seccomp fd is passed per Popen (pass_fds): parallel starts each get their own."""
    errors: list[str] = []
    workers: list = []
    fds_before = set(os.listdir("/proc/self/fd"))

    def start():
        try:
            workers.append(local_backend.LocalWorker(Limits(timeout_s=5), tool))
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc))

    threads = [threading.Thread(target=start) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert not errors and len(workers) == 3
        for w in workers:
            assert w.call({"op": "ping"}, 30).get("ok")
    finally:
        for w in workers:
            w.close()
    assert set(os.listdir("/proc/self/fd")) <= fds_before  # no seccomp pipe or sandbox pipe left open
