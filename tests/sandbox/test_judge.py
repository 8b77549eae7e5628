"""The judge: stdio and function modes, every checker, every verdict, on both backends.

Uses the real sandboxes of tests/sandbox/conftest.py (`sb`: one per backend).
"""

from __future__ import annotations

import asyncio

import pytest

from toolgym.errors import ToolgymError
from toolgym.sandbox.judging import JudgeInputError, TestCase, ajudge, judge

ADD_STDIO = "a, b = map(int, input().split())\nprint(a + b)\n"
ADD_FN = "def add(a, b):\n    return a + b\n"


def statuses(report) -> list[str]:
    return [v.status for v in report.verdicts]


# ------------------------------------------------------------------------------ stdio mode
def test_stdio_accepts_right_and_rejects_wrong_output(sb):
    r = judge(sb, ADD_STDIO, [TestCase(input="1 2\n", output="3\n"), TestCase(input="2 2\n", output="5\n"),
                              TestCase(input="10 -4\n", output="6")], mode="stdio")
    assert statuses(r) == ["AC", "WA", "AC"]
    assert (r.passed, r.total) == (2, 3)
    assert r.fraction == pytest.approx(2 / 3)
    assert r.all_or_nothing == 0.0 and not r.all_passed
    wa = r.verdicts[1]
    assert "5" in wa.message and "4" in wa.message  # expected vs got, in the diff excerpt
    assert wa.expected.strip() == "5" and wa.got.strip() == "4"
    assert all(v.time_s > 0 for v in r.verdicts)


def test_all_or_nothing_is_one_when_every_test_passes(sb):
    r = judge(sb, ADD_STDIO, [TestCase(input="1 2\n", output="3\n"), TestCase(input="5 5\n", output="10\n")])
    assert r.all_passed and r.all_or_nothing == 1.0 and r.fraction == 1.0


def test_exact_checker_is_byte_exact_and_tokens_is_not(sb):
    prog = "print('1  2')\nprint('3')\n"
    tests = [TestCase(input="", output="1 2\n3")]
    assert statuses(judge(sb, prog, tests, checker="exact")) == ["WA"]
    assert statuses(judge(sb, prog, tests, checker="tokens")) == ["AC"]
    assert statuses(judge(sb, prog, [TestCase(input="", output="1  2\n3\n")], checker="exact")) == ["AC"]
    wa = judge(sb, prog, tests, checker="exact").verdicts[0]
    assert "line 1" in wa.message


def test_float_checker_uses_abs_and_rel_tolerance(sb):
    prog = "print('x', 1/3, 1000001.0)\n"
    close = [TestCase(input="", output="x 0.3333333 1000000.0")]
    assert statuses(judge(sb, prog, close, checker="float", abs_tol=1e-6, rel_tol=1e-6)) == ["AC"]
    # 1e-6 absolute is too tight for the 1.0 gap at 1e6 without a relative tolerance
    r = judge(sb, prog, close, checker="float", abs_tol=1e-6, rel_tol=0.0)
    assert statuses(r) == ["WA"] and "token 3" in r.verdicts[0].message
    # non-numeric tokens must match exactly
    assert statuses(judge(sb, prog, [TestCase(input="", output="y 0.3333333 1000001")], checker="float")) == ["WA"]
    # token count matters
    assert statuses(judge(sb, prog, [TestCase(input="", output="x 0.3333333")], checker="float")) == ["WA"]


CHECK_MULTIPLE = """
def check(input, expected, got):
    n = int(got.split()[0])
    return n % int(expected) == 0, f"{n} is not a multiple of {expected.strip()}"
"""


def test_custom_checker_receives_input_expected_and_got(sb):
    prog = "print(int(input()) * 2)\n"
    r = judge(sb, prog, [TestCase(input="5\n", output="5"), TestCase(input="7\n", output="4"),
                         TestCase(input="6\n", output="4")], checker="custom", checker_program=CHECK_MULTIPLE)
    assert statuses(r) == ["AC", "WA", "AC"]  # 10 % 5 == 0, 14 % 4 != 0, 12 % 4 == 0
    assert "14 is not a multiple of 4" in r.verdicts[1].message


def test_custom_checker_that_crashes_fails_the_test_and_says_so(sb):
    r = judge(sb, "print(1)\n", [TestCase(input="", output="1")], checker="custom",
              checker_program="def check(i, e, g):\n    raise RuntimeError('broken checker')\n")
    assert statuses(r) == ["WA"]
    assert "broken checker" in r.verdicts[0].message
    assert any("broken checker" in n for n in r.notes)


