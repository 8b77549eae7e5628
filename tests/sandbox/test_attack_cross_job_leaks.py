"""Red-team attacks that read what another call, job or batch-mate had: its code, stdin, output or hidden
tests (round 1, routes 3 and 5), modules planted on sys.path for a batch-mate, files written for the next
job (round 5, A02/A05: a wrong program copied a solver batch-mate's answers from the work root), on every
backend. Everything a job can write is wiped before the next job.
How these tests are built, and their round ids: tests/sandbox/judging.py.
"""

from __future__ import annotations

import secrets

import pytest

from tests.sandbox.judging import (
    CALL,
    MEMSCAN,
    WRONG,
    assert_all_ac,
    assert_no_ac,
    fn,
    gather_batch,
    statuses,
    stdio,
    stdio_job,
)
from toolgym.sandbox import Limits
from toolgym.sandbox.judging import TestCase, ajudge, judge

# =========================================================================== 3. memory of earlier calls
SCAN = MEMSCAN + r'''
import os
control = "".join(["TGMEM", os.urandom(16).hex()]).encode()  # built at run time: in this heap only
pids = ["self"] + [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
found = {m.group().decode() for m in _tg_memscan(rb"TGMEM[0-9a-f]{32}", pids)}
print("CONTROL", control.decode() in found)
print("FOUND", " ".join(sorted(found)))
'''


def _scan(sb) -> set[str]:
    r = sb.run(SCAN, limits=Limits(timeout_s=20, memory_mb=256, output_bytes=256 << 10))
    assert r.status == "ok", r
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    assert lines.get("CONTROL") == "True", r.stdout  # the scanner does read memory
    return set(lines.get("FOUND", "").split())


def _secret() -> str:
    return "TGMEM" + secrets.token_hex(16)


def test_a_later_run_cannot_read_an_earlier_runs_code_stdin_or_output(sb):
    """round 1, route 3 (memory of earlier calls)."""
    in_code, in_stdin, in_stdout = _secret(), _secret(), _secret()
    head, tail = in_stdout[:15], in_stdout[15:]  # the output is built at run time: not in the code
    r = sb.run(f"import sys\nsecret = {in_code!r}\ndata = sys.stdin.read()\nprint({head!r} + {tail!r})\n"
               "print(len(secret) + len(data))", stdin=in_stdin, limits=CALL)
    assert (r.status, r.stdout) == ("ok", f"{in_stdout}\n{len(in_code) + len(in_stdin)}\n"), r
    found = _scan(sb)
    assert in_code not in found, "an earlier call's program was found in memory"
    assert in_stdin not in found, "an earlier call's stdin was found in memory"
    assert in_stdout not in found, "an earlier call's output was found in memory"


def test_a_later_run_cannot_read_an_earlier_judges_hidden_tests(sb):
    """round 1, route 3 (memory of earlier calls)."""
    expected, test_input, asserted = _secret(), _secret(), _secret()
    r = stdio(sb, "print('no idea')", [TestCase(input=test_input + "\n", output=expected + "\n")])
    assert statuses(r) == ["WA"]
    r = fn(sb, "def f():\n    return 0\n", [TestCase(code=f"assert f() == 0, {asserted!r}")])
    assert statuses(r) == ["AC"]
    found = _scan(sb)
    assert expected not in found, "an earlier judge's expected output was found in memory"
    assert test_input not in found, "an earlier judge's test input was found in memory"
    assert asserted not in found, "an earlier judge's test code was found in memory"


