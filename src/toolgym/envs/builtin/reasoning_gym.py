"""toolgym/ReasoningGym-v0: any reasoning-gym procedural dataset by name, seeded and unbounded.

The reward is the dataset's own scorer (an exception scores 0). It never runs in the trainer: it
runs in the scorer worker (`toolgym.envs.scoring.scorer_worker`), a child interpreter with memory and CPU
limits that is killed past `SCORE_DEADLINE_S` (the answer scores 0, with a `ScorerTimeout` note),
so a scorer's C call that holds the GIL (coin_flip on '1e-7000000') stalls no other episode. There
it runs under `toolgym.envs.scoring.guard`: a scorer may not execute the answer. A dataset whose
scorer does so even on its own reference answer (it `eval()`s it, or parses it with sympy's
`parse_expr`) would score every answer 0, so it is refused when its source is built (the check runs
in the worker too). Tasks are regenerated from (dataset, seed, index), in the trainer and in the
worker alike, so the same seed and index always give the same task.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from toolgym.envs.builtin_tools import python_tool
from toolgym.envs.core import ToolEnv, jsonable
from toolgym.envs.rubric import Rubric
from toolgym.envs.scoring import ScorerFailed, ScorerTimeout, in_worker, worker
from toolgym.envs.sources import GeneratorSource
from toolgym.envs.types import Task
from toolgym.envs.verifiers import rg_score
from toolgym.errors import ConfigError, unknown

SYSTEM_PROMPT = "Solve the task. Put only the final answer between <answer> and </answer>."
TOOL_PROMPT = SYSTEM_PROMPT + " You may run Python by writing a ```python code block; its output is returned."
_TEST_SALT = 1_000_003  # the "test" partition draws from a disjoint seed
SCORE_DEADLINE_S = 5.0  # one answer's scoring in the worker (honest scorers take milliseconds)
BUILD_DEADLINE_S = 300.0  # the worker's import of reasoning-gym and its build of a dataset


@functools.lru_cache(maxsize=32)
def _dataset(name: str, seed: int, config_json: str) -> Any:
    import reasoning_gym
    from reasoning_gym.factory import DATASETS

    if name not in DATASETS:
        raise ConfigError(unknown("reasoning-gym dataset", name, sorted(DATASETS)))
    try:
        ds = reasoning_gym.create_dataset(name, seed=seed, size=2**31 - 1, **json.loads(config_json))
    except (TypeError, ValueError, AssertionError) as exc:
        raise ConfigError(f"reasoning-gym dataset {name!r}: bad config {config_json}: {exc}") from None
    if in_worker():
        _refuse_unsafe_scorer(name, ds)
    else:  # the worker builds its own copy and checks its scorer there; a refusal comes back as ConfigError
        try:
            worker().call(f"{__name__}:_build_here", [name, seed, config_json], deadline_s=BUILD_DEADLINE_S)
        except (ScorerTimeout, ScorerFailed) as exc:
            raise ConfigError(f"reasoning-gym dataset {name!r}: the scorer worker could not build it: {exc}") from None
    return ds


def _build_here(name: str, seed: int, config_json: str) -> None:
    """In the worker: build (and cache) the dataset, its scorer checked."""
    _dataset(name, seed, config_json)


def _score_here(name: str, seed: int, config_json: str, index: int, answer: str | None) -> float:
    """In the worker: the dataset's scorer on one answer, the entry regenerated from its index."""
    ds = _dataset(name, seed, config_json)
    return rg_score(ds, answer, ds[index])


def _refuse_unsafe_scorer(name: str, ds: Any) -> None:
    """Score the dataset's first reference answer under the scorer guard (in the worker): a scorer
    that executes even that (eval, sympy's parse_expr) would score every answer 0, so the dataset
    is refused."""
    from toolgym.envs.scoring import guarded

    entry = ds[0]
    with guarded() as guard:
        try:
            ds.score_answer(answer=entry.get("answer"), entry=entry)
        except Exception:  # a scorer's own failure is not the guard's business
            pass
    if guard.tripped is not None:
        raise ConfigError(f"reasoning-gym dataset {name!r} is refused: its scorer runs the answer as code in the "
                          f"trainer ({guard.tripped}), so toolgym would score every answer 0; pick another dataset")


# answers no task has: a scorer that pays one of them full reward on tasks whose answer it is not pays a
# constant, and a policy learns to say it (round-9 red team r907: coin_flip's partial credit divides the
# common prefix by the shorter string, so "0" got 1.0 on 186 of 200 tasks; game_of_life_halting compared
# bool(answer) with bool(reference): any non-empty answer, 200 of 200)
CONSTANT_PROBES = ("0", "1", "-1", "", "x", "yes", "no", "True", "False", "none", "0.5")
PROBE_TASKS = 50  # tasks the probes are scored on, when a dataset is first used
PROBE_PAYS_MAX = 0.2  # refused when a probe gets full reward on more of the tasks it does not answer


