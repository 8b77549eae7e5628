"""Assert-form datasets keep their verdicts across the process boundary.

Function-mode tests run in an evaluator process that calls the program in another process
(toolgym/sandbox/judging.py). Here every MBPP reference solution (and a wrong variant of each)
and LeetCode solutions with their starter stubs are judged on both backends, and each
verdict (pass or not) is compared with running the same test in the program's own process
(one `exec` per test in a fresh copy of the program's namespace, in a plain subprocess).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from tests.requirements import long_checks
from tests.test_assets import LEETCODE_SOLUTIONS
from toolgym import assets
from toolgym.envs.tasks.function_sets import leetcode
from toolgym.sandbox.judging import TestCase, ajudge

pytestmark = pytest.mark.slow  # measured over 1 s each (the fast tier leaves them out)

IN_PROCESS = r'''
import json, sys, signal
def alarm(*a):
    raise TimeoutError
signal.signal(signal.SIGALRM, alarm)
out = []
for program, tests in json.load(sys.stdin):
    ns = {"__name__": "__main__"}
    try:
        exec(compile(program, "program", "exec"), ns)
        loaded = True
    except BaseException:
        loaded = False
    row = []
    for t in tests:
        ok = False
        if loaded:
            signal.alarm(120)  # only a program that loops: none here (mbpp-123 needs 4-5 s quiet, 30 s loaded)
            try:
                exec(compile(t, "test", "exec"), dict(ns))
                ok = True
            except BaseException:
                ok = False
            finally:
                signal.alarm(0)
        row.append(ok)
    out.append(row)
print(json.dumps(out))
'''


def in_process(jobs: list[tuple[str, list[str]]]) -> list[list[bool]]:
    r = subprocess.run([sys.executable, "-c", IN_PROCESS], input=json.dumps(jobs), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


# Per test, sized for a loaded 2-core machine: mbpp-123's reference needs 4.7 s on a quiet one, so a 5 s limit
# made its verdict depend on how busy the machine was (in the judge, and in in_process's own alarm, which
# was 5 s too until a run under load 8 saw the reference fail there). No reference or wrong variant loops,
# so a longer limit changes no verdict, only how long a slow one may take.
TIME_LIMIT_S = 30


def judged(sb, jobs: list[tuple[str, list[str]]]) -> list[list[bool]]:
    async def go():
        return await asyncio.gather(*(ajudge(sb, p, [TestCase(code=t) for t in tests], mode="function",
                                             time_limit_s=TIME_LIMIT_S) for p, tests in jobs))
    return [[v.passed for v in r.verdicts] for r in asyncio.run(go())]


@pytest.fixture(scope="module")
def mbpp() -> list[dict]:
    records = assets.load_records("mbpp")
    if long_checks():
        return records
    # the short form CI runs: every fifth problem, mbpp-126 (the one known disagreement) among them
    return [r for i, r in enumerate(records) if i % 5 == 0 or r["id"] == "mbpp-126"]


@pytest.mark.long
def test_mbpp_references_and_wrong_variants_keep_their_verdicts(sb, mbpp):
    jobs = []
    for r in mbpp:
        tests = [(r["setup_code"] + "\n" if r["setup_code"] else "") + t for t in r["tests"]]
        jobs.append((r["code"], tests))
        jobs.append((r["code"] + f"\n{r['entry_point']} = lambda *a, **k: None\n", tests))  # wrong
    want, got = in_process(jobs), judged(sb, jobs)
    differ = [(mbpp[i // 2]["id"], "wrong" if i % 2 else "reference", w, g)
              for i, (w, g) in enumerate(zip(want, got, strict=True)) if w != g]
    # mbpp-126 asks for a function named `sum`: a program's names that shadow builtins never
    # reach the test (else `abs = lambda x: 0` would pass `assert abs(f() - 3) < 1e-9`), so it
    # fails here as it did with the judge before the process split
    assert differ == [("mbpp-126", "reference", [True] * 3, [False] * 3)], differ[:10]
    assert len(mbpp) in (500, 100)  # the whole set (TOOLGYM_LONG_CHECKS=1), or CI's sample
    assert sum(all(row) for row in got[::2]) >= len(mbpp) - 5  # the references pass (a handful are broken upstream)
    assert not any(all(row) for row in got[1::2])


def test_leetcode_solutions_and_stubs_keep_their_verdicts(sb):
    records = {r["id"]: r for r in assets.load_records("leetcode")}
    jobs = []
    for slug, solution in LEETCODE_SOLUTIONS.items():
        rec = records[slug]
        support = rec["starter_code"].split(f"class {rec['class_name']}")[0]
        tests = leetcode(rec, 0).tests  # as toolgym's tasks build them: the starter's judge-side classes first
        jobs += [(support + solution, tests), (rec["starter_code"], tests)]
    want, got = in_process(jobs), judged(sb, jobs)
    assert got == want
    assert all(all(row) for row in got[::2])  # every solution passes every test, guess() callbacks included
    assert not any(all(row) for row in got[1::2])