@pytest.mark.slow
def test_stdio_verdict_kinds(sb):
    cases = {
        "TLE": "while True:\n    pass\n",
        "RE": "raise ValueError('boom')\n",
        "MLE": "x = bytearray(1 << 30)\nprint(len(x))\n",
        "OLE": "import sys\nsys.stdout.write('y' * 200000)\n",
    }
    for want, prog in cases.items():
        r = judge(sb, prog, [TestCase(input="", output="0")], time_limit_s=1.0, memory_mb=128,
                  output_bytes=10000)
        assert statuses(r) == [want], (want, r.verdicts[0])
    re_exit = judge(sb, "print(3)\nraise SystemExit(3)\n", [TestCase(input="", output="3")])
    assert statuses(re_exit) == ["RE"] and "exit code 3" in re_exit.verdicts[0].message
    assert "ValueError" in judge(sb, cases["RE"], [TestCase(input="", output="0")]).verdicts[0].message


@pytest.mark.slow
def test_timeout_is_per_test_and_time_is_reported(sb):
    prog = "import time\nn = int(input())\ntime.sleep(n / 10)\nprint(n)\n"
    r = judge(sb, prog, [TestCase(input="0\n", output="0"), TestCase(input="4\n", output="4"),
                         TestCase(input="30\n", output="30"), TestCase(input="1\n", output="1")],
              time_limit_s=1.5)
    assert statuses(r) == ["AC", "AC", "TLE", "AC"]
    assert r.verdicts[1].time_s >= 0.4  # it slept 0.4 s
    assert r.verdicts[2].time_s >= 1.5


def test_stop_at_first_failure_skips_the_rest(sb):
    tests = [TestCase(input="1 1\n", output="3"), TestCase(input="1 2\n", output="3"),
             TestCase(input="2 2\n", output="4")]
    assert statuses(judge(sb, ADD_STDIO, tests)) == ["WA", "AC", "AC"]
    r = judge(sb, ADD_STDIO, tests, stop_at_first_failure=True)
    assert statuses(r) == ["WA", "SKIPPED", "SKIPPED"]
    assert r.passed == 0 and r.total == 3
    r = judge(sb, ADD_STDIO, tests[1:] + tests[:1], stop_at_first_failure=True)
    assert statuses(r) == ["AC", "AC", "WA"]


def test_cpp_program_compile_error_and_run(sb):
    src = "#include <cstdio>\nint main(){long a,b;scanf(\"%ld %ld\",&a,&b);printf(\"%ld\\n\",a+b);}\n"
    r = judge(sb, src, [TestCase(input="1 2\n", output="3"), TestCase(input="1 2\n", output="4")], language="cpp")
    assert statuses(r) == ["AC", "WA"]
    r = judge(sb, "int main( {", [TestCase(input="", output="")] * 2, language="cpp")
    assert statuses(r) == ["CE", "CE"] and "error" in r.verdicts[0].message
    r = judge(sb, "#include <vector>\nint main(){std::vector<char> v(1L<<33); return v[5];}\n",
              [TestCase(input="", output="")], language="cpp", memory_mb=128)
    assert statuses(r) == ["MLE"]


def test_input_is_fed_on_stdin_in_full(sb):
    big = " ".join(str(i) for i in range(200000))
    prog = "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n"
    r = judge(sb, prog, [TestCase(input=big, output=str(sum(range(200000))))])
    assert statuses(r) == ["AC"]


# ------------------------------------------------------------------------------ function mode
def test_function_mode_assert_tests(sb):
    r = judge(sb, ADD_FN, [TestCase(code="assert add(1, 2) == 3"), TestCase(code="assert add(1, 2) == 4, 'off'"),
                           TestCase(code="assert add('a', 1) == 'a1'")], mode="function")
    assert statuses(r) == ["AC", "WA", "RE"]
    assert "off" in r.verdicts[1].message
    assert "TypeError" in r.verdicts[2].message


HUMANEVAL_PROMPT = '''from typing import List


def has_close_elements(numbers: List[float], threshold: float) -> bool:
    """ Check if in given list of numbers, are any two numbers closer to each other than
    given threshold.
    """
'''
HUMANEVAL_SOLUTION = """    for idx, elem in enumerate(numbers):
        for idx2, elem2 in enumerate(numbers):
            if idx != idx2 and abs(elem - elem2) < threshold:
                return True
    return False
"""
HUMANEVAL_TEST = """

METADATA = {'author': 'jt', 'dataset': 'test'}


def check(candidate):
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) == False
    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) == True
"""


