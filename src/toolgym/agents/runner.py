"""RolloutRunner: groups of multi-turn episodes, token-in/token-out, on asyncio.

Each episode runs on a fresh environment instance. Episodes are coroutines, so while some wait for the
sampler others run their tools; in-process samplers batch whatever generation requests are pending.
Any failure (sampler, sandbox, env, context) ends that one episode with a recorded reason; the group
is always returned whole.

Which reasons are masked in training (`toolgym.training.algorithms.base.INFRA_FAILURES`) and which are
scored: an episode that spends more than `max_wall_s` of its OWN environment time ends as
"time_limit", reward 0, counted like a program that timed out (a stalled tool or judge call included:
the program is the only suspect); the time it waits for a free sandbox or for its batch-mates in a
judge call is not its own (toolgym.sandbox.waiting) and never counts. "timeout" (a sampling call over
`max_sample_s`) and "error" (an exception: a sampler failure, an InfrastructureError such as a sandbox
fault that a control run saw too, a bug) are masked: no program could have caused them.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolgym.agents.chat import ChatTemplate
from toolgym.agents.sampling import ContextOverflow, Sample, Sampler, SamplingParams
from toolgym.agents.trajectory import Trajectory
from toolgym.sandbox import tenancy, waiting

_KEEP_INFO = ("answer", "reward_components", "reward_errors", "tool_calls_total", "finish_reason", "llm_judge")


@dataclass
class EpisodeLimits:
    """Per-episode limits. max_total_tokens counts prompt + response tokens.

    max_wall_s bounds the time an episode spends in its environment (reset, steps, tool calls): that is
    where untrusted code or a hung tool can stall. Only its own time counts: waiting for a free sandbox or
    for batch-mates in a judge call does not; running over it ends the episode as "time_limit", reward 0.
    Sampling is bounded by the token limits, and its wait depends on how many other episodes share the
    engine (a batch of 64 long answers on a CPU takes minutes), so it does not count; max_sample_s, when
    set, bounds each sampling call on its own."""

    max_turns: int = 8
    max_total_tokens: int = 4096
    max_wall_s: float = 300.0
    max_sample_s: float | None = None
    min_new_tokens: int = 8  # a prompt is cut (and marked) so at least this many tokens can be sampled


@dataclass
class TaskSpec:
    """Which task an episode group runs: passed to env.reset(seed=..., options=...)."""

    seed: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    index: int | None = None  # the task's index in the whole run (its group id and sampling seeds); None: its position


@dataclass
class RunnerStats:
    """Where the wall time of a run went. gen_busy_s: time with at least one generation in flight."""

    wall_s: float = 0.0
    gen_busy_s: float = 0.0
    episodes: int = 0
    model_tokens: int = 0
    errors: int = 0

    @property
    def outside_generation_share(self) -> float:
        return 0.0 if self.wall_s <= 0 else max(0.0, 1.0 - self.gen_busy_s / self.wall_s)


class RolloutRunner:
    """Runs groups of G episodes per task and returns them as `Trajectory` lists (one list per task)."""

    def __init__(
        self,
        sampler: Sampler,
        template: ChatTemplate,
        env_factory: Callable[[], Any] | str,
        params: SamplingParams | None = None,
        limits: EpisodeLimits | None = None,
        *,
        env_kwargs: dict[str, Any] | None = None,
        max_concurrent_episodes: int = 64,
        seed: int = 0,
    ) -> None:
        self.sampler = sampler
        self.template = template
        if isinstance(env_factory, str):
            env_id, kwargs = env_factory, dict(env_kwargs or {})

            def make() -> Any:
                from toolgym.envs.registry import make_env

                return make_env(env_id, kwargs)

            self.env_factory: Callable[[], Any] = make
            self.env_id = env_id
        else:
            factory, kwargs = env_factory, dict(env_kwargs or {})
            self.env_factory = (lambda: factory(**kwargs)) if kwargs else factory
            self.env_id = getattr(env_factory, "__name__", "env")
        self.params = params or SamplingParams()
        self.limits = limits or EpisodeLimits()
        self.max_concurrent_episodes = max_concurrent_episodes
        self.seed = seed
        self.stats = RunnerStats()
        self._inflight = 0
        self._busy_since = 0.0

    # -- public API ----------------------------------------------------------------------------------------

    def run(self, tasks: Sequence[TaskSpec | int | dict], group_size: int) -> list[list[Trajectory]]:
        """Blocking form of `arun`."""
        return asyncio.run(self.arun(tasks, group_size))

    async def arun(self, tasks: Sequence[TaskSpec | int | dict], group_size: int, serial: bool = False,
                   on_group: Callable[[int, list[Trajectory]], Any] | None = None,
                   on_episode: Callable[[Trajectory], Any] | None = None) -> list[list[Trajectory]]:
        """All groups at once (or one episode after another with serial=True, for comparison).
        on_group(task_index, group) runs as each group completes, e.g. to write it before the rest finish;
        on_episode(trajectory) as each episode does (progress that moves before a whole group is done)."""
        specs = [_spec(t) for t in tasks]
        sem = asyncio.Semaphore(1 if serial else self.max_concurrent_episodes)
        start = time.perf_counter()

        async def one(ti: int, g: int) -> Trajectory:
            async with sem:
                index = specs[ti].index
                traj = await self.run_episode(specs[ti], ti if index is None else index, g)
            if on_episode is not None:
                on_episode(traj)
            return traj

        async def group(ti: int) -> list[Trajectory]:
            trajs = list(await asyncio.gather(*(one(ti, g) for g in range(group_size))))
            flag_mixed_group(trajs)
            if on_group is not None:
                on_group(ti, trajs)
            return trajs

        groups = list(await asyncio.gather(*(group(ti) for ti in range(len(specs)))))
        self.stats.wall_s += time.perf_counter() - start
        return groups

    async def run_episode(self, spec: TaskSpec, task_index: int, episode_index: int) -> Trajectory:
        """One episode on a fresh env. Never raises: failures are recorded on the trajectory. Its sandbox
        calls are one episode's of its task: no sandbox lifetime serves them and another episode of the same
        task (toolgym.sandbox.tenancy: kernel counters would carry an answer between them)."""
        with tenancy.episode({"env": self.env_id, "seed": spec.seed, "options": spec.options}):
            return await self._episode(spec, task_index, episode_index)

    async def _episode(self, spec: TaskSpec, task_index: int, episode_index: int) -> Trajectory:
        lim = self.limits
        t0 = time.perf_counter()
        budget = _EnvBudget(lim.max_wall_s)
        traj = Trajectory(task_id=f"task-{task_index}", group_id=f"{self.env_id}/{task_index}", prompt_ids=[])
        traj.metadata.update(
            episode_index=episode_index, task_index=task_index, sampler=self.sampler.name,
            tool_parser=getattr(getattr(self.template, "tool_parser", None), "name", None),
            sampling=self.params.to_dict(), logprob_kind=self.params.logprob_kind(),
        )
        timings = {"generate_s": 0.0, "env_s": 0.0}
        env = None
        try:
            env = await asyncio.to_thread(self.env_factory)
            _use_tool_format(env, self.template)
            t = time.perf_counter()
            obs, info = await budget.run(_reset(env, spec))
            timings["env_s"] += time.perf_counter() - t
            info = dict(info or {})
            drawn = info.get("task_id") or _task_id(info)
            traj.task_id = str(drawn or traj.task_id)
            if drawn:  # the task drawn, whatever seed drew it
                tenancy.also({"env": self.env_id, "task_id": traj.task_id})
            messages = _messages(obs)
            tools = info.get("tools") or info.get("tool_schemas") or None
            if tools:  # a teacher re-rendering this prompt (MOPD) needs them to keep the system turn unchanged
                traj.metadata["tools"] = tools
            traj.turns.extend(messages)
            prompt = self.template.prompt_ids(messages, tools)
            traj.prompt_ids = self._fit_prompt(prompt, traj)
            context: list[int] = list(traj.prompt_ids)
            traj.finish_reason = "max_turns"
            for turn in range(lim.max_turns):
                room = min(lim.max_total_tokens, self.sampler.max_model_len or lim.max_total_tokens) - len(context)
                if room < 1:
                    traj.finish_reason = "max_tokens"
                    break
                params = self.params.with_(n=1, max_tokens=min(self.params.max_tokens, room),
                                           seed=self._seed(task_index, episode_index, turn),
                                           affinity=f"{self.seed}/{traj.group_id}")
                t = time.perf_counter()
                # the version when the call starts: weights that change during it make its later tokens newer,
                # never older, so the staleness of a trajectory is never understated
                version = getattr(self.sampler, "policy_version", None)
                sample = await _sample_timed(self._generate(context, params), lim.max_sample_s)
                timings["generate_s"] += time.perf_counter() - t
                if sample.token_versions is not None:  # the engine tagged each token (weights changed mid-call)
                    version = sample.token_versions[-1] if sample.token_versions else version
                    self._append(traj, context, sample.token_ids, sample.logprobs, model=True,
                                 version=sample.token_versions)
                else:
                    self._append(traj, context, sample.token_ids, sample.logprobs, model=True, version=version)
                text = _decode_turn(self.template, sample.token_ids)
                traj.turns.append({"role": "assistant", "content": text, "finish_reason": sample.finish_reason})
                if not sample.token_ids:
                    traj.metadata["empty_turns"] = traj.metadata.get("empty_turns", 0) + 1
                if sample.logprob_kind != traj.metadata["logprob_kind"]:
                    traj.metadata["logprob_kind"] = sample.logprob_kind
                t = time.perf_counter()
                obs, reward, terminated, truncated, info = await budget.run(_step(env, text))
                timings["env_s"] += time.perf_counter() - t
                info = dict(info or {})
                traj.reward += float(reward or 0.0)
                for k, v in (info.get("reward_breakdown") or {}).items():
                    traj.reward_breakdown[k] = float(v)
                new = _new_messages(obs, traj.turns)
                traj.turns.extend(new)
                if terminated or truncated:
                    traj.finish_reason = str(info.get("finish_reason") or ("answer" if terminated else "truncated"))
                    traj.metadata["env_info"] = {k: v for k, v in info.items() if k in _KEEP_INFO}
                    if isinstance(info.get("feedback_text"), str):  # the env's own verdict on a failed attempt
                        traj.metadata["feedback"] = info["feedback_text"]
                    break
                if sample.finish_reason == "length" and len(context) >= lim.max_total_tokens:
                    traj.finish_reason = "max_tokens"
                    break
                cont = self.template.continuation_ids(sample.token_ids, new)
                limit = min(lim.max_total_tokens, self.sampler.max_model_len or lim.max_total_tokens)
                if len(context) + len(cont) + 1 > limit:
                    # The next prompt would not fit: keep what fits of the template tokens, mark, stop.
                    keep = max(0, limit - len(context))
                    self._append(traj, context, cont[:keep], [0.0] * keep, model=False, version=version)
                    traj.finish_reason = "context_overflow"
                    traj.metadata["context_truncated"] = True
                    break
                self._append(traj, context, cont, [0.0] * len(cont), model=False, version=version)
        except _SampleTimeout:
            traj.finish_reason = "timeout"
            traj.error = f"a sampling call exceeded its limit of {lim.max_sample_s:g} s"
        except _EnvTimeout:  # the episode's own environment time: the program's timeout, scored 0
            traj.finish_reason = "time_limit"
            traj.reward = 0.0
            traj.reward_breakdown.clear()
            traj.error = (f"episode exceeded its limit of {lim.max_wall_s:g} s of its own environment time "
                          "(waiting for the sandbox pool or for batch-mates excluded)")
        except ContextOverflow as exc:
            traj.finish_reason = "context_overflow"
            traj.error = str(exc)
        except Exception as exc:  # sampler, sandbox, env or tool failure: recorded, never raised
            traj.finish_reason = "error"
            traj.error = f"{type(exc).__name__}: {exc}"
            traj.metadata["traceback"] = traceback.format_exc(limit=6)
            self.stats.errors += 1
        finally:
            if env is not None:
                await _close(env)
            timings["total_s"] = time.perf_counter() - t0
            traj.timings.update(timings)
            self.stats.episodes += 1
            self.stats.model_tokens += traj.num_model_tokens
        return traj

    # -- internals -----------------------------------------------------------------------------------------

    def _fit_prompt(self, prompt: list[int], traj: Trajectory) -> list[int]:
        """A prompt over the context is cut from the left (the question and header stay) and marked."""
        limit = min(self.limits.max_total_tokens, self.sampler.max_model_len or self.limits.max_total_tokens)
        keep = limit - self.limits.min_new_tokens
        if len(prompt) <= keep:
            return prompt
        traj.metadata["prompt_truncated_from"] = len(prompt)
        if keep < 1:
            raise ContextOverflow(f"context of {limit} tokens leaves no room for a prompt")
        return prompt[-keep:]

    async def _generate(self, context: list[int], params: SamplingParams) -> Sample:
        self._gen_enter()
        try:
            out = await self.sampler.agenerate([list(context)], params)
        finally:
            self._gen_exit()
        if not out or not out[0]:
            raise RuntimeError("sampler returned no sample")
        return out[0][0]

    def _gen_enter(self) -> None:
        if self._inflight == 0:
            self._busy_since = time.perf_counter()
        self._inflight += 1

    def _gen_exit(self) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self.stats.gen_busy_s += time.perf_counter() - self._busy_since

    @staticmethod
    def _append(traj: Trajectory, context: list[int], ids: list[int], lps: list[float], model: bool,
                version: int | list[int] | None = None) -> None:
        """``version``: the policy version of the turn these tokens belong to, or one per token (None: not
        tracked)."""
        if version is not None and len(traj.token_versions) == len(traj.response_ids):
            traj.token_versions.extend([int(v) for v in version] if isinstance(version, list)
                                       else [int(version)] * len(ids))
        elif traj.token_versions:  # the sampler stopped reporting versions: a partial record would misalign
            traj.token_versions.clear()
        context.extend(ids)
        traj.response_ids.extend(ids)
        traj.loss_mask.extend([1 if model else 0] * len(ids))
        traj.behavior_logprobs.extend(float(x) if model else 0.0 for x in lps)

    def _seed(self, task_index: int, episode_index: int, turn: int) -> int | None:
        if self.params.seed is None and self.seed is None:
            return None
        base = self.params.seed if self.params.seed is not None else self.seed
        return (base * 1_000_003 + task_index * 10_007 + episode_index * 101 + turn) % (2**31 - 1)


# -- env adapters: sync or async gymnasium envs, obs as messages ------------------------------------------


def flag_mixed_group(group: Sequence[Trajectory]) -> None:
    """An env that ignores the seed would mix tasks within a group: mark every member so it shows."""
    ids = {t.task_id for t in group}
    if len(ids) > 1:
        for t in group:
            t.metadata["group_task_mismatch"] = sorted(ids)


def _spec(t: TaskSpec | int | dict) -> TaskSpec:
    if isinstance(t, TaskSpec):
        return t
    if isinstance(t, int):
        return TaskSpec(seed=t)
    return TaskSpec(seed=t.get("seed"), options=dict(t.get("options") or {}))


class _EnvBudget:
    """What is left of an episode's own environment time (EpisodeLimits.max_wall_s) across its env calls.

    Time spent waiting for others (a free sandbox, batch-mates in a judge call) is reported live on a
    wait clock (toolgym.sandbox.waiting) and excluded. A call is cut off once its own time runs out; a
    call whose own time turns out to have run out only when it returns (a judge call learns its share at
    the end) ends the episode as well."""

    def __init__(self, seconds: float) -> None:
        self.left = seconds

    async def run(self, coro: Any) -> Any:
        if self.left <= 0:
            coro.close()
            raise _EnvTimeout
        clock = waiting.WaitClock()
        with waiting.measuring(clock):
            task = asyncio.ensure_future(coro)  # the task inherits the clock with the context
        t = time.perf_counter()

        def own() -> float:
            return time.perf_counter() - t - clock.seconds

        try:
            while not task.done():
                rest = self.left - own()
                if rest <= 0:
                    break
                await asyncio.wait({task}, timeout=rest)
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                raise _EnvTimeout
            result = task.result()
            if own() > self.left:
                raise _EnvTimeout
            return result
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            self.left -= max(0.0, own())


class _SampleTimeout(TimeoutError):
    pass


class _EnvTimeout(TimeoutError):
    """The episode's own environment time ran out (a TimeoutError raised inside an env is not this)."""


