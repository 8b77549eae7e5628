"""Third-party scorers never run the model's text in the trainer (round-5 red team, x08).

Several reasoning-gym scorers `eval()` the answer (n_queens, binary_matrix, ...) or parse it with
sympy's `parse_expr` (countdown, puzzle24, ...), which evaluates Python. Under the scorer guard an
answer that tries to run code scores 0 (counted, with a note), leaves no trace on the host and
cannot rebind the scorer; a dataset whose scorer runs even its own reference answer is refused.
"""

from __future__ import annotations

import ast
import os
import subprocess
import threading

import pytest

from toolgym.envs.scoring.guard import ScorerRefused, guarded
from toolgym.envs.tasks.reasoning_gym import ReasoningGymEnv, get_dataset
from toolgym.envs.verifiers import rg_score
from toolgym.errors import ConfigError


def _episode(name: str, text: str, index: int = 3, **env_kwargs) -> tuple[float, dict]:
    """One turn of a ReasoningGym episode on task `index`: its reward and info."""
    env = ReasoningGymEnv(name, sandbox=None, **env_kwargs)
    try:
        env.reset(seed=0, options={"index": index})
        _obs, reward, _term, _trunc, info = env.step(text)
    finally:
        env.close()
    return reward, info


def test_an_answer_that_a_scorer_evals_runs_nothing_and_scores_zero(tmp_path):
    mark = tmp_path / "written-by-the-answer"
    payload = (f"<answer>open({str(mark)!r}, 'w').write('x') and setattr(type(self), 'score_answer', "
               "lambda s, answer=None, entry=None: 1.0)</answer>")
    cls_scorer = type(get_dataset("n_queens", 0)).score_answer
    reward, info = _episode("n_queens", payload)
    assert reward == 0.0
    assert not mark.exists()
    assert "ScorerRefused" in info["reward_errors"]["rg_reward"]
    assert "\n" not in info["reward_errors"]["rg_reward"]
    assert type(get_dataset("n_queens", 0)).score_answer is cls_scorer  # not rebound
    assert _episode("n_queens", "<answer>no idea</answer>")[0] == 0.0  # a later wrong answer stays wrong


def test_a_refusal_scores_zero_whatever_the_scorer_returns():
    class Forgiving:  # a scorer that swallows every error and hands out full marks
        def score_answer(self, answer, entry):
            try:
                eval(answer)
            except BaseException:  # noqa: BLE001
                pass
            return 1.0

    with pytest.raises(ScorerRefused, match="Forgiving"):
        rg_score(Forgiving(), "1 + 1", {})
    assert rg_score(type("Plain", (), {"score_answer": lambda self, answer, entry: 1.0})(), "1 + 1", {}) == 1.0


@pytest.mark.parametrize("dataset", ["countdown", "puzzle24", "polynomial_multiplication", "simple_integration"])
def test_a_dataset_whose_scorer_runs_its_reference_answer_is_refused(dataset):
    with pytest.raises(ConfigError, match=f"{dataset}.*runs the answer as code") as err:
        ReasoningGymEnv(dataset, sandbox=None)
    assert "\n" not in str(err.value)


def test_the_guard_refuses_code_and_host_actions_and_allows_parsing(tmp_path):
    actions = {
        "eval": lambda: eval("1 + 1"),
        "exec": lambda: exec("x = 1", {}),
        "write": lambda: open(tmp_path / "f", "w"),
        "os.open write": lambda: os.open(tmp_path / "g", os.O_WRONLY | os.O_CREAT),
        "subprocess": lambda: subprocess.run(["true"]),
        "os.system": lambda: os.system("true"),
        "remove": lambda: os.remove(tmp_path / "absent"),
    }
    for what, act in actions.items():
        with guarded() as guard:
            with pytest.raises(ScorerRefused):
                act()
        assert guard.tripped, what
    assert not (tmp_path / "f").exists() and not (tmp_path / "g").exists()
    with guarded() as guard:
        assert ast.literal_eval("[1, (2, 'a')]") == [1, (2, "a")]
        assert ast.parse("x + 1") is not None
        import email.mime.text  # noqa: F401 (an import runs its module's code: allowed)
        with open(__file__) as fh:  # reading is allowed
            assert fh.read(3) == '"""'

    assert guard.tripped is None


def test_the_guard_holds_only_on_its_own_thread_and_only_inside():
    seen = []
    inside, done = threading.Event(), threading.Event()

    def other() -> None:
        inside.wait(10)
        seen.append(eval("2 + 2"))
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with guarded():
        inside.set()
        assert done.wait(10)
    t.join()
    assert seen == [4] and eval("3 + 3") == 6
