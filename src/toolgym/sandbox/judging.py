"""Judge one program against many test cases in ONE sandbox round trip.

    from toolgym.sandbox import judge, TestCase
    report = judge(sb, "a, b = map(int, input().split()); print(a + b)",
                   tests=[TestCase(input="1 2\\n", output="3\\n")], mode="stdio")
    report = judge(sb, "def add(a, b): return a + b",
                   tests=[TestCase(code="assert add(1, 2) == 3"),
                          TestCase(call="add", args=[1, 2], expected=3)], mode="function")
    report.passed, report.total, report.fraction, report.all_or_nothing, report.verdicts

How it works. One sandbox call per submission (or per micro-batch of submissions, see
`ajudge`). The harness (``injected/harness.py``) is the program of that call and runs as
a TRUSTED call: as the sandbox's root, which untrusted code never is. The spec (programs,
tests, expected outputs, a per-call nonce) arrives as a root-only file that the harness
reads and deletes. Every test process is forked by a zygote (forked by the harness before
it read the spec) and dropped to an untrusted uid before it runs anything. Verdicts are decided only by
trusted code:

stdio mode: the program runs as uid 65534 with the input on stdin; the harness compares
its output with a checker (``exact``; ``tokens`` = whitespace-insensitive, the default;
``float`` with ``abs_tol``/``rel_tol``; ``custom``: a trusted Python
``check(input, expected, got)`` run as uid 65533 in its own process; ``kattis``: Kattis's
default output validator with ``checker_args`` flags; ``validator=``: a Kattis output
validator program, run as uid 65533 after the program, or beside it for interactive
problems: see ``toolgym.sandbox.validators``; verdict JE when the validator itself fails). The expected output
never enters a process the program can reach. C++ is compiled once, as uid 65534 (so an
``#include`` of a secret finds nothing), with g++ -O2 -std=c++17; CE on failure.

function mode: each test runs in TWO processes. The candidate (uid 65534) loads the
program and answers calls; the evaluator (uid 65533) runs the test code, in which the
program's top-level names are proxies: a call sends its arguments to the candidate and
brings the return value back as data (lists, dicts, tuples, sets, numbers, strings,
bytes, and instances of the program's classes or the test's data classes such as LeetCode's
``ListNode``/``TreeNode`` by class name and attributes; mutable arguments are copied back
after the call). A test class is data when it has no method besides dunders or the test
names it in a top-level ``__by_value__``; any other object of the test (a judge-side API
such as LeetCode's ``Master`` holding the secret and the call count) is lent: the program
may only call its public methods, never read or write its data, and nothing it sends is
rebuilt as such a class. Nothing the candidate sends is ever executed in the evaluator, and the
candidate never holds the test, an expected value or the verdict pipe: rigged ``__eq__``
methods, frame walks, gc hunts, forged protocol messages, patched builtins, early exits
and signals decide nothing. A test passes only when the evaluator finishes the test code
normally (assert form) or the value it received equals ``expected`` (call form, compared
by the harness). Known differences from running test and program in one process: object
identity across the boundary (``is``), and aliasing inside arguments that the callee
mutates (top-level containers are copied back whole).

Isolation: jobs of one call run one after the other; after each job every process of the
untrusted uids is killed at once, the IPC objects they own or created removed and every
place they can write wiped (charged to that job), so a submission cannot see, signal or
outlive into its batch-mates. Kernel counters (the next pid, inode numbers, IPC ids) survive the wipe, so
no sandbox lifetime serves two tenants of one test set or task (`toolgym.sandbox.tenancy`): a job's
occupants are its tests and its episode, a batch holds each key for one tenant, and the pool routes the
call to a worker that fits (or a fresh one). A call carries at most MAX_INPUT_BYTES of specs: batches are
packed to fit, and a job too large alone is refused (its tests: JudgeConfigError) or gets RE
(its program) without a call. A per-test memory_mb above the sandbox's Limits.memory_mb is
refused (JudgeConfigError): the sandbox never had that memory. The sandbox
itself is cleaned the same way after every call (see injected/executor.py).

One job's fault is that job's: a job after which the sandbox cannot be proven clean gets RE
on every test (the harness stops; the jobs after it are judged again, each alone); a call
whose sandbox fails (see `toolgym.sandbox.api`: a control run tells whose fault it is)
judges each of its jobs again alone, and a job whose sandbox fails when judged alone gets
RE (TLE for a stall) on every test it has no verdict for. Only a fault that a control run
sees too raises (an InfrastructureError): no program could have caused it.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import json
import math
import os
import secrets
import weakref
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from toolgym.errors import ConfigError, InfrastructureError, ToolgymError
from toolgym.sandbox import tenancy, waiting
from toolgym.sandbox.api import MAX_INPUT_BYTES, SANDBOX_FAILED, Sandbox
from toolgym.sandbox.injected import limits as _defaults
from toolgym.sandbox.scripts import program
from toolgym.sandbox.types import ExecResult, Limits, from_fields

MODES = ("stdio", "function")
CHECKERS = ("exact", "tokens", "float", "custom", "kattis")
_CHECKER_ALIASES = {"whitespace": "tokens", "token": "tokens"}
LANGUAGES = ("python", "cpp")
VERDICTS = ("AC", "WA", "TLE", "RE", "MLE", "OLE", "CE", "SKIPPED", "JE")  # JE: the problem's validator failed
SPEC_FILE = "judge_spec.json"


class JudgeInputError(ToolgymError, ValueError):
    """The judge was called with bad arguments (mode, checker, tests)."""


class JudgeError(InfrastructureError):
    """The sandbox itself failed while judging, in a way no submission could have caused (it refused to
    start, or a control run failed too)."""


class JudgeConfigError(ConfigError, InfrastructureError):
    """The task cannot be judged on this sandbox, whatever the program: its tests are larger than a sandbox
    call carries, or its memory limit is more than the sandbox has. No program caused it (not scored)."""


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass(frozen=True)
class TestCase:
    """One test. stdio: input/output. function: code (assert-style) or call/args/kwargs/expected."""

    __test__ = False  # not a pytest test class

    input: str | None = None
    output: str | None = None
    code: str | None = None
    call: str | None = None
    args: tuple[Any, ...] | list[Any] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    expected: Any = UNSET
    name: str = ""


@dataclass
class Verdict:
    """Outcome of one test: status (AC, WA, TLE, RE, MLE, OLE, CE, SKIPPED), time, and excerpts."""

    index: int
    status: str
    time_s: float = 0.0
    message: str = ""
    expected: str | None = None
    got: str | None = None
    name: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "AC"


@dataclass
class JudgeReport:
    """All verdicts of one submission, plus score helpers."""

    verdicts: list[Verdict]
    mode: str
    duration_s: float = 0.0  # round trip, host side (waiting for the pool and for batch-mates included)
    harness_s: float = 0.0  # time inside the sandbox
    notes: list[str] = field(default_factory=list)
    own_s: float = 0.0  # the time this submission itself took: its tests, or its failing sandbox call

    @property
    def passed(self) -> int:
        return sum(v.passed for v in self.verdicts)

    @property
    def total(self) -> int:
        return len(self.verdicts)

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total

    @property
    def fraction(self) -> float:
        """Fraction of tests passed: a dense reward."""
        return self.passed / self.total if self.total else 0.0

    @property
    def all_or_nothing(self) -> float:
        """1.0 only if every test passed: the usual pass@k criterion."""
        return 1.0 if self.all_passed else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(passed=self.passed, total=self.total, fraction=self.fraction)
        return d


def harness_source() -> str:
    return program("harness")



def _json_value(value: Any, what: str) -> Any:
    try:
        return json.loads(json.dumps(value, allow_nan=True))
    except (TypeError, ValueError) as e:
        raise JudgeInputError(f"{what} must be JSON-serializable (lists, dicts, str, numbers, bool, None): {e}") \
            from None


def _as_testcase(t: Any, i: int) -> TestCase:
    return from_fields(TestCase, t, f"tests[{i}]", JudgeInputError)


def _test_payload(t: TestCase, i: int, mode: str) -> dict[str, Any]:
    where = f"tests[{i}]"
    if mode == "stdio":
        if t.code is not None or t.call is not None or t.expected is not UNSET:
            raise JudgeInputError(f"{where}: stdio tests take input/output, not code/call/expected")
        if t.input is not None and not isinstance(t.input, str):
            raise JudgeInputError(f"{where}.input must be a str, got {type(t.input).__name__}")
        if not isinstance(t.output, str):
            raise JudgeInputError(f"{where}.output must be a str (the expected stdout)")
        return {"input": t.input or "", "output": t.output}
    if t.input is not None or t.output is not None:
        raise JudgeInputError(f"{where}: function tests take code, or call/args/expected, not input/output")
    if (t.code is None) == (t.call is None):
        raise JudgeInputError(f"{where}: give exactly one of code= (assert-style) or call= (with expected=)")
    if t.code is not None:
        if not isinstance(t.code, str) or not t.code.strip():
            raise JudgeInputError(f"{where}.code must be a non-empty str")
        return {"kind": "code", "code": t.code}
    if not isinstance(t.call, str) or not t.call.strip():
        raise JudgeInputError(f"{where}.call must be a non-empty expression naming a callable, e.g. 'add'")
    if t.expected is UNSET:
        raise JudgeInputError(f"{where}: call= tests need expected=")
    if not isinstance(t.args, (list, tuple)) or not isinstance(t.kwargs, dict):
        raise JudgeInputError(f"{where}: args must be a list and kwargs a dict")
    return {"kind": "call", "call": t.call, "args": _json_value(list(t.args), f"{where}.args"),
            "kwargs": _json_value(t.kwargs, f"{where}.kwargs"),
            "expected": _json_value(t.expected, f"{where}.expected")}


# what a call's spec holds beside its jobs' specs (the nonce, the brackets), and each job's comma
_CALL_OVERHEAD = 256


@dataclass
class _Job:
    """One validated submission: its spec for the harness (and that spec as JSON, whose length is the
    bytes it adds to a call), its tests, and its time budget."""

    spec: dict[str, Any]
    cases: list[TestCase]
    budget_s: float
    memory_mb: int
    text: str = ""
    tests_key: str = ""  # the key no two tenants share a sandbox lifetime under: a digest of the tests
    occupants: tenancy.Occupants = tenancy.NONE  # whose job this is (set when submitted; see sandbox.tenancy)

    @property
    def size(self) -> int:
        return len(self.text) + 1


def build_job(program: str, tests: Any, mode: str, *, language: str = "python", checker: str = "tokens",
              abs_tol: float = 1e-6, rel_tol: float = 1e-9, checker_program: str | None = None,
              time_limit_s: float = 2.0, memory_mb: int = 256, output_bytes: int = _defaults.OUTPUT_BYTES,
              stop_at_first_failure: bool = False, checker_args: Any = None, validator: Any = None) -> _Job:
    """Validate arguments (JudgeInputError on anything malformed) and build the harness spec."""
    from toolgym.sandbox.validators import ValidatorInputError, as_validator, parse_flags

    if mode not in MODES:
        raise JudgeInputError(f"unknown judge mode {mode!r}; choose one of {', '.join(MODES)}")
    checker = _CHECKER_ALIASES.get(checker, checker)
    vspec, flags = None, None
    try:
        if validator is not None:
            if mode != "stdio" or checker not in ("tokens", "kattis") or checker_program is not None:
                raise JudgeInputError("validator= is for stdio mode, instead of a checker")
            vspec, checker = as_validator(validator).spec(), "validator"
        elif checker == "kattis":
            flags = parse_flags(checker_args)
        if checker_args is not None and checker != "kattis":
            raise JudgeInputError("checker_args are the flags of checker='kattis' (a validator takes its own args)")
    except ValidatorInputError as e:
        raise JudgeInputError(str(e)) from None
    if checker_program is not None and checker == "tokens":
        checker = "custom"
    if checker not in CHECKERS and checker != "validator":
        raise JudgeInputError(f"unknown checker {checker!r}; choose one of {', '.join(CHECKERS)}")
    if checker == "custom":
        if mode != "stdio":
            raise JudgeInputError("checker='custom' is for stdio mode only")
        if not isinstance(checker_program, str) or "def check" not in checker_program:
            raise JudgeInputError("checker='custom' needs checker_program: Python source defining "
                                  "check(input, expected, got) -> bool | (bool, message)")
    elif checker_program is not None and checker != "validator":
        raise JudgeInputError(f"checker_program is only used with checker='custom', not {checker!r}")
    if language not in LANGUAGES:
        raise JudgeInputError(f"unknown judge language {language!r}; choose one of {', '.join(LANGUAGES)}")
    if language != "python" and mode == "function":
        raise JudgeInputError("function mode runs Python programs only; use mode='stdio' for cpp")
    if not isinstance(program, str):
        raise JudgeInputError(f"program must be a str, got {type(program).__name__}")
    if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float)) or not 0 < time_limit_s <= 600:
        raise JudgeInputError(f"time_limit_s must be in (0, 600], got {time_limit_s!r}")
    if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < 32:
        raise JudgeInputError(f"memory_mb must be an int >= 32, got {memory_mb!r}")
    if isinstance(output_bytes, bool) or not isinstance(output_bytes, int) or output_bytes < 1:
        raise JudgeInputError(f"output_bytes must be an int >= 1, got {output_bytes!r}")
    for name, tol in (("abs_tol", abs_tol), ("rel_tol", rel_tol)):
        if not isinstance(tol, (int, float)) or not tol >= 0 or math.isinf(tol):
            raise JudgeInputError(f"{name} must be a finite number >= 0, got {tol!r}")
    if isinstance(tests, (str, bytes, dict)) or not hasattr(tests, "__iter__"):
        raise JudgeInputError("tests must be a list of TestCase")
    cases = [_as_testcase(t, i) for i, t in enumerate(tests)]
    if not cases:
        raise JudgeInputError("tests is empty: give at least one TestCase")
    payloads = [_test_payload(t, i, mode) for i, t in enumerate(cases)]
    spec = {
        "mode": mode, "language": language, "program": program, "checker": checker, "abs_tol": float(abs_tol), "rel_tol": float(rel_tol),
        "checker_program": checker_program, "checker_time_limit_s": _defaults.CHECKER_TIME_S, "time_limit_s": float(time_limit_s),
        "memory_mb": memory_mb, "output_bytes": output_bytes, "stop_at_first_failure": bool(stop_at_first_failure),
        "compile_time_limit_s": _defaults.COMPILE_TIME_S, "kattis_flags": flags, "validator": vspec,
    }
    per_test = time_limit_s + 1.0 + (_defaults.CHECKER_TIME_S if checker in ("custom", "validator") else 0.0)
    compiles = (language == "cpp") + (vspec is not None and vspec["language"] == "cpp")
    budget = 2.0 + len(cases) * per_test + _defaults.COMPILE_TIME_S * compiles
    # the tests serialized once: for the call (ASCII: its length is its bytes) and for the job's tenancy key
    tests_text = json.dumps(payloads)
    text = json.dumps(spec)[:-1] + ', "tests": ' + tests_text + "}"
    spec["tests"] = payloads
    return _Job(spec, cases, budget, memory_mb, text, tests_key="tests:" + tenancy.digest_text(tests_text))


def _refusal(sb: Any, job: _Job) -> JudgeReport | None:
    """What a job gets without a sandbox call: JudgeConfigError when no program could pass on this sandbox
    (tests over what a call carries, a memory limit over the sandbox's own), RE on every test when the
    program alone is too large to carry; None when it can be judged."""
    limits = getattr(sb, "limits", None)
    if isinstance(limits, Limits) and job.memory_mb > limits.memory_mb:
        raise JudgeConfigError(f"memory_mb={job.memory_mb} per test is more than the sandbox has ({limits.memory_mb} "
                               f"MiB, its Limits.memory_mb): open the sandbox with Limits(memory_mb={job.memory_mb}) "
                               "or judge with a lower memory_mb")
    room = MAX_INPUT_BYTES - _CALL_OVERHEAD
    if job.size <= room:
        return None
    program_bytes = len(json.dumps(job.spec["program"]))
    if job.size - program_bytes > room:
        raise JudgeConfigError(f"the task's tests take {job.size - program_bytes >> 20} MiB, more than one sandbox "
                               f"call carries ({MAX_INPUT_BYTES >> 20} MiB): split them over several tasks")
    why = f"the program is too large to judge ({program_bytes >> 20} MiB; a call carries {MAX_INPUT_BYTES >> 20} MiB)"
    return JudgeReport([Verdict(i, "RE", 0.0, why, name=c.name) for i, c in enumerate(job.cases)], job.spec["mode"])


def _call(jobs: list[_Job], base: Limits | None) -> tuple[str, dict[str, str], Limits]:
    """The nonce, files and limits of one sandbox call that judges `jobs`."""
    base = base or Limits()
    nonce = secrets.token_hex(16)
    # the jobs' JSON as built once by build_job (the same text json.dumps of the whole would give)
    spec = '{"nonce": "' + nonce + '", "jobs": [' + ", ".join(j.text or json.dumps(j.spec) for j in jobs) + "]}"
    budget = 10.0 + sum(j.budget_s for j in jobs)
    ntests = sum(len(j.cases) for j in jobs)
    limits = Limits(timeout_s=budget, cpu_s=budget, memory_mb=max(base.memory_mb, max(j.memory_mb for j in jobs) + 128),
                    pids=max(base.pids, 32), output_bytes=max(base.output_bytes, 8192 + 2048 * ntests),
                    file_bytes=base.file_bytes)
    return nonce, {SPEC_FILE: spec}, limits


def _parse(res: ExecResult, nonce: str, jobs: list[_Job], duration_s: float) -> list[JudgeReport | None]:
    """Reports from the nonce-prefixed lines; None for a job the harness never finished (of several)."""
    if res.status == "sandbox_error":
        raise JudgeError(f"the sandbox failed while judging: {res.stderr.strip()[-300:]}")
    prefix = nonce + " "
    found: dict[tuple[int, int], dict[str, Any]] = {}
    done: dict[int, dict[str, Any]] = {}
    for line in res.stdout.splitlines():
        if not line.startswith(prefix):
            continue
        try:
            obj = json.loads(line[len(prefix):])
        except ValueError:
            continue
        if "fatal" in obj:
            raise JudgeError(f"the sandbox refused to judge: {obj['fatal']}")
        j = obj.get("j")
        if not isinstance(j, int) or not 0 <= j < len(jobs):
            continue
        if obj.get("done"):
            done.setdefault(j, obj)
        elif isinstance(obj.get("i"), int) and 0 <= obj["i"] < len(jobs[j].cases):
            found.setdefault((j, obj["i"]), obj)
    failed_sandbox = res.stderr.startswith(SANDBOX_FAILED)
    reports: list[JudgeReport | None] = []
    for j, job in enumerate(jobs):
        if j not in done and len(jobs) > 1:
            reports.append(None)  # judged again on its own
            continue
        notes, dirty = [], (done.get(j) or {}).get("dirty")
        if j not in done and not failed_sandbox:
            notes.append(f"the judge harness ended early (status {res.status}, exit {res.exit_code}): "
                         f"{res.stderr.strip()[-300:]}")
        elif j in done:
            notes.extend(f"checker error: {e}" for e in done[j].get("checker_errors") or [])
        if dirty:
            notes.append(f"the sandbox could not be proven clean after this program: {dirty}")
        missing = "no verdict: " + ("this program made its sandbox fail" if failed_sandbox
                                    else "the judge harness was stopped or killed")
        verdicts = []
        for i, case in enumerate(job.cases):
            v = found.get((j, i))
            if dirty:  # the job that left the sandbox unclean pays for it, whatever its tests said
                verdicts.append(Verdict(i, "RE", float((v or {}).get("time_s") or 0.0),
                                        "the program left its sandbox in a state that could not be cleaned",
                                        name=case.name))
                continue
            if v is None:
                status = "TLE" if res.status == "timeout" else "RE"
                verdicts.append(Verdict(i, status, 0.0, missing, name=case.name))
                continue
            status = v.get("status") if v.get("status") in VERDICTS else "RE"
            verdicts.append(Verdict(i, status, float(v.get("time_s") or 0.0), str(v.get("message") or ""),
                                    v.get("expected"), v.get("got"), case.name))
        harness_s = float(done.get(j, {}).get("elapsed_s") or 0.0)
        reports.append(JudgeReport(verdicts, job.spec["mode"], duration_s=duration_s, harness_s=harness_s,
                                   notes=notes, own_s=harness_s if j in done else duration_s))
    return reports


def _submitted(job: _Job) -> _Job:
    """The job as submitted now: its occupants are its tests (the key no two tenants share a sandbox
    lifetime under) and the current episode (see sandbox.tenancy)."""
    job.occupants = tenancy.occupants_now(job.tests_key)
    return job


def _call_options(sb: Any, jobs: list[_Job]) -> dict[str, Any]:
    """Whose call this is (the jobs' occupants); and a batch whose sandbox fails is not run again as a whole:
    its jobs are judged again alone."""
    if not isinstance(sb, Sandbox):
        return {}
    opts: dict[str, Any] = {"occupants": frozenset().union(*(j.occupants for j in jobs))}
    if len(jobs) > 1:
        opts["retry"] = False
    return opts


def judge_many(sb: Any, jobs: list[_Job]) -> list[JudgeReport]:
    """Judge several validated jobs in one sandbox call (any the harness did not finish, alone)."""
    import time

    nonce, files, limits = _call(jobs, getattr(sb, "limits", None))
    t0 = time.monotonic()
    res = sb.run(harness_source(), language="python", files=files, limits=limits, trusted=True,
                 **_call_options(sb, jobs))
    reports = _parse(res, nonce, jobs, time.monotonic() - t0)
    return [r if r is not None else judge_many(sb, [job])[0] for r, job in zip(reports, jobs, strict=True)]


async def ajudge_many(sb: Any, jobs: list[_Job]) -> list[JudgeReport]:
    """`judge_many` through `sb.arun`; the jobs judged again alone run concurrently."""
    import time

    nonce, files, limits = _call(jobs, getattr(sb, "limits", None))
    t0 = time.monotonic()
    res = await sb.arun(harness_source(), language="python", files=files, limits=limits, trusted=True,
                        **_call_options(sb, jobs))
    reports = _parse(res, nonce, jobs, time.monotonic() - t0)
    again = [job for r, job in zip(reports, jobs, strict=True) if r is None]
    alone = iter(await asyncio.gather(*(ajudge_many(sb, [job]) for job in again)))
    return [r if r is not None else next(alone)[0] for r in reports]


def judge(sb: Any, program: str, tests: Any, mode: str = "stdio", *, language: str = "python",
          checker: str = "tokens", abs_tol: float = 1e-6, rel_tol: float = 1e-9, checker_program: str | None = None,
          time_limit_s: float = 2.0, memory_mb: int = 256, output_bytes: int = _defaults.OUTPUT_BYTES,
          stop_at_first_failure: bool = False, checker_args: Any = None, validator: Any = None) -> JudgeReport:
    """Run `program` against `tests` in one call of sandbox `sb`; see the module docstring.

    language: "python" or "cpp" (stdio only). checker: "tokens" (default, whitespace-insensitive),
    "exact", "float" (abs_tol/rel_tol; also used for call-form values), "custom" (checker_program),
    "kattis" (Kattis's default validator; checker_args: its flags). validator: a Kattis output
    validator (`toolgym.sandbox.validators.OutputValidator`). time_limit_s, memory_mb and output_bytes
    are per test.
    """
    job = build_job(program, tests, mode, language=language, checker=checker, abs_tol=abs_tol, rel_tol=rel_tol,
                    checker_program=checker_program, time_limit_s=time_limit_s, memory_mb=memory_mb,
                    output_bytes=output_bytes, stop_at_first_failure=stop_at_first_failure,
                    checker_args=checker_args, validator=validator)
    refused = _refusal(sb, job)
    return refused if refused is not None else judge_many(sb, [_submitted(job)])[0]


async def ajudge(sb: Any, program: str, tests: Any, mode: str = "stdio", *, language: str = "python",
                 checker: str = "tokens", abs_tol: float = 1e-6, rel_tol: float = 1e-9,
                 checker_program: str | None = None, time_limit_s: float = 2.0, memory_mb: int = 256,
                 output_bytes: int = _defaults.OUTPUT_BYTES, stop_at_first_failure: bool = False, checker_args: Any = None,
                 validator: Any = None) -> JudgeReport:
    """`judge` for asyncio. Concurrent calls on one sandbox are micro-batched: while every pool
    worker is busy, waiting submissions are packed into the next sandbox call (each still in
    its own processes), which amortizes the per-call start-up over many submissions."""
    job = build_job(program, tests, mode, language=language, checker=checker, abs_tol=abs_tol, rel_tol=rel_tol,
                    checker_program=checker_program, time_limit_s=time_limit_s, memory_mb=memory_mb,
                    output_bytes=output_bytes, stop_at_first_failure=stop_at_first_failure,
                    checker_args=checker_args, validator=validator)
    refused = _refusal(sb, job)
    return refused if refused is not None else await _batcher(sb).submit(_submitted(job))


# ------------------------------------------------------------------------------ micro-batching
_BATCHERS: weakref.WeakKeyDictionary[Any, dict[int, _Batcher]] = weakref.WeakKeyDictionary()
MAX_BATCH = 32


class _Batcher:
    """Keeps at most `slots` sandbox calls in flight; queued jobs ride together in the next one."""

    def __init__(self, sb: Any, slots: int):
        self.sb = sb
        self.slots = max(1, slots)
        self.busy = 0
        self.queue: list[tuple[_Job, asyncio.Future[JudgeReport]]] = []
        self.loop: asyncio.AbstractEventLoop | None = None

    async def submit(self, job: _Job) -> JudgeReport:
        """The job's report. Its wait (for a free slot, for batch-mates, for calls that failed for
        others) counts on the caller's wait clock; its own share (`own_s`) does not."""
        fut: asyncio.Future[JudgeReport] = asyncio.get_running_loop().create_future()
        self.queue.append((job, fut))
        clock = waiting.current()
        token = clock.start() if clock is not None else None
        try:
            self._pump()
            report = await fut
        finally:
            if token is not None:
                clock.stop(token)
        if clock is not None:
            clock.charge(report.own_s)
        return report

    def _pump(self) -> None:
        pool = getattr(self.sb, "_pool", None) if isinstance(self.sb, Sandbox) else None
        idle = pool.idle_served() if pool is not None and self.queue and self.busy < self.slots else []
        while self.queue and self.busy < self.slots:
            # Share the queue fairly among free slots, at most MAX_BATCH per call, no more than one call
            # carries (each job alone fits: see _refusal), and no two tenants of one key (two episodes of a
            # task, or two jobs of the same tests outside episodes) in one call: see sandbox.tenancy.
            free = self.slots - self.busy
            n = max(1, min(MAX_BATCH, -(-len(self.queue) // free)))
            room = MAX_INPUT_BYTES - _CALL_OVERHEAD
            # formed to fit an idle sandbox (what it has served counts as held), so that the call runs at once
            # instead of waiting for a busy one or starting a fresh one: one that takes the first job, else one
            # that takes any queued job (the jobs it cannot take wait for another sandbox)
            target = _fitted(idle, [job.occupants for job, _ in self.queue])
            if target is not None:
                idle.remove(target)
            taken: dict[str, str] = {}
            batch, rest, held = [], [], collections.ChainMap(taken, target or {})
            for item in self.queue:
                job = item[0]
                if len(batch) < n and job.size <= room and not tenancy.conflict(held, job.occupants):
                    batch.append(item)
                    taken.update(job.occupants)
                    room -= job.size
                else:
                    rest.append(item)
            self.queue = rest
            self.busy += 1
            # in a context of its own: the call's time is no one episode's (each is charged its own share)
            asyncio.get_running_loop().create_task(self._run(batch), context=contextvars.Context())

    async def _run(self, batch: list[tuple[_Job, asyncio.Future[JudgeReport]]]) -> None:
        try:
            reports = await ajudge_many(self.sb, [job for job, _ in batch])
            for (_, fut), rep in zip(batch, reports, strict=True):
                if not fut.done():
                    fut.set_result(rep)
        except BaseException as e:  # noqa: BLE001 - handed to every waiter
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(e)
        finally:
            self.busy -= 1
            self._pump()


def _fitted(idle: list[Mapping[str, str]], queued: list[tenancy.Occupants]) -> Mapping[str, str] | None:
    """The idle sandbox (what it has served) a call should be formed for: the first that can take the
    queue's first job, else the first that can take any queued job; None when none can take any."""
    first = next((m for m in idle if not tenancy.conflict(m, queued[0])), None)
    if first is not None:
        return first
    return next((m for m in idle if any(not tenancy.conflict(m, occ) for occ in queued[1:])), None)


def _slots(sb: Any) -> int:
    pool = getattr(sb, "_pool", None)
    for attr in ("size", "pool_size", "_size"):
        n = getattr(pool, attr, None) or getattr(sb, attr, None)
        if isinstance(n, int) and n > 0:
            return n
    return os.cpu_count() or 1


def _batcher(sb: Any) -> _Batcher:
    loop = asyncio.get_running_loop()
    per_loop = _BATCHERS.setdefault(sb, {})
    b = per_loop.get(id(loop))
    if b is None or b.loop is not loop:
        per_loop.clear()  # a finished loop's batcher is of no further use
        b = per_loop[id(loop)] = _Batcher(sb, _slots(sb))
        b.loop = loop
    return b
