"""Kattis output validators in the judge's stdio mode: the default validator's flags, custom
validators (C++ and Python) and interactive problems, on real sandboxes; what a submission
cannot do to a validator's verdict; and every Python/C++ submission of problemtools'
example problems (MIT) and of a set of BAPCtools' test problems (GPL-3.0: read from the
test-data cache that scripts/setup.sh fills from the projects' PyPI sdists, never copied
here) gets the verdict of the folder it is filed in.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from tests.kattis_data import BAPCTOOLS, PROBLEMTOOLS, cached_testdata
from tests.sandbox.conftest import open_for, require_backend, under_gvisor
from toolgym.envs.kattis import KattisProblem, load_problem
from toolgym.sandbox import Limits, TestCase, judge
from toolgym.sandbox.judging import JudgeInputError, ajudge_many, build_job
from toolgym.sandbox.validators import OutputValidator

EXPECTED = {"accepted": {"AC"}, "wrong_answer": {"WA"}, "time_limit_exceeded": {"TLE"},
            "run_time_error": {"RE", "MLE"}}  # Kattis files an exceeded memory limit under run-time error
BAD_PREFIX = {"ac": {"AC"}, "wa": {"WA"}, "tle": {"TLE"}, "rte": {"RE", "MLE"}}
# Time limits: problemtools' legacy examples state none, and on a busy 2-core CI machine a wall-clock
# second is tight, so at least 2 s; BAPCtools' pseudointeraction streams 200,000 lines to the program.
MIN_TL = 2.0
TL = {"pseudointeraction": 10.0}


def submission_language(path: Path) -> tuple[str | None, str]:
    """(judge language or None, why skipped): Python 3 and C++ run; other languages have no runner here."""
    if path.suffix == ".py" or path.suffix == ".py3":
        if "python2" in path.read_text(errors="replace").splitlines()[0]:
            return None, "Python 2"
        return "python", ""
    if path.suffix in (".cc", ".cpp"):
        return "cpp", ""
    return None, {".c": "C", ".java": "Java", ".kt": "Kotlin"}.get(path.suffix, path.suffix or path.name)


def submissions(problem: KattisProblem) -> tuple[list[tuple[Path, str, set[str]]], list[tuple[Path, str]]]:
    """(path, language, expected overall verdicts) to run, and (path, why) skipped."""
    run, skipped = [], []
    for folder, expected in EXPECTED.items():
        for p in sorted((problem.path / "submissions" / folder).glob("*")):
            if not p.is_file() or p.name.startswith(".") or ".disabled" in p.name:
                continue
            lang, why = submission_language(p)
            # BAPCtools files some in the wrong folder on purpose (x.bad.py); the name says their verdict
            exp = BAD_PREFIX[p.name.split(".", 1)[0]] if ".bad." in p.name else expected
            if lang is None:
                skipped.append((p, why))
            else:
                run.append((p, lang, exp))
    return run, skipped


def overall(report) -> str:
    """Kattis's verdict of a run that stops at the first rejected test."""
    return next((v.status for v in report.verdicts if v.status != "AC"), "AC")


def judge_problems(problems: list[KattisProblem]) -> list[tuple[str, str, str, set[str], str]]:
    """Judge every runnable submission of `problems` (one sandbox call per problem, two in flight)."""
    jobs, rows = [], []
    for prob in problems:
        opts = prob.judge_options()
        opts["time_limit_s"] = TL.get(prob.id, max(opts.get("time_limit_s", MIN_TL), MIN_TL))
        opts.setdefault("memory_mb", 512)
        tests = [TestCase(input=t.input, output=t.answer, name=t.name) for t in prob.tests()]
        runnable, _ = submissions(prob)
        jobs.append([build_job(p.read_text(), tests, "stdio", language=lang, stop_at_first_failure=True, **opts)
                     for p, lang, _ in runnable])
        rows.append([(prob.id, str(p.relative_to(prob.path / "submissions")), lang, exp) for p, lang, exp in runnable])
    with open_for("docker", Limits(timeout_s=60, memory_mb=1024), pool_size=2) as sb:
        async def go():
            return await asyncio.gather(*(ajudge_many(sb, j) for j in jobs))
        reports = asyncio.run(go())
    out = []
    for prob_rows, prob_reports in zip(rows, reports, strict=True):
        for (pid, sub, lang, exp), rep in zip(prob_rows, prob_reports, strict=True):
            out.append((pid, sub, lang, exp, overall(rep)))
    return out


