"""Tools mode: each task runs as a multi-turn episode in the entry's environment (tool calls,
sandboxed execution, the environment's verifier), through the agents' RolloutRunner.

The environment loads the entry's data itself (asset name or local path), so the tasks and ground
truth are exactly those the environment trains on. A sample counts as correct when its episode
reward is full (code environments judge all-or-nothing here, as pass@k requires).
"""

from __future__ import annotations

from typing import Any

from toolgym.errors import ConfigError
from toolgym.suites.registry import SuiteEntry
from toolgym.suites.source_strings import _expand

ENV_KWARGS: dict[str, dict[str, Any]] = {
    "toolgym/CodeContest-v0": {"reward_mode": "all", "tools": True},
    "toolgym/ScienceQA-v0": {},
    "toolgym/MathTIR-v0": {},
}


def env_dataset(entry: SuiteEntry) -> tuple[Any, dict[str, Any]]:
    """(dataset argument, extra env kwargs) for an entry's source."""
    kind, _, rest = entry.source.partition(":")
    extra: dict[str, Any] = {}
    if kind == "asset":
        if rest.startswith(("/", ".", "~", "$")):
            name = _expand(rest)
        else:
            name, _, split = rest.partition(":")
            if split:
                extra["split"] = split
        if entry.options.get("subjects"):
            extra["subjects"] = entry.options["subjects"]
        return name, extra
    if kind in ("livecodebench", "codecontests", "gpqa", "aime"):
        return _expand(rest), extra
    raise ConfigError(f"entry {entry.name}: tools mode cannot load source {entry.source!r}")


def run_tools_entry(entry: SuiteEntry, todo: list[Any], cfg: Any, store: Any, state: dict[str, Any], log: Any) -> None:
    """Run the entry's unfinished tasks as episodes; append one record per task."""
    import toolgym
    from toolgym.agents.runner import EpisodeLimits, RolloutRunner, TaskSpec
    from toolgym.suites.runner import _sampling_params, make_sampler

    if "sampler" not in state:
        sampler, template = make_sampler(cfg)
        state["closers"].append(sampler.close)
        state["sampler"] = (sampler, template)
    sampler, template = state["sampler"]
    dataset, extra = env_dataset(entry)
    kwargs = {**ENV_KWARGS.get(entry.env, {}), **extra, "seed": cfg.seed}
    env0 = toolgym.make(entry.env, dataset=dataset, limit=cfg.limit, **kwargs)
    source = env0.unwrapped.source
    env0.close()
    wanted = {t.id for t in todo}
    indices = [i for i in range(len(source)) if source.get(i).id in wanted]
    if len(indices) != len(wanted):
        log(f"  {entry.name}: the environment knows {len(indices)} of the {len(wanted)} unfinished tasks")

    def factory() -> Any:
        return toolgym.make(entry.env, dataset=source, **kwargs)

    runner = RolloutRunner(sampler, template, factory, _sampling_params(cfg).with_(n=1),
                           EpisodeLimits(max_turns=cfg.max_turns, max_total_tokens=cfg.max_tokens * (cfg.max_turns + 2)),
                           seed=cfg.seed)
    chunk = max(cfg.batch, 4)
    for start in range(0, len(indices), chunk):
        part = indices[start : start + chunk]
        groups = runner.run([TaskSpec(seed=cfg.seed, options={"index": i}) for i in part], group_size=cfg.samples)
        records = []
        for i, group in zip(part, groups, strict=True):
            tid = source.get(i).id
            records.append({
                "entry": entry.name, "id": tid, "kind": "tools",
                "correct": [t.reward >= 1.0 - 1e-9 and not t.error for t in group],
                "answers": [None] * len(group),
                "samples": [{"reward": t.reward, "finish_reason": t.finish_reason, "error": t.error,
                             "turns": t.turns} for t in group],
            })
        store.append(records)
        log(f"  {entry.name}: {min(start + chunk, len(indices))}/{len(indices)} episodes groups done")