async def _sample_timed(coro: Any, seconds: float | None) -> Any:
    if seconds is None:
        return await coro
    try:
        return await asyncio.wait_for(coro, timeout=seconds)
    except TimeoutError as exc:
        raise _SampleTimeout from exc


def _use_tool_format(env: Any, template: ChatTemplate) -> None:
    """Tell an environment that reads tool calls which format the model writes (its template's, or the
    run's override): `ToolEnv.use_tool_format`, or the same method on any env, wrapped or not."""
    parser = getattr(template, "tool_parser", None)
    if parser is None:  # a template without a tool-call format of its own: the env keeps its parser
        return
    for obj in (env, getattr(env, "unwrapped", None)):
        fn = getattr(obj, "use_tool_format", None)
        if callable(fn):
            fn(parser)
            return


def _decode_turn(template: Any, ids: list[int]) -> str:
    """A sampled turn as text: `ChatTemplate.decode_turn` (the format's markers kept), or a plain decode
    without special tokens for a template that has no tool-call format of its own."""
    fn = getattr(template, "decode_turn", None)
    return fn(ids) if callable(fn) else template.decode(ids, skip_special_tokens=True)


async def _reset(env: Any, spec: TaskSpec) -> tuple[Any, dict]:
    kwargs = {"seed": spec.seed, "options": spec.options or None}
    fn = getattr(env, "areset", None)
    if fn is not None and inspect.iscoroutinefunction(fn):
        return await fn(**kwargs)
    return await asyncio.to_thread(env.reset, **kwargs)


