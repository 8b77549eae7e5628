"""The scripts injected into sandboxes share one of each thing (issue 27 item 5): one frame codec and one
MAX_FRAME (injected/frames.py, which the host imports too), one definition of each shared limit
(injected/limits.py), and the bootstrap that ships each script with the modules it imports. No sandbox
needed: the codec runs on the host as it does in the sandbox."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolgym.sandbox import protocol, scripts, types
from toolgym.sandbox.injected import frames, limits

INJECTED = Path(scripts.HERE)
SANDBOX = INJECTED.parent
# every file that speaks a frame: the scripts in the sandbox and the host's end of the executor's stream
SPEAKERS = sorted(INJECTED.glob("*.py")) + [SANDBOX / "protocol.py"]
LENGTH_FORMATS = {">I", "!I", ">L", "!L", "I", "=I", "<I"}  # a 4-byte length in any byte order


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------ the codec
def test_frames_round_trip_through_a_buffer_and_a_pipe() -> None:
    objs = [{"op": "ping"}, {"code": "print('é ✓')", "stdin": "\ud800 lone surrogate"}, {}]
    buf = bytearray(b"".join(frames.encode(o) for o in objs))
    buf += frames.encode({"half": True})[:7]
    got = []
    while (body := frames.take(buf)) is not None:
        got.append(body)
    assert [frames.HEAD.unpack(frames.encode(o)[:4])[0] for o in objs] == [len(b) for b in got]
    assert len(buf) == 7  # the incomplete frame waits for the rest
    r, w = os.pipe()
    try:
        frames.write(w, frames.frame(b"tag and text") + frames.encode(objs[1]))
        os.close(w)
        assert frames.read(r) == b"tag and text"
        assert frames.read(r) == got[1]
        assert frames.read(r) is None  # the end of the stream
    finally:
        os.close(r)


def test_an_oversized_frame_is_refused_before_its_body_is_read() -> None:
    head = frames.HEAD.pack(frames.MAX_FRAME + 1)
    with pytest.raises(frames.FrameTooLarge) as exc:
        frames.take(bytearray(head))  # the head alone is enough to refuse it
    assert exc.value.size == frames.MAX_FRAME + 1 and isinstance(exc.value, ValueError)
    r, w = os.pipe()
    try:  # drained: the stream stays in step, and the next frame reads whole
        frames.write(w, frames.HEAD.pack(100) + b"y" * 100 + frames.encode({"next": 1}))
        os.close(w)
        with pytest.raises(frames.FrameTooLarge):
            frames.read(r, limit=99, drain=True)
        assert frames.read(r) == frames.encode({"next": 1})[4:]
    finally:
        os.close(r)
    r, w = os.pipe()
    try:  # not drained (rpc.py: the stream is dead anyway): refused after the head, nothing more read
        frames.write(w, frames.HEAD.pack(100) + b"z" * 100)
        os.close(w)
        with pytest.raises(frames.FrameTooLarge):
            frames.read(r, limit=99)
        assert os.read(r, 1000) == b"z" * 100
    finally:
        os.close(r)


def test_a_frame_over_a_smaller_limit_is_refused() -> None:
    with pytest.raises(frames.FrameTooLarge):
        frames.take(bytearray(frames.frame(b"x" * 10)), limit=9)
    assert frames.take(bytearray(frames.frame(b"x" * 9)), limit=9) == b"x" * 9


def test_the_host_channel_reads_the_codec_and_refuses_an_oversized_frame() -> None:
    assert protocol.MAX_FRAME is frames.MAX_FRAME and protocol.encode is frames.encode
    r, w = os.pipe()
    try:
        chan = protocol.Channel(r, w)
        chan.send({"a": "é"})
        assert chan.recv(time.monotonic() + 5) == {"a": "é"}
        chan.send_bytes(frames.HEAD.pack(frames.MAX_FRAME + 1))
        with pytest.raises(protocol.ChannelClosed, match="oversized"):
            chan.recv(time.monotonic() + 5)
    finally:
        os.close(r)
        os.close(w)


# ------------------------------------------------------------------------------ one of each
def test_no_file_but_frames_py_defines_a_frame_format_or_its_limit() -> None:
    """MAX_FRAME is assigned, and a 4-byte length packed or unpacked, in frames.py alone; whoever uses
    MAX_FRAME imports it from there."""
    found = []
    for path in SPEAKERS:
        if path.name == "frames.py":
            continue
        tree = _tree(path)
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found += [f"{path.name}: assigns {t.id}" for t in targets
                          if isinstance(t, ast.Name) and t.id == "MAX_FRAME"]
            if isinstance(node, ast.Constant) and node.value in LENGTH_FORMATS:
                found.append(f"{path.name}:{node.lineno}: a length-prefix format {node.value!r}")
            if isinstance(node, ast.ImportFrom) and node.module in ("frames", "toolgym.sandbox.injected.frames"):
                imported |= {a.asname or a.name for a in node.names}
            if isinstance(node, ast.FunctionDef) and node.name == "read_exact":
                found.append(f"{path.name}: defines its own read_exact")
        uses = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "MAX_FRAME"}
        found += [f"{path.name}: uses MAX_FRAME without importing it from frames" for _ in uses - imported]
    assert not found, found


def test_each_shared_limit_is_defined_once() -> None:
    """The names of limits.py (and MAX_FRAME) are assigned nowhere else among the speakers, and the
    host's Limits defaults are the executor's."""
    shared = {n.id for n in ast.walk(_tree(INJECTED / "limits.py")) if isinstance(n, ast.Name)}
    shared |= {"MAX_FRAME", "EVAL_MEMORY_MB", "VALIDATOR_MEMORY_MB", "VALIDATOR_TIME_S"}
    twice = []
    for path in [*SPEAKERS, SANDBOX / "types.py"]:
        if path.name == "limits.py":
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Assign) and path.name != "frames.py":
                twice += [f"{path.name}: {t.id}" for t in node.targets if isinstance(t, ast.Name) and t.id in shared]
    assert not twice, twice
    d = types.Limits()
    assert (d.timeout_s, d.memory_mb, d.output_bytes, d.file_bytes) == (
        limits.TIMEOUT_S, limits.MEMORY_MB, limits.OUTPUT_BYTES, limits.FILE_BYTES)


def test_only_the_fork_server_passes_descriptors() -> None:
    """One fork server (forkserver.py) for the executor's calls and the judge's tests: no other script
    sends or receives file descriptors."""
    users = sorted(p.name for p in INJECTED.glob("*.py") for n in ast.walk(_tree(p))
                   if isinstance(n, ast.Attribute) and n.attr in ("send_fds", "recv_fds", "sendmsg", "recvmsg"))
    assert set(users) == {"forkserver.py"}, users


FORK_SERVER_TRIAL = r"""
import json, os, sys
from forkserver import ForkServer, ServerDied, description, place

