"""Hostile code against both backends: every attempt ends in a clean ExecResult and the
sandbox stays healthy (the next call in the same one-worker pool still works)."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

import toolgym
from toolgym.errors import ToolgymError
from toolgym.sandbox import STATUSES, Limits, scripts
from toolgym.sandbox.protocol import ChannelClosed

REPO = Path(toolgym.__file__).resolve().parents[2]


LIST_PROCESSES = (
    "import os\nout = []\nfor p in sorted(int(p) for p in os.listdir('/proc') if p.isdigit()):\n"
    "    try:\n        uid = [l.split()[1] for l in open(f'/proc/{p}/status') if l.startswith('Uid:')][0]\n"
    "    except OSError:\n        continue\n    out.append((p, int(uid)))\nprint(out, os.getpid(), os.getuid())")


def healthy(sb) -> None:
    """The pool answers correctly, and the sandbox holds no process but the caller and what it held
    from its start: the executor (PID 1), its call template (root) and the two standing cleaners
    (real uids of their own: the two below the evaluator's, one below the program's)."""
    r = sb.run(LIST_PROCESSES)
    assert r.status == "ok", r
    procs, rest = r.stdout.rsplit("]", 1)
    me, run = (int(x) for x in rest.split())
    procs = eval(procs + "]")  # a list of (pid, uid) printed by the program above
    others = [(p, u) for p, u in procs if p != me]
    assert others[0] == (1, 0) and sorted(u for _, u in others) == [0, 0, run - 3, run - 2], \
        f"leftover processes in the sandbox: {procs}"


def test_runs_python_with_stdin_and_exit_code(sb):
    r = sb.run("import sys\ndata = sys.stdin.read()\nprint(data.upper())\nsys.exit(3)", stdin="abc")
    assert (r.status, r.exit_code, r.stdout) == ("error", 3, "ABC\n")
    r = sb.run("print(6 * 7)")
    assert (r.status, r.exit_code, r.stdout) == ("ok", 0, "42\n")
    assert r.status in STATUSES


def test_uncaught_exception_is_an_error_with_traceback(sb):
    r = sb.run("def f():\n    raise KeyError('boom')\nf()")
    assert r.status == "error" and r.exit_code == 1
    assert "KeyError: 'boom'" in r.stderr and "main.py" in r.stderr
    assert "executor" not in r.stderr  # no frames of the executor leak into the traceback


def test_unknown_language_raises_with_the_list(sb):
    with pytest.raises(ToolgymError) as exc:
        sb.run("fn main() {}", language="rust")
    assert isinstance(exc.value, ValueError)
    assert "python" in str(exc.value) and "cpp" in str(exc.value)


def test_malformed_requests_get_error_replies_and_the_sandbox_survives(sb):
    discarded = sb.stats()["discarded"]
    for req in ({"op": "nope"}, {"op": "run", "code": 5}, {"op": "run", "code": "1", "language": "cobol"},
                {"op": "run", "code": "1", "files": {"../escape": "eA=="}},
                {"op": "run", "code": "1", "files": {"/etc/x": "eA=="}},
                {"op": "run", "code": "1", "limits": {"timeout_s": "soon"}},
                {"op": "run", "code": "1", "files": ["not", "a", "dict"]},
                {"op": "run", "code": "1", "files": {"a": "not base64!"}},
                {"op": "session_run", "code": "1", "limits": "fast"}):
        resp = sb.raw_call(req)
        assert resp["ok"] is False and resp["error"], req
    assert sb.stats()["discarded"] == discarded  # refused cleanly, no sandbox was lost
    # bytes that are not JSON at all, straight onto the worker's stream
    pool = sb._pool
    worker = pool.acquire()
    try:
        body = b"\xff\xfenot json"
        worker.channel.send_bytes(struct.pack(">I", len(body)) + body)
        resp = worker.channel.recv(time.monotonic() + 10)
        assert resp["ok"] is False and "malformed" in resp["error"]
    except ChannelClosed as exc:  # pragma: no cover - would be a bug
        pytest.fail(f"executor died on a malformed frame: {exc}")
    finally:
        pool.release(worker)
    healthy(sb)


def test_bad_file_names_are_refused_on_the_host(sb):
    for name in ("../x", "/etc/passwd", "a/../../b", ""):
        with pytest.raises(ValueError):
            sb.run("pass", files={name: "x"})
    r = sb.run("print(open('d/in.txt').read()); open('out.bin', 'wb').write(b'\\xffok')",
               files={"d/in.txt": "hello", "raw.bin": b"\x00\x01"}, return_files=["out.bin", "missing"])
    assert r.status == "ok" and r.stdout == "hello\n"
    assert r.files == {"out.bin": "\ufffdok"}


def test_binary_and_non_utf8_output_is_decoded_with_replacement(sb):
    r = sb.run("import sys\nsys.stdout.buffer.write(bytes(range(256)))\nsys.stderr.buffer.write(b'\\xc3\\x28')")
    assert r.status == "ok"
    assert "\ufffd" in r.stdout and r.stdout.startswith("\x00\x01\x02")
    assert "\ufffd" in r.stderr


def test_huge_output_is_truncated_and_flagged(sb):
    r = sb.run("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)")
    assert r.status == "output_limit" and r.stdout_truncated
    assert len(r.stdout) == sb.limits.output_bytes
    r = sb.run("import sys\nprint('y' * 100, flush=True)\nsys.stderr.write('e' * 10**6)")
    assert r.status == "output_limit" and r.stderr_truncated and not r.stdout_truncated
    assert r.stdout == "y" * 100 + "\n"
    healthy(sb)


@pytest.mark.slow
def test_stdin_that_is_waited_on_forever_hits_the_timeout(sb):
    t0 = time.monotonic()
    r = sb.run("import sys\nfor line in iter(sys.stdin.readline, 'never'):\n    pass", stdin="a\n",
               limits=Limits(timeout_s=1))
    assert r.status == "timeout"
    assert time.monotonic() - t0 < 30
    r = sb.run("import sys\nprint(repr(sys.stdin.read()))")  # empty stdin reads EOF, never blocks
    assert r.stdout == "''\n"


@pytest.mark.slow
def test_infinite_loop_times_out_and_cpu_limit_applies(sb):
    r = sb.run("while True:\n    pass", limits=Limits(timeout_s=1))
    assert r.status == "timeout" and r.exit_code is not None
    r = sb.run("while True:\n    pass", limits=Limits(timeout_s=20, cpu_s=1))
    assert r.status == "timeout"  # SIGXCPU from RLIMIT_CPU, long before the wall limit
    assert r.duration_s < 15
    healthy(sb)


@pytest.mark.slow
def test_fork_bomb_is_contained(sb):
    r = sb.run("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
               limits=Limits(timeout_s=2))
    assert r.status in ("timeout", "error", "killed"), r
    healthy(sb)
    r = sb.run(":(){ :|:& };:", language="bash", limits=Limits(timeout_s=2))
    assert r.status in ("timeout", "error", "killed", "ok"), r
    healthy(sb)


@pytest.mark.slow
def test_memory_bombs_report_oom(sb):
    r = sb.run("x = bytearray(10 ** 10)")
    assert r.status == "oom", r
    r = sb.run("chunks = []\nwhile True:\n    chunks.append(bytearray(10 ** 7))")
    assert r.status == "oom", r
    # children each below RLIMIT_AS, together far above the sandbox's cgroup limit
    code = ("import os, time\npids = []\nfor _ in range(6):\n    pid = os.fork()\n    if pid == 0:\n"
            "        b = b'x' * (200 * 2**20)\n        time.sleep(30)\n        os._exit(0)\n    pids.append(pid)\n"
            "for p in pids:\n    os.waitpid(p, 0)\n")
    discarded = sb.stats()["discarded"]
    r = sb.run(code, limits=Limits(timeout_s=5, memory_mb=256))
    assert r.status == "oom", r  # the kernel's OOM killer, seen through the cgroup
    assert sb.stats()["discarded"] == discarded + 1  # an OOM-killed sandbox is replaced
    healthy(sb)


def test_disk_fill_is_bounded(sb):
    r = sb.run("f = open('big', 'wb')\nwhile True:\n    f.write(b'x' * 2**20)")
    assert r.status in ("error", "killed"), r  # RLIMIT_FSIZE: SIGXFSZ
    r = sb.run("import os\ni = 0\nwhile True:\n    open(f'/tmp/f{i}', 'wb').write(b'x' * 2**19)\n    i += 1")
    assert r.status in ("error", "oom"), r  # tmpfs full (or its memory charged to the cgroup)
    assert "No space left" in r.stderr or r.status == "oom"
    healthy(sb)
    # the previous call's files are gone (an interpreter living under /tmp, e.g. in a CI clone, is
    # re-exposed read-only there: its top dir is the only entry allowed)
    r = sb.run("import os, sys\n"
               "print([e for e in os.listdir('/tmp') if not sys.prefix.startswith('/tmp/' + e + '/')],"
               " os.listdir('.'))")
    assert r.stdout == "[] ['main.py']\n"


def test_double_forked_daemon_dies_with_its_call(sb):
    code = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            "        os.close(1); os.close(2)\n        time.sleep(1000)\n    os._exit(0)\nprint('parent done')\n")
    t0 = time.monotonic()
    r = sb.run(code, limits=Limits(timeout_s=10))
    assert r.status == "ok" and r.stdout == "parent done\n"
    assert time.monotonic() - t0 < 8  # the call ends with its main process, not at the timeout
    healthy(sb)


def test_no_network(sb):
    code = ("import socket\nfor host in [('1.1.1.1', 53), ('8.8.8.8', 443)]:\n    try:\n"
            "        socket.create_connection(host, timeout=2)\n        print('CONNECTED')\n"
            "    except OSError as e:\n        print('blocked', type(e).__name__)\n"
            "print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))")
    r = sb.run(code)
    assert "CONNECTED" not in r.stdout
    assert r.stdout.strip().endswith("['lo']"), r.stdout


def test_docker_socket_and_host_files_are_out_of_reach(sb):
    code = (f"import os\nfor p in ['/var/run/docker.sock', '/run/docker.sock', {str(REPO / 'pyproject.toml')!r},"
            f" {str(REPO / 'src')!r}]:\n    print(p, os.path.exists(p))\n"
            "try:\n    open('/etc/shadow').read()\n    print('SHADOW READ')\nexcept OSError as e:\n"
            "    print('shadow', type(e).__name__)\n"
            "try:\n    open('/etc/passwd', 'a')\n    print('WROTE')\nexcept OSError as e:\n    print('rofs', type(e).__name__)\n"
            "print('uid', os.getuid())")
    r = sb.run(code)
    assert r.status == "ok", r
    assert " True" not in r.stdout, r.stdout
    assert "SHADOW READ" not in r.stdout and "WROTE" not in r.stdout
    assert "uid 0" not in r.stdout


def test_signals_aimed_at_the_executor_do_nothing(sb):
    for sig in ("SIGKILL", "SIGTERM", "SIGSTOP", "SIGINT"):
        r = sb.run(f"import os, signal\nos.kill(1, signal.{sig})\nprint('sent')")
        assert r.status in ("ok", "error"), r
        healthy(sb)
    r = sb.run("import os, signal\nos.kill(-1, signal.SIGKILL)")  # kill everything it may
    assert r.status in ("killed", "ok", "error"), r
    healthy(sb)
    # the executor's stream is not reachable through /proc
    r = sb.run("open('/proc/1/fd/1', 'wb').write(b'forged')")
    assert r.status == "error" and ("PermissionError" in r.stderr or "FileNotFoundError" in r.stderr), r
    healthy(sb)


def test_cpp_and_bash(sb):
    r = sb.run("#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}",
               language="cpp", stdin="40 2")
    assert (r.status, r.stdout) == ("ok", "42\n"), r
    r = sb.run("int main() { return undefined_name; }", language="cpp")
    assert r.status == "error" and "undefined_name" in r.stderr
    r = sb.run("#include <cstdlib>\nint main(){ return 7; }", language="cpp")
    assert (r.status, r.exit_code) == ("error", 7)
    r = sb.run('read x; echo "got $x $1"; exit 5', language="bash", stdin="in\n", argv=["arg1"])
    assert (r.status, r.exit_code, r.stdout) == ("error", 5, "got in arg1\n")


def test_argv_reaches_python(sb):
    r = sb.run("import sys\nprint(sys.argv[1:])", argv=["a", "b c"])
    assert r.stdout == "['a', 'b c']\n"


def test_a_programs_own_module_named_like_a_script_is_the_one_it_imports(sb):
    """The executor's own modules (common, frames, limits, forkserver) are not what a program imports:
    its own file of that name is, in a call and in a session (they used to shadow it: `import common`
    gave the executor's)."""
    own = {f"{m}.py": f"MINE = {m!r}\n" for m in ("common", "frames", "limits", "forkserver")}
    r = sb.run("import common, frames, forkserver, limits\nprint(common.MINE, frames.MINE, forkserver.MINE, limits.MINE)",
               files=own)
    assert (r.status, r.stdout) == ("ok", "common frames forkserver limits\n"), r.stderr
    listed = "import sys\nprint(sorted(n for n in ('common', 'frames', 'limits', 'forkserver') if n in sys.modules))"
    assert sb.run(listed).stdout == "[]\n"
    session = sb.session()
    try:
        assert session.run(listed).stdout == "[]\n"
    finally:
        session.close()
    healthy(sb)


def test_no_program_of_the_judge_sees_the_scripts_modules(sb):
    """The judge's test processes (children of the zygote, a fork server: it takes the scripts' modules out
    of sys.modules once, before it serves) hold none of them either: a stdio program, and a function-mode
    program, whose tests read what it found."""
    from toolgym.sandbox.judging import TestCase, judge

    names = tuple(sorted(p.stem for p in Path(scripts.HERE).glob("*.py")))  # every script, the split ones included
    assert {"common", "frames", "zygote", "rpc", "kattis_validation"} <= set(names)
    found = f"import sys\nFOUND = sorted(n for n in {names!r} if n in sys.modules)\n"
    r = judge(sb, found + "print(FOUND)\n", [TestCase(input="", output="[]\n")], mode="stdio")
    assert r.all_passed, r.verdicts
    r = judge(sb, found + "def found():\n    return FOUND\n", [TestCase(code="assert found() == [], found()")],
              mode="function")
    assert r.all_passed, r.verdicts
    healthy(sb)


def test_nothing_passes_from_one_call_to_the_next(sb):
    discarded = sb.stats()["discarded"]
    plant = ("import os\nfor d in ['/tmp', '/var/tmp', '/dev/shm', '/dev/mqueue', '.']:\n    try:\n"
             "        open(os.path.join(d, 'planted'), 'w').write('secret')\n    except OSError:\n        pass\n"
             "os.makedirs('locked/inner')\nopen('locked/inner/f', 'w').write('x')\n"
             "os.chmod('locked/inner', 0)\nos.chmod('locked', 0)\nos.chmod('.', 0)\nprint('planted')")
    assert sb.run(plant).stdout == "planted\n"
    look = ("import os\nfor d in ['/tmp', '/var/tmp', '/dev/shm', '/dev/mqueue', '..']:\n    try:\n"
            "        print(d, sorted(os.listdir(d)))\n    except OSError as e:\n        print(d, type(e).__name__)\n"
            "print('cwd', os.path.basename(os.getcwd()))")
    r = sb.run(look)
    assert r.status == "ok", r
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert "planted" not in r.stdout, r.stdout
    assert lines[".."] == f"['{lines['cwd']}']", r.stdout  # only this call's own work dir
    assert sb.stats()["discarded"] == discarded