async def _step(env: Any, text: str) -> tuple[Any, float, bool, bool, dict]:
    fn = getattr(env, "astep", None)
    if fn is not None and inspect.iscoroutinefunction(fn):
        return await fn(text)
    return await asyncio.to_thread(env.step, text)


async def _close(env: Any) -> None:
    try:
        fn = getattr(env, "aclose", None)
        if fn is not None and inspect.iscoroutinefunction(fn):
            await fn()
        elif hasattr(env, "close"):
            await asyncio.to_thread(env.close)
    except Exception:  # closing must never hide the episode's own outcome
        pass


def _messages(obs: Any) -> list[dict[str, Any]]:
    if isinstance(obs, dict) and "messages" in obs:
        obs = obs["messages"]
    if isinstance(obs, dict):
        return [obs]
    if isinstance(obs, str):
        return [{"role": "user", "content": obs}]
    return [dict(m) for m in (obs or [])]


def _new_messages(obs: Any, seen: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Envs may return only the new messages or the whole history; either way return the new ones."""
    msgs = _messages(obs)
    n = len(seen)
    if len(msgs) > n and [m.get("role") for m in msgs[:n]] == [m.get("role") for m in seen]:
        return msgs[n:]
    if msgs and msgs[0].get("role") == "assistant":  # history from the assistant turn on
        return msgs[1:]
    return msgs


def _task_id(info: dict[str, Any]) -> str | None:
    task = info.get("task")
    if isinstance(task, dict):
        return task.get("id")
    return getattr(task, "id", None)
