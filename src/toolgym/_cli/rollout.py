"""`toolgym rollout`: sample groups of episodes from an environment and write them to JSONL.

    toolgym rollout ENV_ID --model M [--sampler hf|vllm|openai|PLUGIN] [--base-url URL] --tasks N --group G --out FILE.jsonl

Each group is appended to the file as soon as it finishes, so an interrupted run keeps what it did; the
sidecar FILE.jsonl.meta.json says `"complete": true` once every group is written.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import typer

from toolgym._progress import Bar
from toolgym._stop import Stopped, command_line, held, signals
from toolgym._text import printable
from toolgym.errors import ConfigError


def _resolve_model(model: str, kind: str = "model") -> str:
    """A local path, a toolgym asset (e.g. smollm2-135m-instruct) or a Hugging Face Hub id (see
    `toolgym.assets.resolve_model`); one error line when none of them can be had here."""
    from toolgym.assets import resolve_model

    return resolve_model(model, kind)


def _parse_kwargs(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--env-kwarg {item!r} must look like key=value")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = json.loads(v)
        except ValueError:
            out[k.strip()] = v
    return out


def rollout(
    env_id: str = typer.Argument(..., help="environment id, e.g. toolgym/Arith-v0"),
    model: str = typer.Option(..., "--model", help="local folder, asset name (smollm2-135m-instruct) or Hugging Face "
                                                   "Hub id (openai: the served model name)"),
    sampler: str = typer.Option("hf", "--sampler", help="hf | vllm | openai | a plug-in's name (entry-point "
                                "group toolgym.samplers)"),
    base_url: str = typer.Option("http://127.0.0.1:8000/v1", "--base-url", help="a remote sampler's (openai) /v1 URL"),
    tokenizer: str = typer.Option(None, "--tokenizer", help="tokenizer folder, asset or Hub id (default: the model's)"),
    device: str = typer.Option(None, "--device", help="in-process sampler (hf): auto (CUDA when available, else CPU) | cpu | "
                                                    "cuda | cuda:N (default auto)"),
    tasks: int = typer.Option(4, "--tasks", min=1, help="number of tasks (task indices 0..N-1)"),
    group: int = typer.Option(4, "--group", min=1, help="episodes per task (G)"),
    out: Path = typer.Option(..., "--out", help="output JSONL file"),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1, help="new tokens per turn"),
    temperature: float = typer.Option(1.0, "--temperature", min=0.0),
    top_p: float = typer.Option(1.0, "--top-p"),
    top_k: int = typer.Option(0, "--top-k"),
    max_turns: int = typer.Option(4, "--max-turns", min=1),
    max_total_tokens: int = typer.Option(2048, "--max-total-tokens", min=16, help="prompt + response tokens per episode"),
    max_wall_s: float = typer.Option(300.0, "--max-wall-s", help="wall-time limit per episode"),
    seed: int = typer.Option(0, "--seed"),
    concurrency: int = typer.Option(64, "--concurrency", min=1, help="episodes in flight at once"),
    env_kwarg: list[str] = typer.Option([], "--env-kwarg", "-k", help="key=value passed to the env constructor"),
    tool_parser: str = typer.Option(None, "--tool-parser", help="the model's tool-call format: hermes, llama3_json, "
                                    "pythonic, mistral, qwen3_coder, gpt_oss, deepseek_v3 (default: read from "
                                    "the chat template)"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
    resume: bool = typer.Option(False, "--resume", help="keep the groups --out already holds (a stopped run's) and "
                                "sample only the missing ones, with the seeds the whole run gives them"),
    progress: bool = typer.Option(True, "--progress/--no-progress",
                                  help="show progress on stderr (a bar on a terminal, a line every few seconds "
                                       "otherwise)"),
) -> None:
    """Sample G episodes for each of N tasks and write their token-exact trajectories to JSONL."""
    import asyncio

    from toolgym._cli.sampler_choice import check_sampler_choice
    from toolgym.agents import build_sampler
    from toolgym.agents.chat import ChatTemplate
    from toolgym.agents.runner import EpisodeLimits, RolloutRunner, TaskSpec
    from toolgym.agents.sampling import SamplingParams
    from toolgym.agents.storage import RolloutWriter, write_meta
    from toolgym.envs import registry

    registry.spec(env_id)  # unknown ids fail here with the registry's message
    spec, device_kwargs = check_sampler_choice(sampler, device, tool_parser)
    try:
        params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_tokens, seed=seed)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None

    def say(msg: str) -> None:  # what it is doing, before the first episode ends
        if progress:
            typer.echo(msg, err=True)

    if spec.remote:  # the served model name; the tokenizer comes from a local copy
        tok_ref = _resolve_model(tokenizer or model, "tokenizer")
        say(f"loading the model: {model} ({sampler} sampler)")
        smp = build_sampler(sampler, model, base_url=base_url, max_model_len=max_total_tokens)
    else:
        model_path = _resolve_model(model)  # a name typo is its one line before anything is printed
        tok_ref = _resolve_model(tokenizer, "tokenizer") if tokenizer else model_path
        say(f"loading the model: {model} ({sampler} sampler)")
        smp = build_sampler(sampler, model_path, max_model_len=max_total_tokens, **device_kwargs)
    tpl = ChatTemplate(getattr(smp, "tokenizer", None) or tok_ref, tool_parser=tool_parser)
    runner = RolloutRunner(smp, tpl, env_id, params,
                           EpisodeLimits(max_turns=max_turns, max_total_tokens=max_total_tokens, max_wall_s=max_wall_s),
                           env_kwargs=_parse_kwargs(env_kwarg), seed=seed, max_concurrent_episodes=concurrency)
    meta = {"env_id": env_id, "model": model, "sampler": sampler, "device": getattr(smp, "device", None),
            "tool_parser": tpl.tool_parser.name, "tool_parser_source": tpl.tool_parser_source,
            "tasks": tasks, "group": group,
            "sampling": params.to_dict(), "max_turns": max_turns, "max_total_tokens": max_total_tokens,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "complete": False}
    kept = _kept_groups(out, meta, group) if resume else set()
    specs = [TaskSpec(seed=seed + i, options={"index": i}, index=i) for i in range(tasks) if i not in kept]
    if kept:
        say(f"resuming: {len(kept)} of {tasks} groups are in {out} already")
    t0 = time.perf_counter()
    say(f"sampling {len(specs)} tasks x {group} episodes of {env_id} -> {out}")
    tally = _Tally()
    try:
        with signals(), RolloutWriter(out, meta, append=bool(kept)) as writer, \
                Bar("episodes", len(specs) * group, stream=sys.stderr, enabled=progress, every_s=5.0) as bar:
            finished = _Tally()  # episodes as they end, for the display; `tally` counts what is in the file

            def episode(traj: Any) -> None:
                finished.add([traj])
                bar.update(finished.episodes, f"mean reward {finished.mean:.3f}")

            def done(_ti: int, trajs: list[Any]) -> None:
                with held():  # a signal lands after both: the group is in the file and in the tally, or in neither
                    writer.write(trajs)
                    tally.add(trajs)

            groups = asyncio.run(runner.arun(specs, group, on_group=done, on_episode=episode))
    except Stopped as stop:
        _stopped(stop, out, meta, tally, len(kept), tasks, time.perf_counter() - t0)
    wall = time.perf_counter() - t0
    trajs = [t for g in groups for t in g]
    write_meta(out, {**meta, "complete": True, "episodes": len(trajs) + len(kept) * group, "wall_s": round(wall, 3)})
    summary = {
        "out": str(out), "episodes": len(trajs), "groups": len(groups),
        "mean_reward": sum(t.reward for t in trajs) / max(1, len(trajs)),
        "errors": sum(1 for t in trajs if t.error), "model_tokens": sum(t.num_model_tokens for t in trajs),
        "wall_s": round(wall, 3), "episodes_per_s": round(len(trajs) / wall, 4) if wall else None,
        "finish_reasons": _count(t.finish_reason for t in trajs),
    }
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        typer.echo(printable(f"wrote {summary['episodes']} episodes ({summary['groups']} groups) to {out} in "
                             f"{wall:.1f} s; mean reward {summary['mean_reward']:.3f}, {summary['model_tokens']} "
                             f"model tokens, {summary['errors']} errors; finish: {summary['finish_reasons']}"))


class _Tally:
    """Groups and episodes written so far, and their mean reward."""

    def __init__(self) -> None:
        self.groups = self.episodes = 0
        self.reward = 0.0

    def add(self, trajs: list[Any]) -> None:
        self.groups += 1
        self.episodes += len(trajs)
        self.reward += sum(t.reward for t in trajs)

    @property
    def mean(self) -> float:
        return self.reward / max(1, self.episodes)


def _kept_groups(out: Path, meta: dict[str, Any], group: int) -> set[int]:
    """--resume: the task indices whose whole group `out` holds, after checking that it was written by the same
    command (environment, model, sampler, tasks, group size, sampling); a partial group is sampled again."""
    from toolgym.agents.storage import iter_jsonl, read_header

    if not out.exists():
        return set()
    before = read_header(out).get("meta") or {}
    keys = ("env_id", "model", "sampler", "tasks", "group", "sampling", "max_turns", "max_total_tokens")
    differ = [k for k in keys if before.get(k) != meta.get(k)]
    if differ:
        raise ConfigError(f"cannot resume {out}: it was written with other {', '.join(differ)} "
                          f"({', '.join(f'{k}={before.get(k)!r}' for k in differ)}); give another --out")
    counts: dict[int, int] = {}
    for t in iter_jsonl(out):
        index = t.metadata.get("task_index")
        if isinstance(index, int):
            counts[index] = counts.get(index, 0) + 1
    if any(n != group for n in counts.values()):  # a group cut in the middle: the file is rewritten without it
        raise ConfigError(f"cannot resume {out}: it holds a partial group (groups are written whole by toolgym)")
    return set(counts)


def _stopped(stop: Stopped, out: Path, meta: dict[str, Any], tally: _Tally, kept: int, tasks: int,
             wall: float) -> None:
    """SIGINT/SIGTERM: the finished groups are in the file (the sidecar says how many, complete: false); one
    line says so with the command that samples only the missing groups; exit 128 + the signal."""
    from toolgym.agents.storage import write_meta

    group = meta.get("group") or 1
    write_meta(out, {**meta, "complete": False, "episodes": tally.episodes + kept * group, "wall_s": round(wall, 3)})
    typer.echo(printable(f"stopped after {tally.groups + kept} of {tasks} groups ({stop.name}): "
                         f"{tally.episodes + kept * group} finished episodes in {out}; resume: "
                         f"{command_line(['--resume'])}"), err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(stop.exit_code)  # a sampler thread may be inside a forward pass: leave without joining it


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out
