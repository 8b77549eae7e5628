"""`make_env`, the one way a run builds an environment, and what ToolEnv does with what a run passes
(partition, dataset, seed, sandbox); the checker builds with the same function."""

from __future__ import annotations

import gymnasium
import pytest

import toolgym
from toolgym.envs import GeneratorSource, ListSource, Rubric, Task, ToolEnv
from toolgym.envs.checker import check_builds
from toolgym.envs.registry import make_env
from toolgym.errors import ConfigError


def _task(i: int) -> Task:
    return Task(id=f"t{i}", prompt=[{"role": "user", "content": f"say {i}"}], ground_truth=str(i))


class Generated(ToolEnv):
    def __init__(self, **kwargs):
        super().__init__(GeneratorSource(_task), rubric=Rubric([lambda answer, task: 0.0]), **kwargs)


class Fixed(ToolEnv):
    def __init__(self, **kwargs):
        super().__init__([_task(i) for i in range(40)], **kwargs)


class Strict(ToolEnv):
    """A constructor that takes only its own arguments: what a run passes reaches no ToolEnv."""

    def __init__(self, max_turns: int = 2):
        super().__init__(GeneratorSource(_task), max_turns=max_turns)


@pytest.fixture
def ids():
    made = {"jt/Generated-v0": Generated, "jt/Fixed-v0": Fixed, "jt/Strict-v0": Strict}
    for env_id, cls in made.items():
        toolgym.register(env_id, entry_point=cls, override=True)
    yield made
    for env_id in made:
        gymnasium.registry.pop(env_id, None)


def _ids(env, n: int) -> list[str]:
    return [env.unwrapped.source.get(i).id for i in range(n)]


def test_an_unbounded_source_is_partitioned_by_index(ids) -> None:
    train = make_env("jt/Generated-v0", partition="train", sandbox=None)
    test = make_env("jt/Generated-v0", partition="test", sandbox=None)
    whole = make_env("jt/Generated-v0", sandbox=None)
    assert _ids(train, 4) == ["t0", "t2", "t4", "t6"]
    assert _ids(test, 4) == ["t1", "t3", "t5", "t7"]
    assert _ids(whole, 3) == ["t0", "t1", "t2"]
    assert train.unwrapped.source.get(1).metadata["split"] == "train"


def test_a_sized_source_is_partitioned_by_hashed_id_and_the_parts_cover_it(ids) -> None:
    train = make_env("jt/Fixed-v0", partition="train", sandbox=None).unwrapped.source
    test = make_env("jt/Fixed-v0", partition="test", sandbox=None).unwrapped.source
    a, b = {t.id for t in train}, {t.id for t in test}
    assert not a & b and a | b == {f"t{i}" for i in range(40)}
    assert 0 < len(b) < len(a)
    other_seed = make_env("jt/Fixed-v0", partition="test", seed=5, sandbox=None).unwrapped.source
    assert {t.id for t in other_seed} != b


def test_dataset_replaces_the_envs_own_tasks(ids) -> None:
    env = make_env("jt/Generated-v0", dataset=[_task(100), _task(101)], sandbox=None)
    assert isinstance(env.unwrapped.source, ListSource)
    assert _ids(env, 2) == ["t100", "t101"]


def test_the_users_env_kwargs_win_over_what_the_run_passes(ids) -> None:
    env = make_env("jt/Generated-v0", {"partition": "test"}, partition="train", sandbox=None)
    assert _ids(env, 2) == ["t1", "t3"]


def test_a_constructor_that_refuses_what_a_run_passes_is_one_line(ids) -> None:
    with pytest.raises(ConfigError) as ei:
        make_env("jt/Strict-v0", partition="train", sandbox=None)
    msg = str(ei.value)
    assert "\n" not in msg
    assert msg.startswith("environment 'jt/Strict-v0' does not accept sandbox= (toolgym passes it)")
    assert "**kwargs" in msg
    with pytest.raises(ConfigError, match="does not accept words= \\(it is in env_kwargs\\)"):
        make_env("jt/Strict-v0", {"words": 3})
    with pytest.raises(ConfigError, match="does not accept partition= \\(toolgym passes it\\)"):
        make_env("jt/Strict-v0", partition="test")


def test_the_checker_fails_an_env_the_trainer_could_not_build(ids) -> None:
    checks = {c.name: c for c in check_builds("jt/Strict-v0")}
    build = checks["builds for training rollouts (partition='train', sandbox=...)"]
    assert not build.ok and "does not accept" in build.detail
    good = check_builds("jt/Generated-v0")
    assert all(c.ok for c in good), good
    assert any(c.name == "the train and test partitions share no task" for c in good)


def test_a_module_prefix_imports_the_module_that_registers_the_id(tmp_path, monkeypatch) -> None:
    (tmp_path / "jt_local_env.py").write_text(
        "import toolgym\n"
        "toolgym.register('jt/Local-v0', entry_point='toolgym.envs.tasks.arith:ArithEnv', override=True)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        env = make_env("jt_local_env:jt/Local-v0", sandbox=None)
        assert env.spec.id == "jt/Local-v0"
        env.close()
        with pytest.raises(ConfigError, match="cannot import module 'jt_no_such_module'"):
            make_env("jt_no_such_module:jt/Local-v0")
    finally:
        gymnasium.registry.pop("jt/Local-v0", None)
