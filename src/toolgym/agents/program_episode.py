"""An agent program as an episode: run it against a recording proxy of its own, score its outcome with a rubric.

Why: a program written against the OpenAI API decides its own turns, so it cannot be an environment the rollout
runner steps. Instead each episode gets its own proxy (its own loopback port, the shared sampler behind it, so
episodes run concurrently and their records never mix), the program runs with ``OPENAI_BASE_URL`` pointing at it
and the task in ``TOOLGYM_TASK`` (JSON), and its stdout is the outcome a :class:`~toolgym.envs.rubric.Rubric`
scores: ``completion`` is the stdout, ``answer`` the final answer read from it, ``task`` the task, ``messages``
the conversation of the episode's last trajectory. Every trajectory of the episode (more than one when the
program rewrote its history) carries the episode's reward.

The program runs on this machine as a child process with a timeout: this is not a sandbox. Untrusted
programs need one (not built yet).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from toolgym.agents.proxy import RecordingProxy
from toolgym.agents.proxy_server import ProxyServer
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


async def run_program_episode(sampler: Any, template: Any, command: Sequence[str], task: dict[str, Any],
                              rubric: Any, *, task_id: str = "task", group_id: str = "program",
                              max_tokens: int = 256, timeout_s: float = 300.0,
                              env: dict[str, str] | None = None) -> ProgramEpisode:
    """Run ``command`` once for ``task`` against a fresh proxy in front of ``sampler``; score it with
    ``rubric``. Never raises for what the program does (a crash, a timeout, garbage output): that is its
    outcome, recorded on the episode and its trajectories."""
    proxy = RecordingProxy(sampler, template, max_tokens=max_tokens, task_id=task_id, group_id=group_id)
    server = ProxyServer(proxy)
    url = await server.start()
    t0 = time.perf_counter()
    status: int | None = None
    error: str | None = None
    out = b""
    try:
        child_env = {**os.environ, **(env or {}), "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "toolgym-proxy",
                     "TOOLGYM_TASK": json.dumps(task, ensure_ascii=False)}
        try:
            proc = await asyncio.create_subprocess_exec(*command, env=child_env, stdin=asyncio.subprocess.DEVNULL,
                                                        stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.PIPE)
        except OSError as exc:
            error = f"the program did not start: {exc}"
        else:
            try:
                out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
                status = proc.returncode
                if status:
                    tail = err[-400:].decode("utf-8", "replace").strip().splitlines()
                    error = f"the program exited with status {status}" + (f": {tail[-1]}" if tail else "")
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
                error = f"the program ran over its limit of {timeout_s:g} s"
    finally:
        await server.stop()
    trajs = proxy.take()
    text = out[:MAX_OUTPUT_BYTES].decode("utf-8", "replace")
    messages = trajs[-1].turns if trajs else []
    result = await rubric.ascore(completion=text, answer=extract_answer(text), task=task, messages=messages)
    reward = result.total if error is None else 0.0
    wall = time.perf_counter() - t0
    for t in trajs:
        t.reward = reward
        t.reward_breakdown = dict(result.components) if error is None else {}
        t.finish_reason = "error" if status not in (0, None) else ("time_limit" if error else t.finish_reason)
        t.error = error
        t.timings["total_s"] = wall
        t.metadata.update(program_status=status, program_output_cut=len(out) > MAX_OUTPUT_BYTES,
                          episode_trajectories=len(trajs))
        if result.errors:
            t.metadata["reward_errors"] = dict(result.errors)
    return ProgramEpisode(trajs, reward, dict(result.components), status, text, error)


async def run_program_group(sampler: Any, template: Any, command: Sequence[str], task: dict[str, Any], rubric: Any,
                            group_size: int, **kwargs: Any) -> list[ProgramEpisode]:
    """``group_size`` concurrent episodes of the same task (a GRPO group), each with its own proxy."""
    return list(await asyncio.gather(*(run_program_episode(sampler, template, command, task, rubric, **kwargs)
                                       for _ in range(group_size))))
