"""Several environments in one run (``rollout.envs``): the draw of each step's environments, each environment's
own task order, the config's rules, and a step's plan (groups never mix environments; the plan of step s is the
same whether or not this process planned the steps before it, which is what makes a resume exact)."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from tests.training.trainer_util import tiny_config
from toolgym.errors import ConfigError
from toolgym.training.config import config_to_dict, load_config
from toolgym.training.sampling.mixture import Mixture, TaskOrder, draw, env_metrics

ARITH = {"min_digits": 1, "max_digits": 1, "system_prompt": None, "max_turns": 2}


def _mixture(out: Path, envs: list[dict], prompts: int = 4) -> dict:
    cfg = tiny_config(out)
    del cfg["rollout"]["env"], cfg["rollout"]["env_kwargs"]
    cfg["rollout"].update(envs=envs, prompts_per_step=prompts, sandbox=None)
    return cfg


def test_each_step_gives_every_env_its_share_rounded_and_many_steps_follow_the_weights():
    weights = [3.0, 1.0, 1.0]  # shares of 4 slots: 2.4, 0.8, 0.8
    totals = collections.Counter()
    steps = 4000
    for step in range(steps):
        order = draw(weights, 4, seed=7, step=step)
        counts = collections.Counter(order)
        assert len(order) == 4
        assert counts[0] in (2, 3) and counts[1] in (0, 1) and counts[2] in (0, 1), order
        totals.update(order)
    for e, share in enumerate([0.6, 0.2, 0.2]):
        assert abs(totals[e] / (4 * steps) - share) < 0.01, (e, totals)
    assert draw([1, 1], 2, seed=0, step=5) == draw([1, 1], 2, seed=0, step=5)  # (seed, step) decide the draw
    assert len({tuple(draw([1, 1], 4, seed=0, step=s)) for s in range(50)}) > 1  # the slot order is shuffled
    assert collections.Counter(draw([1, 1], 4, seed=0, step=3)) == {0: 2, 1: 2}  # an exact share is exact
    with pytest.raises(ValueError, match="weights must be finite numbers > 0"):
        draw([1, 0], 4, seed=0, step=0)


def test_the_plan_of_a_step_does_not_depend_on_the_steps_planned_before_it_in_this_process():
    walked = Mixture([2.0, 1.0], slots=3, seed=11)
    plans = [walked.plan(s) for s in range(30)]
    fresh = Mixture([2.0, 1.0], slots=3, seed=11)  # a resumed run: step 29 first
    assert fresh.plan(29) == plans[29] and fresh.plan(12) == plans[12]
    # each environment's positions run on from where the earlier steps left them: 0, 1, 2, ... without a gap
    for e in (0, 1):
        positions = [at for p in plans for env, at in p if env == e]
        assert positions == list(range(len(positions)))
    assert sum(walked.cursors(30)) == 90


def test_an_env_task_order_takes_every_task_once_per_epoch():
    order = TaskOrder(5, "0:a")
    first, second = [order.index(k) for k in range(5)], [order.index(k) for k in range(5, 10)]
    assert sorted(first) == sorted(second) == [0, 1, 2, 3, 4] and first != second
    assert [TaskOrder(0, "x").index(k) for k in (0, 7)] == [0, 7]  # an unbounded source: its stream in order


def test_env_metrics_add_up_over_processes():
    ranks = [{"a": {"n": 2, "reward_mean": 1.0, "tool_rate": 0.5}, "b": {"n": 0, "reward_mean": 0.0, "tool_rate": 0.0}},
             {"a": {"n": 2, "reward_mean": 0.0, "tool_rate": 0.0}, "b": {"n": 0, "reward_mean": 0.0, "tool_rate": 0.0}}]
    m = env_metrics(ranks, ["a", "b"])
    assert m == {"episodes/a": 4, "reward_mean/a": 0.5, "tool_rate/a": 0.25, "episodes/b": 0}


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r.update(env="toolgym/Arith-v0"), r"^rollout.env and rollout.envs: give one"),
    (lambda r: r.update(env_kwargs={"max_digits": 2}), r"^rollout.env_kwargs: with rollout.envs each environment"),
    (lambda r: r["envs"][1].update(weight=0), r"^rollout.envs\[1\].weight: must be a number > 0; got 0"),
    (lambda r: r["envs"][1].update(weight=-1.5), r"^rollout.envs\[1\].weight: must be a number > 0"),
    (lambda r: r["envs"][1].pop("env"), r"^rollout.envs\[1\].env: must be an environment id"),
    (lambda r: r["envs"][1].pop("name"), r"^rollout.envs\[1\]: its name 'toolgym/Arith-v0' is also"),
    (lambda r: r["envs"][1].update(wieght=2), r"^unknown rollout.envs\[1\] key 'wieght'; did you mean 'weight'"),
    (lambda r: r.update(envs={"env": "toolgym/Arith-v0"}), r"^rollout.envs: must be a list"),
])
def test_mixture_rules_are_one_line_naming_the_field(tmp_path, change, message):
    cfg = _mixture(tmp_path, [{"env": "toolgym/Arith-v0", "weight": 2}, {"env": "toolgym/Arith-v0", "name": "b"}])
    change(cfg["rollout"])
    with pytest.raises(ConfigError, match=message):
        load_config(cfg)


def test_one_env_is_a_one_entry_mixture_and_a_mixture_round_trips(tmp_path):
    single = load_config(tiny_config(tmp_path))
    (entry,) = single.rollout.mixture()
    assert (entry.env, entry.weight, entry.env_kwargs, entry.label) == ("toolgym/Arith-v0", 1.0, ARITH, "toolgym/Arith-v0")
    assert load_config({"model": {"name_or_path": "demo"}}).rollout.env == "toolgym/Arith-v0"  # the default
    cfg = load_config(_mixture(tmp_path, [{"env": "toolgym/Arith-v0", "env_kwargs": ARITH},
                                          {"env": "mine:my/Env-v0", "weight": 0.5}]))
    assert [e.label for e in cfg.rollout.mixture()] == ["toolgym/Arith-v0", "my/Env-v0"]  # no module: prefix
    assert load_config(config_to_dict(cfg)) == cfg
    bad = _mixture(tmp_path, [{"env": "toolgym/Arith-v0"}, {"env": "toolgym/Arith-v0", "name": "b"}])
    bad["eval"]["env_kwargs"] = {"max_digits": 3}
    with pytest.raises(ConfigError, match=r"^eval.env_kwargs: with rollout.envs each environment is evaluated"):
        load_config(bad)


def test_a_step_plan_draws_per_env_task_orders_and_runs_each_group_on_one_env(tmp_path):
    """The orchestrator's plan of a step (no model: the plan is made before any sampling)."""
    from types import SimpleNamespace

    from toolgym.training.orchestrator import Orchestrator

    cfg = load_config(_mixture(tmp_path, [{"env": "toolgym/Arith-v0", "env_kwargs": ARITH, "weight": 3},
                                          {"env": "toolgym/Arith-v0", "name": "two-digit", "env_kwargs":
                                           {**ARITH, "min_digits": 2, "max_digits": 2}}], prompts=4))

    def orchestrator() -> Orchestrator:
        return Orchestrator(cfg, module=None, tokenizer=None, template=None, out=tmp_path, sampler_spec=None,
                            say=print, dist=SimpleNamespace(rank=0, world=1))

    o = orchestrator()
    plans = [o.step_plan(s, s * 4) for s in range(12)]
    seen = collections.defaultdict(list)
    for plan in plans:
        assert [p.spec.index for p in plan] == [0, 1, 2, 3]  # slot positions: the runner's seeds
        for p in plan:
            assert p.runner.env_id == "toolgym/Arith-v0" and p.env_kwargs["max_digits"] == (2 if p.name == "two-digit" else 1)
            assert p.env_kwargs["partition"] == "train"
            seen[p.name].append(p.spec.options["index"])
        assert len({id(p.runner) for p in plan}) == len({p.name for p in plan})  # one runner per environment
    assert len(seen["toolgym/Arith-v0"]) + len(seen["two-digit"]) == 48
    assert 33 <= len(seen["toolgym/Arith-v0"]) <= 39  # 3 per step, one more or less: 36 +- 3
    for tasks in seen.values():  # each environment's own order: no task twice within an epoch
        assert len(set(tasks)) == len(tasks)
    resumed = orchestrator().step_plan(11, 44)  # a new process, step 11 first
    assert [(p.name, p.spec.options) for p in resumed] == [(p.name, p.spec.options) for p in plans[11]]


def test_the_documented_mixture_loads_as_the_page_says():
    """docs/training/index.md's YAML block: three entries, the README's environment named without its module."""
    import re

    import yaml

    page = (Path(__file__).resolve().parents[3] / "docs" / "training" / "index.md").read_text()
    section = page.split("## Several environments in one run\n", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    cfg = load_config({**yaml.safe_load(block), "model": {"name_or_path": "demo"}, "mini_batches": 4})
    assert [(e.label, e.weight) for e in cfg.rollout.mixture()] == [("add-sub", 2), ("multiply", 1),
                                                                      ("myorg/Reverse-v0", 1)]