SPY_FOR_SECRET = r'''
import os, re, time
PAT = re.compile(rb"TGBATCH[0-9a-f]{24}")
found = []

def scan(blob):
    m = PAT.search(blob or b"")
    if m and not found:
        found.append(m.group().decode())

def sweep():
    for pid in [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]:
        for name in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as fh:
                    scan(fh.read())
            except OSError:
                pass
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    with open(f"/proc/{pid}/fd/{fd}", "rb") as fh:
                        os.set_blocking(fh.fileno(), False)
                        scan(fh.read(1 << 16))
                except (OSError, TypeError):
                    pass
        except OSError:
            pass
        for root in (f"/proc/{pid}/cwd", f"/proc/{pid}/root/tmp"):
            try:
                for dirpath, _dirs, names in os.walk(root):
                    for n in names:
                        try:
                            with open(os.path.join(dirpath, n), "rb") as fh:
                                scan(fh.read(1 << 16))
                        except OSError:
                            pass
            except OSError:
                pass
        try:
            maps = open(f"/proc/{pid}/maps").read().splitlines()
            with open(f"/proc/{pid}/mem", "rb", 0) as mem:
                for line in maps:
                    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                    if "rw" in line.split()[1] and hi - lo < 1 << 26:
                        try:
                            mem.seek(lo)
                            scan(mem.read(hi - lo))
                        except (OSError, ValueError, OverflowError):
                            pass
        except OSError:
            pass
    for root in ("..", "../..", "../../..", "/tmp"):
        for dirpath, _dirs, names in os.walk(root):
            for n in names:
                try:
                    with open(os.path.join(dirpath, n), "rb") as fh:
                        scan(fh.read(1 << 16))
                except OSError:
                    pass

end = time.monotonic() + 1.2
while time.monotonic() < end and not found:
    sweep()
    time.sleep(0.01)
'''


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["function", "stdio"])
async def test_batch_mates_cannot_read_each_others_programs_or_tests(sb, mode):
    """round 1, route 5 (batch-mates).

    Every job has the same problem: produce a secret that only a correct program knows.
    A spy batched with correct programs passes only if it reads one of them."""
    secret = "TGBATCH" + secrets.token_hex(12)
    if mode == "function":
        tests = [TestCase(call="answer", expected=secret)]
        honest = f"import time\ndef answer():\n    time.sleep(0.3)\n    return {secret!r}\n"
        spy = SPY_FOR_SECRET + "def answer():\n    return found[0] if found else 'unknown'\n"
    else:
        tests = [TestCase(input="", output=secret + "\n")]
        honest = f"import time\ntime.sleep(0.3)\nprint({secret!r})\n"
        spy = SPY_FOR_SECRET + "print(found[0] if found else 'unknown')\n"
    solo = judge(sb, honest, tests, mode=mode)
    assert_all_ac(solo, "control alone")
    reports = await gather_batch(sb, ajudge(sb, honest, tests, mode=mode),
                                 ajudge(sb, spy, tests, mode=mode, time_limit_s=3.0),
                                 ajudge(sb, honest, tests, mode=mode),
                                 ajudge(sb, spy, tests, mode=mode, time_limit_s=3.0))
    assert [r.passed for r in reports] == [1, 0, 1, 0], [r.verdicts for r in reports]
    # control: the spy does find the secret where it can reach it (a file of its own)
    plant = f"open('/tmp/mine', 'w').write({secret!r})\n"
    assert_all_ac(judge(sb, plant + spy, tests, mode=mode, time_limit_s=3.0), "the spy finds a reachable secret")


SHADOW_DECIMAL = r'''
import os, sys
FAKES = {
    "decimal.py": "raise ImportError('planted by a batch-mate')\n",
    # imported by the judge harness itself when it compiles C++: every compilation "fails"
    "subprocess.py": ("class TimeoutExpired(Exception):\n    pass\n"
                      "class CompletedProcess:\n    returncode = 1\n    stderr = b'planted by a batch-mate'\n"
                      "def run(*a, **k):\n    return CompletedProcess()\n"),
}
for d in sys.path:
    for name, text in FAKES.items():
        try:
            with open(os.path.join(d or ".", name), "w") as fh:
                fh.write(text)
        except OSError:
            pass
'''


PLANT_VICTIMS = {
    "python (stdio) imports decimal": ("from decimal import Decimal\na, b = map(Decimal, input().split())\n"
                                       "print(a + b)\n", "python", "stdio"),
    "C++ (the harness imports subprocess to compile it)": (
        "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}\n", "cpp", "stdio"),
    "python (function) imports decimal": ("import time\ndef add(a, b):\n    time.sleep(0.3)\n"
                                          "    from decimal import Decimal\n    return int(Decimal(a) + Decimal(b))\n",
                                          "python", "function"),
}