def check_table(table) -> None:
    wrong = [row for row in table if row[4] not in row[3]]
    print("\n".join(f"| {pid} | {sub} | {lang} | {'/'.join(sorted(exp))} | {got} |" for pid, sub, lang, exp, got in table))
    assert not wrong, wrong


@pytest.mark.slow
@pytest.mark.docker
def test_problemtools_examples_get_the_verdict_of_their_folder():
    require_backend("docker")
    root = cached_testdata(PROBLEMTOOLS) / "examples"
    problems = [load_problem(root / n) for n in ("different", "guess", "hello", "oddecho")]
    table = judge_problems(problems)
    check_table(table)
    assert len(table) == 21  # every Python 3 and C++ submission in the four examples
    skipped = {p.name: why for prob in problems for p, why in submissions(prob)[1]}
    assert skipped["different_py2.py"] == "Python 2" and skipped["guess_rte.c"] == "C"
    # oddecho is a scoring problem: its partially accepted submission passes some tests, not all
    odd = problems[3]
    partial = (odd.path / "submissions/partially_accepted/sol.py").read_text()
    with open_for("docker", Limits(timeout_s=60, memory_mb=1024)) as sb:
        rep = judge(sb, partial, [TestCase(input=t.input, output=t.answer) for t in odd.tests()], checker="kattis",
                    time_limit_s=MIN_TL)
    assert 0 < rep.passed < rep.total, [v.status for v in rep.verdicts]


@pytest.mark.slow
@pytest.mark.docker
def test_bapctools_problems_get_the_verdict_of_their_folder():
    require_backend("docker")
    root = cached_testdata(BAPCTOOLS) / "test" / "problems"
    problems = [load_problem(root / n) for n in ("identity", "pseudointeraction", "guess", "guessnoeofcheck",
                                                  "hellowholeworld")]
    assert problems[1].validator["language"] == "python" and problems[1].interactive
    check_table(judge_problems(problems))


# ------------------------------------------------------------------------------ mechanics, both backends
ECHO = "print(input())\n"


def test_default_validator_flags(sb):
    tests = [TestCase(input="x", output="Hello World\n"), TestCase(input="x", output="hello   world"),
             TestCase(input="x", output="hello world\n\n")]
    got = judge(sb, "print('hello world')", tests, checker="kattis")
    assert [v.status for v in got.verdicts] == ["AC", "AC", "AC"]  # case and space changes pass by default
    got = judge(sb, "print('hello world')", tests, checker="kattis", checker_args=["case_sensitive"])
    assert [v.status for v in got.verdicts] == ["WA", "AC", "AC"]
    got = judge(sb, "print('hello world')", tests, checker="kattis", checker_args="space_change_sensitive")
    assert [v.status for v in got.verdicts] == ["AC", "WA", "WA"]
    # a relative tolerance scales with the ANSWER: 100 for 99 is off by 1 > 0.01 * 99, though 1 <= 0.01 * 100
    floats = [TestCase(input="", output="100.0\n"), TestCase(input="", output="99\n"), TestCase(input="", output="0\n")]
    got = judge(sb, "print('1e2')", floats, checker="kattis", checker_args=["float_relative_tolerance", "0.01"])
    assert [v.status for v in got.verdicts] == ["AC", "WA", "WA"]
    got = judge(sb, "print('0.5e0')", floats[2:], checker="kattis", checker_args=["float_absolute_tolerance", "0.5"])
    assert got.all_passed
    got = judge(sb, "print('1 2')", [TestCase(input="", output="1")], checker="kattis")
    assert got.verdicts[0].status == "WA" and "trailing" in got.verdicts[0].message


