"""toolgym/CodeContest-v0 on a folder of Kattis problem packages (problemtools' examples, MIT, from
the test-data cache that scripts/setup.sh fills): the package's own output validator decides the
reward, interactive problems included, on a real sandbox."""

from __future__ import annotations

import json

import pytest

import toolgym
from tests.kattis_data import PROBLEMTOOLS, cached_testdata

GUESS = """lo, hi = 1, 1000
while True:
    mid = (lo + hi) // 2
    print(mid, flush=True)
    reply = input().strip()
    if reply == "correct":
        break
    if reply == "higher":
        lo = mid + 1
    else:
        hi = mid - 1
"""


@pytest.fixture(scope="module")
def examples():
    return cached_testdata(PROBLEMTOOLS) / "examples"


def block(code: str) -> str:
    return f"My solution:\n```python\n{code}\n```"


@pytest.mark.slow
def test_kattis_packages_are_tasks_judged_by_their_validators(examples, local_sandbox):
    env = toolgym.make("toolgym/CodeContest-v0", dataset=f"kattis:{examples}", sandbox=local_sandbox,
                       reward_mode="fraction")
    ids = [env.unwrapped.source.get(i).id for i in range(len(env.unwrapped.source))]
    assert ids == ["different", "guess", "hello", "oddecho"]
    obs, info = env.reset(options={"index": 1})
    assert "Guess the Number" in obs[-1]["content"] and "interactive" in obs[-1]["content"]
    assert "validate" not in json.dumps(info)  # the validator and the answers stay in the ground truth
    *_, r, _, _, info = env.step(block(GUESS))
    assert r == 1.0 and info["judge"]["total"] == 10, info["judge"]
    env.reset(options={"index": 1})
    *_, r, _, _, info = env.step(block((examples / "guess/submissions/wrong_answer/guess.py").read_text()))
    assert 0 < r < 1 and "WA" in info["judge"]["statuses"], info["judge"]

    env.reset(options={"index": 0})
    *_, r, _, _, _ = env.step(block((examples / "different/submissions/accepted/different_py3.py").read_text()))
    assert r == 1.0
    env.reset(options={"index": 0})
    *_, r, _, _, info = env.step(block("import sys\nfor line in sys.stdin:\n    a, b = map(int, line.split())\n"
                                       "    print(a - b)\n"))  # no abs(): wrong where b > a
    assert r < 1.0 and "WA" in info["judge"]["statuses"]


def test_a_plain_folder_of_packages_is_recognised(examples, local_sandbox):
    env = toolgym.make("toolgym/CodeContest-v0", dataset=str(examples), sandbox=local_sandbox, limit=1)
    assert len(env.unwrapped.source) == 1 and env.unwrapped.source.get(0).metadata["source"] == "kattis"