@pytest.mark.parametrize("victim", list(PLANT_VICTIMS))
async def test_modules_planted_on_sys_path_do_not_reach_batch_mates(sb, victim):
    """round 1, route 5 (batch-mates).

    A job writes decimal.py and subprocess.py into every sys.path entry it can (today
    sys.path[0] is the call's work dir); later jobs of the same call, and the harness
    itself, import them."""
    honest, language, mode = PLANT_VICTIMS[victim]
    if mode == "stdio":
        tests, attacker = [TestCase(input="1 2\n", output="3\n")], SHADOW_DECIMAL + "print(0)\n"
    else:
        tests, attacker = [TestCase(code="assert add(1, 2) == 3")], SHADOW_DECIMAL + WRONG
    solo = judge(sb, honest, tests, mode=mode, language=language)
    assert_all_ac(solo, "control alone")
    reports = await gather_batch(sb, ajudge(sb, attacker, tests, mode=mode),
                                 ajudge(sb, honest, tests, mode=mode, language=language))
    assert_no_ac(reports[0])
    assert statuses(reports[1]) == statuses(solo), reports[1].verdicts


# ================================================================ A02/A05/A08: what a job leaves in writable places
PLACES = r'''
import os
TAG = "tgplant-6b1f"


def _rw_mounts():
    out = []
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        if f[5].split(",")[0] == "rw" and not f[4].startswith(("/proc", "/sys")):
            out.append(f[4])
    return out


def _places():
    dirs = ["/", "/tmp", "/var/tmp", "/dev", "/dev/shm", "/dev/mqueue", "/run", "/work", "/home", "/opt", "/var",
            os.getcwd(), os.path.dirname(os.getcwd()), os.path.dirname(os.path.dirname(os.getcwd())),
            os.path.expanduser("~"), *_rw_mounts()]
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]
'''
PLANT = PLACES + r'''
made = []
for d in _places():
    for make in (lambda p: open(p, "w").close(), os.mkdir):
        p = os.path.join(d, TAG + ("d" if make is os.mkdir else "f"))
        try:
            make(p)
            made.append(p)
        except OSError:
            pass
print(len(made), *made)
'''
FIND = PLACES + r'''
found = [os.path.join(d, TAG + k) for d in _places() for k in "fd" if os.path.lexists(os.path.join(d, TAG + k))]
for top in _rw_mounts():
    for root, dirs, files in os.walk(top):
        found += [os.path.join(root, n) for n in dirs + files if n.startswith(TAG)]
print(" ".join(sorted(set(found))) or "clean")
'''


async def test_nothing_a_job_writes_reaches_the_next_job(sb):
    """round 5, A02/A05/A08."""
    plant, find = await gather_batch(sb, stdio_job(sb, PLANT, [TestCase(input="", output="never\n")]),
                                     stdio_job(sb, FIND, [TestCase(input="", output="clean\n")]))
    assert "/tmp/" + "tgplant" in plant.verdicts[0].got, plant.verdicts  # the control: /tmp is writable
    assert_all_ac(find, "a batch-mate looking for what the planter left")


SHARE = r'''
import hashlib, os, sys
data = sys.stdin.read()
key = None
for d in ("/work", "/tmp", "/dev/shm", os.path.dirname(os.getcwd())):
    for name in os.listdir(d) if os.access(d, os.R_OK) else []:
        if name == ".answers-" + hashlib.sha1(data.encode()).hexdigest():
            sys.stdout.write(open(os.path.join(d, name)).read())
            raise SystemExit
'''
SOLVER = SHARE + r'''
a, b = map(int, data.split())
out = f"{a + b}\n"
for d in ("/work", "/tmp", "/dev/shm", os.path.dirname(os.getcwd())):
    try:
        with open(os.path.join(d, ".answers-" + hashlib.sha1(data.encode()).hexdigest()), "w") as fh:
            fh.write(out)
    except OSError:
        pass
sys.stdout.write(out)
'''
COPIER = SHARE + "print(42)  # cannot solve it\n"


async def test_a_wrong_program_cannot_copy_a_solver_batch_mates_answers(sb):
    """round 5, A02/A05/A08."""
    solver, copier = await gather_batch(sb, stdio_job(sb, SOLVER), stdio_job(sb, COPIER))
    assert_all_ac(solver, "the solver")
    assert statuses(copier) == ["WA"] * 3, copier.verdicts
