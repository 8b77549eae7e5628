"""toolgym/CodeContest-v0: HumanEval/MBPP/LeetCode from the cache, LiveCodeBench and CodeContests
files, hidden-test rewards, public-test feedback and the run_tests tool, on a real sandbox."""

from __future__ import annotations

import base64
import json
import zlib

import pytest

import toolgym
from toolgym.assets import load_records
from toolgym.envs.checker import check_env
from toolgym.envs.sources import TaskValidationError


def block(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```"


def test_mbpp_canonical_solution_passes_and_bad_ones_do_not(any_sandbox):
    rows = load_records("mbpp")[:3]
    env = toolgym.make("toolgym/CodeContest-v0", dataset=rows, sandbox=any_sandbox)
    obs, info = env.reset(options={"index": 0})
    assert rows[0]["tests"][0] in obs[-1]["content"]  # one public example is shown
    assert "assert" not in json.dumps(info)  # hidden tests never travel in info
    *_, r, term, _, info = env.step(block(rows[0]["code"]))
    assert term and r == 1.0, info
    assert info["finish_reason"] == "answer" and info["answer"].split() == rows[0]["code"].split()  # the program
    env.reset(options={"index": 0})
    *_, r, _, _, _ = env.step(block(f"def {rows[0]['entry_point']}(*a):\n    return None"))
    assert r == 0.0
    env.reset(options={"index": 0})
    *_, r, _, _, _ = env.step(block("import sys\nsys.exit(0)"))  # exiting early must not fake a pass
    assert r == 0.0
    env.reset(options={"index": 0})
    *_, r, _, _, info = env.step("I cannot solve this.")
    assert r == 0.0 and info["finish_reason"] == "no_answer"


def test_partial_credit_and_all_or_nothing(local_sandbox):
    row = {"id": "sq", "prompt": "Write square(x).", "code": "", "setup_code": "", "entry_point": "square",
           "tests": ["assert square(2) == 4", "assert square(3) == 9", "assert square(0) == 0", "assert square(-1) == 1"]}
    cheat = "def square(x):\n    return {2: 4, 3: 9}.get(x, 7)"
    frac = toolgym.make("toolgym/CodeContest-v0", dataset=[row], sandbox=local_sandbox)
    frac.reset(seed=0)
    _, r, _, _, info = frac.step(block(cheat))
    assert r == pytest.approx(0.5)
    assert info["judge"]["passed"] == 2 and info["judge"]["total"] == 4
    allnone = toolgym.make("toolgym/CodeContest-v0", dataset=[row], sandbox=local_sandbox, reward_mode="all")
    allnone.reset(seed=0)
    assert allnone.step(block(cheat))[1] == 0.0


def test_humaneval_full_function_and_body_only(local_sandbox):
    row = load_records("humaneval")[0]
    env = toolgym.make("toolgym/CodeContest-v0", dataset=[row], sandbox=local_sandbox)
    env.reset(seed=0)
    *_, r, _, _, _ = env.step(block(row["prompt"] + row["canonical_solution"]))
    assert r == 1.0
    env.reset(seed=0)
    *_, r, _, _, _ = env.step(block(row["canonical_solution"]))  # body only: the prompt is prepended
    assert r == 1.0


def test_leetcode_records(local_sandbox):
    rows = load_records("leetcode", split="train")
    env = toolgym.make("toolgym/CodeContest-v0", dataset="leetcode", split="train", limit=5, sandbox=local_sandbox)
    obs, info = env.reset(options={"index": 0})
    assert rows[0]["starter_code"].strip()[:20] in obs[-1]["content"]
    *_, r, term, _, info = env.step(block(rows[0]["starter_code"]))  # stubs fail
    assert term and r < 1.0


def lcb_row():
    public = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]
    private = [{"input": "5 7\n", "output": "12\n", "testtype": "stdin"}, {"input": "-1 1\n", "output": "0\n", "testtype": "stdin"}]
    packed = base64.b64encode(zlib.compress(json.dumps(private).encode())).decode()
    return {"question_id": "lcb1", "question_content": "Read a and b, print a+b.",
            "public_test_cases": json.dumps(public), "private_test_cases": packed}


def codecontests_row():
    return {"name": "cc1", "description": "Print the sum of two integers.",
            "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
            "private_tests": {"input": ["10 20\n"], "output": ["30\n"]},
            "generated_tests": {"input": ["0 0\n"], "output": ["0\n"]}}


@pytest.mark.parametrize("row", [lcb_row(), codecontests_row()], ids=["livecodebench", "codecontests"])
def test_stdio_formats_from_local_files(tmp_path, local_sandbox, row):
    p = tmp_path / "problems.jsonl"
    p.write_text(json.dumps(row) + "\n")
    env = toolgym.make("toolgym/CodeContest-v0", dataset=str(p), sandbox=local_sandbox)
    obs, info = env.reset(seed=0)
    assert info["metadata"]["mode"] == "stdio"
    *_, r, _, _, _ = env.step(block("a, b = map(int, input().split())\nprint(a + b)"))
    assert r == 1.0
    env.reset(seed=0)
    *_, r, _, _, _ = env.step(block("a, b = map(int, input().split())\nprint(a + b if a == 1 else 0)"))
    assert 0.0 < r < 1.0


def test_livecodebench_functional_tests(local_sandbox):
    tests = [{"input": "[1, 2, 3]\n2", "output": "12", "testtype": "functional"},
             {"input": "[5]\n3", "output": "15", "testtype": "functional"}]
    row = {"question_id": "f1", "question_content": "Return sum(nums) * k.", "starter_code": "class Solution:\n    def scaled(self, nums, k):\n        pass",
           "public_test_cases": json.dumps(tests[:1]), "private_test_cases": json.dumps(tests[1:]),
           "metadata": json.dumps({"func_name": "scaled"})}
    env = toolgym.make("toolgym/CodeContest-v0", dataset=[row], sandbox=local_sandbox)
    obs, info = env.reset(seed=0)
    assert info["metadata"]["mode"] == "function" and "def scaled" in obs[-1]["content"]
    good = "class Solution:\n    def scaled(self, nums, k):\n        return sum(nums) * k"
    assert env.step(block(good))[1] == 1.0
    env.reset(seed=0)
    assert env.step(block(good.replace("* k", "* 2")))[1] == 0.5


def test_feedback_turns_show_public_results(local_sandbox):
    env = toolgym.make("toolgym/CodeContest-v0", dataset=[codecontests_row()], sandbox=local_sandbox, feedback_turns=1)
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step(block("print(0)"))
    assert not term and obs[0]["role"] == "user" and "passed 0/1" in obs[0]["content"] and "WA" in obs[0]["content"]
    obs, r, term, trunc, info = env.step(block("a, b = map(int, input().split())\nprint(a + b)"))
    assert term and r == 1.0


def test_run_tests_tool_uses_public_tests_only(local_sandbox):
    env = toolgym.make("toolgym/CodeContest-v0", dataset=[codecontests_row()], sandbox=local_sandbox, tools=True)
    obs, info = env.reset(seed=0)
    assert [t["function"]["name"] for t in info["tools"]] == ["run_tests"]
    call = json.dumps({"name": "run_tests", "arguments": {"code": "a, b = map(int, input().split())\nprint(a + b)"}})
    obs, r, term, *_ = env.step(f"<tool_call>{call}</tool_call>")
    assert not term and obs[0]["content"].startswith("passed 1/1")


def test_bad_code_records():
    with pytest.raises(TaskValidationError, match="row 0: field 'public_tests'"):
        toolgym.make("toolgym/CodeContest-v0", dataset=[{"name": "x", "description": "d", "public_tests": {"input": ["1"], "output": []}}], sandbox=None)
    with pytest.raises(TaskValidationError, match="row 0: .*no func_name"):
        toolgym.make("toolgym/CodeContest-v0", sandbox=None, dataset=[{"question_content": "q", "public_test_cases": [{"input": "1", "output": "1", "testtype": "functional"}]}])
    with pytest.raises(TaskValidationError, match="no hidden tests"):
        toolgym.make("toolgym/CodeContest-v0", dataset=[{"prompt": "p", "tests": []}], sandbox=None)


@pytest.mark.slow
def test_checker_passes():
    assert [c.name for c in check_env(lambda: toolgym.make("toolgym/CodeContest-v0")) if not c.ok] == []


def test_a_failed_submission_leaves_feedback_without_hidden_answers(local_sandbox):
    """MOPD/SDPO's own-feedback context: the env's verdict on a failed attempt, statuses only (the counts,
    the first failing test's index and kind), never a hidden test's message, input or expected value; nothing
    on success."""
    row = {"id": "sq", "prompt": "Write square(x).", "code": "", "setup_code": "", "entry_point": "square",
           "tests": ["assert square(2) == 4", "assert square(3) == 9", "assert square(7) == 49"]}
    env = toolgym.make("toolgym/CodeContest-v0", dataset=[row], sandbox=local_sandbox)
    env.reset(seed=0)
    *_, info = env.step(block("def square(x):\n    if x == 7:\n        raise ValueError(f'seven is hard: {x}')\n    return x * x"))
    assert info["feedback_text"] == "2/3 tests passed (AC 2, RE 1); first failure: test 3 (RE)"
    env.reset(seed=0)
    *_, ok = env.step(block("def square(x):\n    return x * x"))
    assert "feedback_text" not in ok


@pytest.mark.parametrize("mode", ["function", "stdio"])
def test_hidden_expected_values_never_reach_the_feedback(local_sandbox, mode):
    secret = 987654321
    if mode == "function":
        row = {"id": "k", "prompt": "Write key().", "mode": "function", "entry_point": "key",
               "tests": [{"call": "key", "args": [], "expected": secret}]}
        wrong = "def key():\n    return 1"
    else:
        row = {"id": "k", "prompt": "Print the key.", "mode": "stdio", "tests": [{"input": "", "output": f"{secret}\n"}]}
        wrong = "print(1)"
    env = toolgym.make("toolgym/CodeContest-v0", dataset=[row], sandbox=local_sandbox)
    env.reset(seed=0)
    *_, info = env.step(block(wrong))
    assert info["feedback_text"] == "0/1 tests passed (WA 1); first failure: test 1 (WA)"
    assert str(secret) not in json.dumps(info)


@pytest.mark.slow
def test_run_tests_tool_judges_with_the_environments_limits(local_sandbox):
    """The tool checks public tests as the reward checks hidden ones: with the env's memory (and time) limit,
    not the judge's defaults (it once ran them at 256 MiB while the reward allowed the env's memory_mb)."""
    big = "x = bytearray(320 * 2**20)\na, b = map(int, input().split())\nprint(a + b + x[-1])"
    call = json.dumps({"name": "run_tests", "arguments": {"code": big}})
    shown = {}
    for memory_mb in (None, 480):  # the fixture's sandbox has 512 MiB: a per-test limit above it is refused
        env = toolgym.make("toolgym/CodeContest-v0", dataset=[codecontests_row()], sandbox=local_sandbox, tools=True,
                           memory_mb=memory_mb, time_limit_s=20.0)  # time enough on a loaded machine
        env.reset(seed=0)
        obs, *_ = env.step(f"<tool_call>{call}</tool_call>")
        *_, r, _, _, _ = env.step(block(big))
        shown[memory_mb] = (obs[0]["content"].splitlines()[0], r)
        env.close()
    assert shown == {None: ("passed 0/1 public tests", 0.0), 480: ("passed 1/1 public tests", 1.0)}, shown