def test_humaneval_style_problem(sb):
    test = TestCase(code=HUMANEVAL_TEST + "\ncheck(has_close_elements)")
    good = judge(sb, HUMANEVAL_PROMPT + HUMANEVAL_SOLUTION, [test], mode="function")
    assert statuses(good) == ["AC"]
    bare = judge(sb, HUMANEVAL_PROMPT, [test], mode="function")
    assert statuses(bare) == ["WA"]


def test_function_mode_call_form_is_compared_by_the_harness(sb):
    prog = ADD_FN + "def pair(x, y=0):\n    return (x, [y, {'k': x}])\n\ndef third():\n    return 1 / 3\n" \
                    "def weird():\n    return {1, 2}\n"
    r = judge(sb, prog, [TestCase(call="add", args=[1, 2], expected=3),
                         TestCase(call="add", args=[1, 2], expected=4),
                         TestCase(call="pair", args=[5], kwargs={"y": 6}, expected=[5, [6, {"k": 5}]]),
                         TestCase(call="third", expected=0.333333),
                         TestCase(call="weird", expected=[1, 2]),
                         TestCase(call="add", args=["x", 1], expected="x1")], mode="function")
    assert statuses(r) == ["AC", "WA", "AC", "WA", "WA", "RE"]
    assert "expected 4, got 3" in r.verdicts[1].message
    assert "JSON" in r.verdicts[4].message
    r = judge(sb, prog, [TestCase(call="third", expected=0.333333)], mode="function", checker="float",
              abs_tol=1e-5)
    assert statuses(r) == ["AC"]


def test_call_form_accepts_an_expression_for_methods(sb):
    prog = "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n" \
           "        for i, n in enumerate(nums):\n            if target - n in seen:\n" \
           "                return [seen[target - n], i]\n            seen[n] = i\n"
    r = judge(sb, prog, [TestCase(call="Solution().twoSum", args=[[2, 7, 11, 15], 9], expected=[0, 1]),
                         TestCase(call="Solution().twoSum", args=[[3, 2, 4], 6], expected=[0, 2])],
              mode="function")
    assert statuses(r) == ["AC", "WA"]


@pytest.mark.slow
def test_function_mode_verdict_kinds(sb):
    slow = "def f():\n    while True:\n        pass\n"
    hog = "def f():\n    return len(bytearray(1 << 31))\n"
    chatty = "def f():\n    print('z' * 100000)\n    return 1\n"
    assert statuses(judge(sb, slow, [TestCase(code="assert f() == 1")], mode="function",
                          time_limit_s=1.0)) == ["TLE"]
    assert statuses(judge(sb, hog, [TestCase(code="assert f() == 1")], mode="function",
                          memory_mb=128)) == ["MLE"]
    assert statuses(judge(sb, chatty, [TestCase(code="assert f() == 1")], mode="function",
                          output_bytes=1000)) == ["OLE"]
    r = judge(sb, "def f(:\n", [TestCase(code="assert f() == 1")], mode="function")
    assert statuses(r) == ["RE"] and "SyntaxError" in r.verdicts[0].message
    r = judge(sb, "import nonexistent_module_xyz\n", [TestCase(code="pass")], mode="function")
    assert statuses(r) == ["RE"] and "ModuleNotFoundError" in r.verdicts[0].message


def test_each_test_gets_a_fresh_process(sb):
    prog = "state = []\ndef push(x):\n    state.append(x)\n    return len(state)\n"
    r = judge(sb, prog, [TestCase(code="assert push(1) == 1")] * 3 + [TestCase(call="push", args=[0], expected=1)],
              mode="function")
    assert statuses(r) == ["AC"] * 4


def test_function_mode_stop_at_first_failure(sb):
    r = judge(sb, ADD_FN, [TestCase(code="assert add(1, 1) == 3"), TestCase(code="assert add(1, 2) == 3")],
              mode="function", stop_at_first_failure=True)
    assert statuses(r) == ["WA", "SKIPPED"]


async def test_ajudge_concurrent_submissions_get_their_own_verdicts(sb):
    progs = [f"def add(a, b):\n    return a + b + {k}\n" for k in range(6)]
    reports = await asyncio.gather(*(ajudge(sb, p, [TestCase(code="assert add(1, 2) == 3"),
                                                    TestCase(call="add", args=[0, 0], expected=k)],
                                            mode="function") for k, p in enumerate(progs)))
    assert statuses(reports[0]) == ["AC", "AC"]
    for k in range(1, 6):
        assert statuses(reports[k]) == ["WA", "AC"], k
    stdio = await ajudge(sb, ADD_STDIO, [TestCase(input="1 2\n", output="3")])
    assert statuses(stdio) == ["AC"]