def child(fds):
    desc = description(fds[0])
    place(fds[1:])
    fds_now = sorted(int(n) for n in os.listdir("/proc/self/fd"))  # the listing itself opens one
    os.write(0, json.dumps([desc, fds_now]).encode())
    os._exit(desc["rc"])

server = ForkServer(child, "the trial server")
out = {}
pipes = [os.pipe() for _ in range(3)]
for i, (r, w) in enumerate(pipes):  # asked for together: the pids come back in order
    server.request({"rc": i, "n": "x" * i}, [w])
    os.close(w)
pids = [server.next_pid() for _ in pipes]
out["got"] = [json.loads(os.read(r, 1000)) for r, _ in pipes]
out["codes"] = [os.waitstatus_to_exitcode(server.wait(p)) for p in pids]
out["again"] = [server.wait(pids[0]), server.wait(1)]  # collected already / no child: None, at once
try:
    server.request({"rc": 0, "n": "x" * 70000}, [])
except ValueError as exc:
    out["too_large"] = str(exc)
try:
    server.request({"rc": 0}, [1] * 8)
except ValueError as exc:
    out["too_many"] = str(exc)
r, w = os.pipe()
pid = server.fork({"rc": 5}, [w])
os.close(w)
out["after"] = os.waitstatus_to_exitcode(server.wait(pid))
os.kill(server.pid, 9)
try:
    server.fork({"rc": 0}, [r])