def test_bad_validator_arguments_are_refused_before_any_sandbox_call():
    with pytest.raises(JudgeInputError, match="unknown default validator flag"):
        build_job(ECHO, [TestCase(input="", output="")], "stdio", checker="kattis", checker_args=["float_tol", "1"])
    with pytest.raises(JudgeInputError, match="needs a number"):
        build_job(ECHO, [TestCase(input="", output="")], "stdio", checker="kattis", checker_args=["float_tolerance"])
    with pytest.raises(JudgeInputError, match="which Python file"):
        build_job(ECHO, [TestCase(input="", output="")], "stdio",
                  validator=OutputValidator({"a.py": "", "b.py": ""}, "python"))
    with pytest.raises(JudgeInputError, match="stdio mode"):
        build_job("def f(): pass", [TestCase(code="assert True")], "function",
                  validator=OutputValidator({"v.py": ""}, "python"))


# a Python validator: accepts when the team output equals the answer file; says who ran it
SAME = """import os, sys
inp, ans, fb = sys.argv[1:4]
team = sys.stdin.read()
with open(os.path.join(fb, "judgemessage.txt"), "w") as f:
    f.write(f"validator uid {os.getuid()} args {sys.argv[4:]} team {team.strip()[:80]!r}")
sys.exit(42 if team.split() == open(ans).read().split() else 43)
"""


def test_python_validator_runs_as_the_checker_uid_with_the_team_output(sb):
    # the validator imports a module beside it, as `python same.py` would find it
    v = OutputValidator({"same.py": "from helper import *\n", "helper.py": SAME}, "python", args=["--x", "1"],
                        entry="same.py")
    prog = "import os\nu = os.getuid()\nprint(input(), u - os.getgid(), 'unprivileged' if u >= 65534 else u)\n"
    rep = judge(sb, prog, [TestCase(input="7", output="7 0 unprivileged"), TestCase(input="7", output="8 0 unprivileged")],
                validator=v)
    assert [x.status for x in rep.verdicts] == ["AC", "WA"]
    # the submission ran as its sandbox's program uid (its output says so), the validator as the checker uid
    # (each sandbox has uids of its own, none below 65533) with the problem's args
    m = re.fullmatch(r"validator uid (\d+) args \['--x', '1'\] team '7 0 unprivileged'", rep.verdicts[1].message)
    assert m and int(m.group(1)) >= 65533, rep.verdicts[1].message


def test_submission_cannot_forge_the_validators_verdict(sb):
    v = OutputValidator({"same.py": SAME}, "python")
    forger = r"""import glob, os, sys
tried = []
for pattern in ("/tmp/*", "../*", "../../*", "/proc/*/cwd"):
    for p in glob.glob(pattern):
        if p.endswith("cwd") and p.split("/")[2] in ("self", "thread-self", str(os.getpid())):
            continue  # its own folder
        for name in ("feedback/judgemessage.txt", "answer"):
            try:
                with open(os.path.join(p, name), "w") as f:
                    f.write("42")
                tried.append("WROTE " + p)
            except OSError:
                pass
print("AC 42 {\"status\": \"AC\"}", tried)
sys.stdout.flush()
os._exit(42)
"""
    rep = judge(sb, forger, [TestCase(input="", output="secret")], validator=v)
    # a nonzero exit is a run-time error before the validator is asked; with exit 0 the validator still rejects
    assert rep.verdicts[0].status == "RE"
    rep = judge(sb, forger.replace("os._exit(42)", "os._exit(0)"), [TestCase(input="", output="secret")], validator=v)
    assert rep.verdicts[0].status == "WA" and "WROTE" not in (rep.verdicts[0].got or ""), rep.verdicts


# an interactive validator holding a secret: it accepts only a team that echoes the secret back
KEEPER = """import os, sys
secret = open(sys.argv[2]).read().strip()
print("ready", flush=True)
line = sys.stdin.readline().strip()
open(os.path.join(sys.argv[3], "judgemessage.txt"), "w").write("got " + line[:200])
sys.exit(42 if line == secret else 43)
"""


# the same in C++: a program run by exec, so its argv (the answer's and feedback dir's paths) shows in /proc
KEEPER_CPP = r"""#include <fstream>
#include <iostream>
#include <string>
int main(int argc, char **argv) {
    std::ifstream ans(argv[2]);
    std::string secret, line;
    ans >> secret;
    std::cout << "ready" << std::endl;
    std::getline(std::cin, line);
    std::ofstream(std::string(argv[3]) + "/judgemessage.txt") << "got " << line.substr(0, 200);
    return line == secret ? 42 : 43;
}
"""