# ------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("kwargs, fragment", [
    ({"tests": []}, "empty"),
    ({"tests": "1 2"}, "list of TestCase"),
    ({"tests": [42]}, "TestCase"),
    ({"tests": [{"input": "1", "outptu": "2"}]}, "outptu"),
    ({"tests": [TestCase(input="1")]}, "output"),
    ({"tests": [TestCase(input=1, output="1")]}, "input must be a str"),
    ({"tests": [TestCase(code="assert 1")]}, "stdio tests take input/output"),
    ({"mode": "batch"}, "unknown judge mode"),
    ({"checker": "fuzzy"}, "unknown checker"),
    ({"checker": "custom"}, "checker_program"),
    ({"checker": "exact", "checker_program": "def check(i, e, g): return True"}, "only used with"),
    ({"language": "rust"}, "unknown judge language"),
    ({"time_limit_s": 0}, "time_limit_s"),
    ({"memory_mb": 4}, "memory_mb"),
    ({"abs_tol": -1.0}, "abs_tol"),
    ({"program": b"print(1)"}, "program must be a str"),
])
def test_bad_stdio_input_is_rejected_before_any_sandbox_call(kwargs, fragment):
    args = {"program": ADD_STDIO, "tests": [TestCase(input="1 2\n", output="3")], "mode": "stdio"}
    args.update(kwargs)
    with pytest.raises(JudgeInputError, match=fragment) as info:
        judge(None, args.pop("program"), args.pop("tests"), **args)
    assert isinstance(info.value, ToolgymError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("kwargs, fragment", [
    ({"tests": [TestCase(input="1", output="2")]}, "not input/output"),
    ({"tests": [TestCase(code="assert 1", call="f", expected=1)]}, "exactly one"),
    ({"tests": [TestCase()]}, "exactly one"),
    ({"tests": [TestCase(code="   ")]}, "non-empty"),
    ({"tests": [TestCase(call="f")]}, "expected="),
    ({"tests": [TestCase(call="f", expected=object())]}, "JSON"),
    ({"tests": [TestCase(call="f", args=[object()], expected=1)]}, "JSON"),
    ({"tests": [TestCase(call="f", args=5, expected=1)]}, "args must be a list"),
    ({"language": "cpp"}, "Python programs only"),
    ({"checker": "custom", "checker_program": "def check(i, e, g): return True"}, "stdio mode only"),
])
def test_bad_function_input_is_rejected(kwargs, fragment):
    args = {"program": ADD_FN, "tests": [TestCase(code="assert add(1, 2) == 3")], "mode": "function"}
    args.update(kwargs)
    with pytest.raises(JudgeInputError, match=fragment):
        judge(None, args.pop("program"), args.pop("tests"), **args)


async def test_ajudge_rejects_bad_input_too():
    with pytest.raises(JudgeInputError, match="unknown judge mode"):
        await ajudge(None, ADD_FN, [TestCase(code="assert 1")], mode="nope")


def test_testcase_dicts_are_accepted(sb):
    r = judge(sb, ADD_STDIO, [{"input": "1 2\n", "output": "3"}])
    assert statuses(r) == ["AC"]


def test_exported_from_the_sandbox_package():
    import toolgym.sandbox as s

    assert s.TestCase is TestCase and s.ajudge is ajudge
    # `judge` is the function, also after its module (toolgym.sandbox.judging) was imported: no module
    # shares its name, so nothing rebinds the package attribute
    import toolgym.sandbox.judging as judging_module

    assert s.judge is judging_module.judge and callable(s.judge) and not isinstance(s.judge, type(judging_module))
    with pytest.raises(JudgeInputError, match="empty"):
        s.judge(None, "print(1)", [], mode="stdio")
    from toolgym.sandbox import judge as imported

    assert imported is judging_module.judge


@pytest.mark.slow
async def test_batched_jobs_keep_solo_verdicts(sb):
    """While the pool is busy, waiting submissions share a sandbox call and run side by side;
    a time-out there is re-judged alone, so the verdicts are those of solo runs."""
    spin = "def add(a, b):\n    while True:\n        pass\n"
    progs = [ADD_FN, spin, ADD_FN, "def add(a, b):\n    return a * b\n", ADD_FN, spin]
    reports = await asyncio.gather(*(ajudge(sb, p, [TestCase(code="assert add(1, 2) == 3")], mode="function",
                                            time_limit_s=0.5) for p in progs))
    assert [statuses(r) for r in reports] == [["AC"], ["TLE"], ["AC"], ["WA"], ["AC"], ["TLE"]]
    solo = [judge(sb, p, [TestCase(code="assert add(1, 2) == 3")], mode="function", time_limit_s=0.5)
            for p in progs[:4]]
    assert [statuses(r) for r in solo] == [statuses(r) for r in reports[:4]]