def _constant_payer(name: str, seed: int, config_json: str) -> list[Any] | None:
    """In the worker: the first probe answer the dataset's scorer pays full reward on more than
    PROBE_PAYS_MAX of the tasks it is wrong for, with its counts; None when there is none."""
    from toolgym.envs.scoring import ScorerRefused

    ds = _dataset(name, seed, config_json)
    entries = [ds[i] for i in range(PROBE_TASKS)]
    for probe in CONSTANT_PROBES:
        wrong = [e for e in entries if not _same_answer(str(e.get("answer")), probe)]
        paid = 0
        for e in wrong:
            try:
                paid += rg_score(ds, probe, e) >= 1.0
            except ScorerRefused:  # a refusal pays nothing
                pass
        if len(wrong) >= 10 and paid > PROBE_PAYS_MAX * len(wrong):
            return [probe, paid, len(wrong)]
    return None


def _same_answer(a: str, b: str) -> bool:
    """Whether a probe may be the task's own answer (case and number spelling aside): not counted then."""
    a, b = a.strip().lower(), b.strip().lower()
    if a == b:
        return True
    try:
        return float(a) == float(b)
    except ValueError:
        return False


@functools.lru_cache(maxsize=64)
def _check_constant_answers(name: str, seed: int, config_json: str) -> None:
    found = worker().call(f"{__name__}:_constant_payer", [name, seed, config_json], deadline_s=BUILD_DEADLINE_S,
                          setup=(f"{__name__}:_build_here", [name, seed, config_json], BUILD_DEADLINE_S))
    if found is not None:
        probe, paid, n = found
        raise ConfigError(f"reasoning-gym dataset {name!r} is refused: its scorer gives full reward to the answer "
                          f"{probe!r} on {paid} of {n} tasks whose answer it is not, so a policy would learn to say "
                          f"it; pick another dataset (or pass constant_answers='allow' to score with it anyway)")


def get_dataset(name: str, seed: int = 0, config: dict[str, Any] | None = None) -> Any:
    """A cached reasoning-gym dataset object for (name, seed, config)."""
    try:
        key = json.dumps(config or {}, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"reasoning-gym config must be JSON data: {exc}") from None
    return _dataset(name, seed, key)


def rg_source(name: str, seed: int = 0, config: dict[str, Any] | None = None, partition: str | None = None,
              constant_answers: str = "refuse") -> GeneratorSource:
    """An unbounded source of reasoning-gym tasks; `partition="test"` uses a disjoint seed. A dataset whose
    scorer pays a constant wrong answer (`CONSTANT_PROBES`) is refused unless `constant_answers="allow"`."""
    if partition not in (None, "train", "test"):
        raise ConfigError(f"partition must be 'train', 'test' or None, got {partition!r}")
    if constant_answers not in ("refuse", "allow"):
        raise ConfigError(f"constant_answers must be 'refuse' or 'allow', got {constant_answers!r}")
    eff_seed = seed + (_TEST_SALT if partition == "test" else 0)
    ds = get_dataset(name, eff_seed, config)
    if constant_answers == "refuse":
        _check_constant_answers(name, eff_seed, json.dumps(config or {}, sort_keys=True))

    def make(index: int) -> Task:
        entry = ds[index]
        meta = {"source": f"reasoning_gym/{name}", "rg_dataset": name, "rg_seed": eff_seed, "rg_index": index,
                "rg_config": jsonable(config or {}), "difficulty": jsonable(entry.get("metadata", {}).get("difficulty"))}
        if partition:
            meta["split"] = partition
        return Task(id=f"{name}-{eff_seed}-{index}", prompt=[{"role": "user", "content": entry["question"]}],
                    ground_truth=str(entry["answer"]) if entry.get("answer") is not None else None, metadata=meta)

    return GeneratorSource(make, name=f"reasoning_gym/{name}")


def rg_reward(answer: str | None, completion: str, task: Task) -> float:
    """The reasoning-gym scorer on the stated answer, in the scorer worker, with the entry regenerated
    there from the task metadata. Past `SCORE_DEADLINE_S` it raises `ScorerTimeout` (scored 0)."""
    m = task.metadata
    try:
        name, seed, index = str(m["rg_dataset"]), int(m["rg_seed"]), int(m["rg_index"])
        key = json.dumps(m.get("rg_config") or {}, sort_keys=True)
    except Exception:
        return 0.0
    return float(worker().call(f"{__name__}:_score_here", [name, seed, key, index, answer],
                               deadline_s=SCORE_DEADLINE_S,
                               setup=(f"{__name__}:_build_here", [name, seed, key], BUILD_DEADLINE_S)))


class ReasoningGymEnv(ToolEnv):
    """A reasoning-gym dataset as an environment. `tools=True` adds the Python tool."""

    reward_range = (0.0, 1.0)

    def __init__(self, dataset: str = "basic_arithmetic", *, config: dict[str, Any] | None = None, seed: int = 0,
                 partition: str | None = None, tools: bool = False, max_turns: int | None = None,
                 system_prompt: str | None = None, parser: str = "hermes+python", constant_answers: str = "refuse",
                 **kwargs: Any) -> None:
        source = rg_source(dataset, seed=seed, config=config, partition=partition, constant_answers=constant_answers)
        tool_list = [python_tool(limits=kwargs.get("limits"))] if tools else []
        super().__init__(source, tools=tool_list, parser=parser, rubric=Rubric([rg_reward]),
                         system_prompt=system_prompt or (TOOL_PROMPT if tools else SYSTEM_PROMPT),
                         max_turns=max_turns or (4 if tools else 1), **kwargs)