@pytest.mark.slow
def test_interactive_submission_cannot_reach_the_answer_or_the_feedback_dir(sb):
    v = OutputValidator({"keeper.cc": KEEPER_CPP}, "cpp", interactive=True)
    tests = [TestCase(input="", output="s3cr3t-token\n")]
    honest = judge(sb, "input()\nprint('s3cr3t-token', flush=True)\n", tests, validator=v)
    assert honest.all_passed, honest.verdicts  # the control: the secret, when known, is accepted
    # under gVisor any uid may read another process's environ and reopen what its fds name (Linux closes both to
    # another uid, or a non-dumpable process: the ptrace access check); there the thief finds something only where
    # they hold anything beyond the public environment every test process gets (zygote.py)
    thief = f"GVISOR = {under_gvisor(sb)}\n" + r"""import glob, os
PUBLIC_ENV = {b"PATH", b"HOME", b"LANG", b"LC_ALL", b"TMPDIR", b"PYTHONHASHSEED", b""}
input()
found, denied = [], 0
for d in glob.glob("/proc/[0-9]*"):
    try:
        argv = open(d + "/cmdline", "rb").read().split(b"\0")
    except OSError:
        continue
    for a in argv:
        a = a.decode(errors="replace")
        if a.endswith("answer"):
            try:
                found.append(open(a).read().strip())
            except OSError:
                denied += 1
        if a.rstrip("/").endswith("feedback"):
            try:
                open(os.path.join(a, "judgemessage.txt"), "w").write("forged")
            except OSError:
                denied += 1
    for leak in ("environ", "fd/0", "fd/1", "mem"):
        try:
            data = open(d + "/" + leak, "rb").read(1 << 16)
        except OSError:
            continue
        if GVISOR and leak == "environ":  # what every exec'd test process gets is no leak
            data = b"\0".join(e for e in data.split(b"\0") if e.split(b"=")[0] not in PUBLIC_ENV)
        if data or not GVISOR:  # gVisor: any uid may open another's environ and reopen its /dev/null
            found.append(data[:100].decode(errors="replace"))
print((found or ["nothing"])[0].strip().replace("\n", " ")[:100] + f" denied={denied}", flush=True)
"""
    rep = judge(sb, thief, tests, validator=v)
    assert rep.verdicts[0].status == "WA", rep.verdicts
    # it found both paths in the validator's command line, and was refused both
    assert rep.verdicts[0].message == "got nothing denied=2", rep.verdicts


@pytest.mark.slow
def test_interactive_time_limit_and_crash(sb):
    v = OutputValidator({"keeper.py": KEEPER}, "python", interactive=True)
    tests = [TestCase(input="", output="k\n")]
    silent = judge(sb, "import time\ninput()\ntime.sleep(30)\n", tests, validator=v, time_limit_s=1)
    assert silent.verdicts[0].status == "TLE"
    late = judge(sb, "input()\nprint('k', flush=True)\nwhile True:\n    pass\n", tests, validator=v, time_limit_s=1)
    assert late.verdicts[0].status == "TLE"  # accepted by the validator, but the program must end in time
    crash = judge(sb, "input()\nprint('k', flush=True)\nraise SystemExit(3)\n", tests, validator=v)
    assert crash.verdicts[0].status == "RE"
    flood = judge(sb, "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", tests, validator=v,
                  output_bytes=1 << 20)
    assert flood.verdicts[0].status == "OLE"  # what the harness forwards is capped like any output


def test_broken_validators_are_judge_errors_naming_the_file(sb):
    bad_cpp = OutputValidator({"validate.cc": "int main() { return 42 }\n"}, "cpp", name="pkg/output_validators/v")
    rep = judge(sb, ECHO, [TestCase(input="1", output="1")] * 2, validator=bad_cpp)
    assert [v.status for v in rep.verdicts] == ["JE", "JE"]
    assert rep.verdicts[0].message.startswith("pkg/output_validators/v: does not compile: validate.cc:1:")
    assert any("does not compile" in n for n in rep.notes)
    crashing = OutputValidator({"v.py": "raise SystemExit(1)\n"}, "python", name="pkg/v")
    rep = judge(sb, ECHO, [TestCase(input="1", output="1")], validator=crashing)
    assert rep.verdicts[0].status == "JE" and "expected exit 42 or 43" in rep.verdicts[0].message
