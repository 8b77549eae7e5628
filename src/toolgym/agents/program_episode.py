"""An agent program as an episode: run it against a recording proxy of its own, score its outcome with a rubric.

Why: a program written against the OpenAI API decides its own turns, so it cannot be an environment the rollout
runner steps. Instead each episode gets its own proxy (its own loopback port or socket, the shared sampler behind it, so
episodes run concurrently and their records never mix), the program runs with ``OPENAI_BASE_URL`` pointing at it
and the task in ``TOOLGYM_TASK`` (JSON), and its stdout is the outcome a :class:`~toolgym.envs.rubric.Rubric`
scores: ``completion`` is the stdout, ``answer`` the final answer read from it, ``task`` the task, ``messages``
the conversation of the episode's last trajectory. Every trajectory of the episode (more than one when the
program rewrote its history) carries the episode's reward.

How the program runs (:mod:`toolgym.agents.program_jail`): given ``jail`` (the program's file), in a jail with no
network that reaches the proxy only through a Unix socket bound into it; otherwise as a child process with
resource limits and a timeout, which is no sandbox (trusted programs only).

:class:`ProgramRunner` is what a training run uses for a ``toolgym/Program-v0`` environment: the rollout runner's
``arun(tasks, group_size)``, each group one task's episodes.

Whose fault a failed episode is: a program that crashes, runs over its time or prints garbage scores 0 (the
policy's turns may have caused it: finish reason ``program_error`` or ``time_limit``); when it failed after the
proxy's sampler failed one of its requests, no program caused it and its trajectories end as ``error`` (masked).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from toolgym.agents import program_jail as J
from toolgym.agents.program_jail import ProgramLimits
from toolgym.agents.proxy import RecordingProxy
from toolgym.agents.proxy_server import ProxyServer
from toolgym.agents.sampling import SamplingParams
from toolgym.agents.trajectory import Trajectory
from toolgym.envs.answers import extract_answer

#: the most program output kept and scored (the rest is cut, and the cut is recorded)
MAX_OUTPUT_BYTES = 1 << 20


@dataclass
class ProgramEpisode:
    """One run of the program: its trajectories (empty when it never called the model) and its outcome."""

    trajectories: list[Trajectory]
    reward: float
    components: dict[str, float] = field(default_factory=dict)
    status: int | None = None  # the exit status; None when it was killed at the timeout
    stdout: str = ""
    error: str | None = None
    finish_reason: str | None = None  # program_error, time_limit, error (the sampler failed); None: it ran


async def run_program_episode(sampler: Any, template: Any, command: Sequence[str], task: dict[str, Any],
                              rubric: Any, *, task_id: str = "task", group_id: str = "program",
                              max_tokens: int = 256, timeout_s: float = 300.0,
                              env: dict[str, str] | None = None, jail: str | None = None,
                              limits: ProgramLimits | None = None, params: SamplingParams | None = None,
                              program_task: dict[str, Any] | None = None, tool_parser: Any = None) -> ProgramEpisode:
    """Run ``command`` once for ``task`` against a fresh proxy in front of ``sampler``; score it with
    ``rubric`` (which sees ``task``; the program sees ``program_task``, default ``task``, in ``TOOLGYM_TASK``).
    ``jail``: the program's host file, to run ``command`` (which names it at ``/program/NAME``) jailed.
    Never raises for what the program does (a crash, a timeout, garbage output): that is its outcome, recorded
    on the episode and its trajectories."""
    limits = limits or ProgramLimits(timeout_s=timeout_s)
    proxy = RecordingProxy(sampler, template, max_tokens=max_tokens, task_id=task_id, group_id=group_id,
                           params=params, tool_parser=tool_parser)
    child_env = {**(env or {}), "OPENAI_API_KEY": "toolgym-proxy",
                 "TOOLGYM_TASK": json.dumps(task if program_task is None else program_task, ensure_ascii=False)}
    if jail is not None:
        launch = await asyncio.to_thread(J.jailed, list(command), child_env, limits, jail)
    else:
        launch = J.trusted(list(command), {**os.environ, **child_env}, limits)
    server = ProxyServer(proxy, path=launch.socket_path)
    t0 = time.perf_counter()
    status: int | None = None
    error: str | None = None
    timed_out = False
    out = b""
    try:
        url = await server.start()
        if launch.socket_path is None:
            launch.env["OPENAI_BASE_URL"] = url
        try:
            if jail is None and shutil.which(command[0]) is None:
                raise FileNotFoundError(f"no such program: {command[0]}")
            proc = await asyncio.create_subprocess_exec(*launch.argv, env=launch.env, pass_fds=launch.pass_fds,
                                                        stdin=asyncio.subprocess.DEVNULL, start_new_session=True,
                                                        stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.PIPE)
        except OSError as exc:
            error = f"the program did not start: {exc}"
        else:
            try:
                out, err = await asyncio.wait_for(_communicate(proc), limits.timeout_s)
                status = proc.returncode
                if status:
                    tail = err[-400:].decode("utf-8", "replace").strip().splitlines()
                    error = f"the program exited with status {status}" + (f": {tail[-1]}" if tail else "")
            except asyncio.TimeoutError:
                timed_out = True
                _kill_group(proc.pid)
                await asyncio.to_thread(launch.kill)
                await proc.wait()
                error = f"the program ran over its limit of {limits.timeout_s:g} s"
            finally:
                _kill_group(proc.pid)  # whatever it left running in its process group
    finally:
        await server.stop()
        await asyncio.to_thread(launch.close)
    trajs = proxy.take()
    text = out[:MAX_OUTPUT_BYTES].decode("utf-8", "replace")
    messages = trajs[-1].turns if trajs else []
    result = await rubric.ascore(completion=text, answer=extract_answer(text), task=task, messages=messages)
    reward = result.total if error is None else 0.0
    wall = time.perf_counter() - t0
    if proxy.sampler_failures and error is not None:
        reason = "error"  # the sampler failed it: no program caused that
    else:
        reason = "time_limit" if timed_out else ("program_error" if error else None)
    for t in trajs:
        t.reward = reward
        t.reward_breakdown = dict(result.components) if error is None else {}
        t.finish_reason = reason or t.finish_reason
        t.error = error
        t.timings["total_s"] = wall
        t.metadata.update(program_status=status, program_output_cut=len(out) > MAX_OUTPUT_BYTES,
                          episode_trajectories=len(trajs), program_output=text[:2000])
        if result.errors:
            t.metadata["reward_errors"] = dict(result.errors)
    return ProgramEpisode(trajs, reward, dict(result.components), status, text, error, reason)


async def _communicate(proc: Any) -> tuple[bytes, bytes]:
    """stdout and stderr, each kept to MAX_OUTPUT_BYTES (+1, to tell a cut) however much the program writes."""

    async def read(stream: Any) -> bytes:
        buf = bytearray()
        while chunk := await stream.read(65536):
            if len(buf) <= MAX_OUTPUT_BYTES:
                buf += chunk[: MAX_OUTPUT_BYTES + 1 - len(buf)]
        return bytes(buf)

    out, err = await asyncio.gather(read(proc.stdout), read(proc.stderr))
    await proc.wait()
    return out, err


def _kill_group(pid: int) -> None:
    import signal

    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


async def run_program_group(sampler: Any, template: Any, command: Sequence[str], task: dict[str, Any], rubric: Any,
                            group_size: int, **kwargs: Any) -> list[ProgramEpisode]:
    """``group_size`` concurrent episodes of the same task (a GRPO group), each with its own proxy."""
    return list(await asyncio.gather(*(run_program_episode(sampler, template, command, task, rubric, **kwargs)
                                       for _ in range(group_size))))


class ProgramRunner:
    """The rollout runner's interface (``arun(tasks, group_size)``, ``env_id``, ``params``, ``limits``, ``seed``)
    for a ``toolgym/Program-v0`` environment: each task's group is ``group_size`` runs of the program, at most
    ``max_concurrent`` at once, sampled at the run's temperature. Every trajectory of an episode is a member of
    its group (an episode that rewrote its history gives more than one; one that never called the model gives
    an empty trajectory with its reason, so the group's scores stay whole)."""

    def __init__(self, sampler: Any, template: Any, env_id: str, params: SamplingParams, limits: Any, *,
                 env_kwargs: dict[str, Any] | None = None, seed: int = 0) -> None:
        from toolgym.envs.registry import make_env

        self.sampler, self.template, self.env_id = sampler, template, env_id
        self.params, self.limits, self.seed = params, limits, seed
        self.env = make_env(env_id, {k: v for k, v in (env_kwargs or {}).items() if k != "sandbox"})
        self.spec = self.env.unwrapped.program
        if not self.spec.trusted:  # refused before any episode, in one line
            why = J.jail_unavailable()
            if why:
                from toolgym.errors import ConfigError

                raise ConfigError(why)
        self.parser = None
        if self.spec.python_blocks:  # fenced ```python blocks are calls too, as in the built-in environments
            from toolgym.envs.parsing import CombinedParser

            self.parser = CombinedParser(primary=template.tool_parser)
        self._gate: asyncio.Semaphore | None = None

    async def arun(self, tasks: Sequence[Any], group_size: int, **_: Any) -> list[list[Trajectory]]:
        self._gate = asyncio.Semaphore(self.spec.max_concurrent)
        return list(await asyncio.gather(*(self._group(t, k, group_size) for k, t in enumerate(tasks))))

    def run(self, tasks: Sequence[Any], group_size: int) -> list[list[Trajectory]]:
        return asyncio.run(self.arun(tasks, group_size))

    async def _group(self, spec: Any, position: int, group_size: int) -> list[Trajectory]:
        index = spec.options.get("index", spec.seed) if hasattr(spec, "options") else int(spec)
        task_index = position if getattr(spec, "index", None) is None else spec.index
        task = self.env.unwrapped.task_at(index)
        eps = await asyncio.gather(*(self._episode(task, task_index, g) for g in range(group_size)))
        return [t for ep in eps for t in ep]

    async def _episode(self, task: Any, task_index: int, g: int) -> list[Trajectory]:
        env = self.env.unwrapped
        spec = self.spec
        question = env.question(task)
        program = None if spec.trusted else f"{J.PROGRAM_DIR}/{os.path.basename(spec.program)}"
        assert self._gate is not None
        async with self._gate:
            ep = await run_program_episode(
                self.sampler, self.template, spec.argv(question, program), task.to_dict(), env.rubric,
                task_id=task.id, group_id=f"{self.env_id}/{task_index}", max_tokens=self.params.max_tokens,
                jail=None if spec.trusted else spec.program, params=self.params,
                limits=ProgramLimits(memory_mb=spec.memory_mb, timeout_s=spec.timeout_s),
                program_task=env.program_view(task), tool_parser=self.parser)
        trajs = ep.trajectories
        if not trajs:  # the program never reached the model: its outcome still counts in the group
            empty = Trajectory(task_id=task.id, group_id=f"{self.env_id}/{task_index}",
                               prompt_ids=self.template.prompt_ids(task.prompt, env.tools or None))
            empty.turns.extend(task.prompt)
            empty.reward, empty.error = ep.reward, ep.error
            empty.finish_reason = ep.finish_reason or "stop"  # it ran and printed its outcome, scored
            empty.metadata.update(program_status=ep.status, program_output=ep.stdout[:2000])
            trajs = [empty]
        for t in trajs:
            t.metadata.update(episode_index=g, task_index=task_index, sampler=getattr(self.sampler, "name", "sampler"),
                              program=os.path.basename(spec.program), trusted=spec.trusted)
            t.metadata.setdefault("logprob_kind", self.params.logprob_kind())
        return trajs


def program_runner(sampler: Any, template: Any, env_id: str, env_kwargs: dict[str, Any], params: SamplingParams,
                   limits: Any, seed: int) -> ProgramRunner | None:
    """A ProgramRunner when ``env_id`` is a program environment, else None (the rollout runner's case)."""
    from toolgym.envs.program import is_program_env

    if not is_program_env(env_id):
        return None
    return ProgramRunner(sampler, template, env_id, params, limits, env_kwargs=env_kwargs, seed=seed)