except (OSError, ServerDied) as exc:
    out["dead"] = type(exc).__name__
print(json.dumps(out))
"""


def test_the_fork_server_forks_in_order_reports_ends_and_hands_each_child_only_its_own_fds() -> None:
    """The fork server of the executor and the judge (forkserver.py), run on the host as in the sandbox."""
    proc = subprocess.run([sys.executable, "-I", "-c", scripts.bundle(FORK_SERVER_TRIAL)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["got"] == [[{"rc": i, "n": "x" * i}, [0, 1]] for i in range(3)]  # its description; fd 0 alone
    assert out["codes"] == [0, 1, 2] and out["after"] == 5 and out["again"] == [None, None]
    assert "too large" in out["too_large"]  # refused in the owner: the server never saw it, and serves on
    assert "at most 7 fds" in out["too_many"]  # never cut short by the socket (MSG_CTRUNC) instead
    assert out["dead"] in ("BrokenPipeError", "ConnectionResetError", "ServerDied")


def test_no_script_shares_its_file_name_with_a_module_of_toolgym() -> None:
    """One file of each name: the judge's Kattis validation in the sandbox is not a second `kattis.py`
    beside the package loader (toolgym/envs/tasks/kattis.py)."""
    names = {p.name for p in INJECTED.glob("*.py")}
    clashes = sorted(str(p.relative_to(SANDBOX.parent)) for p in SANDBOX.parent.rglob("*.py")
                     if p.parent != INJECTED and p.name in names)
    assert not clashes, clashes


# ------------------------------------------------------------------------------ the bootstrap
def test_each_script_is_shipped_with_what_it_imports_in_order() -> None:
    for name in ("executor", "harness"):
        mods = scripts.modules(name)
        for i, mod in enumerate(mods):
            assert set(scripts.imports(mod)) <= set(mods[:i]), (name, mod)
        assert set(scripts.imports(name)) <= set(mods)
        assert "frames" in mods and "limits" in mods
        program = scripts.program(name)
        compile(program, f"<{name}>", "exec")
    assert "zygote" not in scripts.modules("executor")  # the executor carries nothing of the judge


def test_no_script_is_over_500_lines_and_each_split_one_travels_with_its_importer() -> None:
    """One concern per file (issue 37): none over 500 lines; the executor's and function mode's own modules
    (exec_*.py, rpc_*.py) are each shipped with the script that imports them, and nothing else needs them."""
    long = {p.name: n for p in INJECTED.glob("*.py") if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500}
    assert not long, long
    executor, harness = set(scripts.modules("executor")), set(scripts.modules("harness"))
    exec_own = {p.stem for p in INJECTED.glob("exec_*.py")}
    rpc_own = {p.stem for p in INJECTED.glob("rpc_*.py")}
    assert len(exec_own) >= 5 and exec_own <= executor and not exec_own & harness
    assert len(rpc_own) >= 3 and rpc_own <= harness and not rpc_own & executor


def test_the_executors_program_fits_in_one_argument() -> None:
    """Both backends pass it as one argv string (`python3 -I -c SOURCE`): Linux takes at most
    MAX_ARG_STRLEN (32 pages, 128 KiB) in one, with its NUL."""
    assert len(scripts.program("executor").encode()) < (128 << 10) - 1


def test_an_import_cycle_between_scripts_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("from a import x\n")
    monkeypatch.setattr(scripts, "HERE", tmp_path)
    with pytest.raises(ValueError, match="cycle"):
        scripts.modules("a")
