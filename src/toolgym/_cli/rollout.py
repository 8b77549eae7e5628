"""`toolgym rollout`: sample groups of episodes from an environment and write them to JSONL.

    toolgym rollout ENV_ID --model M [--sampler hf|vllm|openai] [--base-url URL] --tasks N --group G --out FILE.jsonl
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer

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
    sampler: str = typer.Option("hf", "--sampler", help="hf | vllm | openai"),
    base_url: str = typer.Option("http://127.0.0.1:8000/v1", "--base-url", help="openai: the server's /v1 URL"),
    tokenizer: str = typer.Option(None, "--tokenizer", help="tokenizer folder, asset or Hub id (default: the model's)"),
    device: str = typer.Option(None, "--device", help="hf sampler: auto (CUDA when available, else CPU) | cpu | "
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
    env_kwarg: list[str] = typer.Option([], "--env-kwarg", "-k", help="key=value passed to the env constructor"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
) -> None:
    """Sample G episodes for each of N tasks and write their token-exact trajectories to JSONL."""
    import asyncio

    from toolgym.agents import build_sampler
    from toolgym.agents.chat import ChatTemplate
    from toolgym.agents.runner import EpisodeLimits, RolloutRunner, TaskSpec
    from toolgym.agents.sampling import SamplingParams
    from toolgym.agents.storage import write_jsonl
    from toolgym.envs import registry

    registry.spec(env_id)  # unknown ids fail here with the registry's message
    if sampler not in ("hf", "vllm", "openai"):
        raise ConfigError(f"--sampler must be hf, vllm or openai, got {sampler!r}")
    hf_kwargs: dict[str, Any] = {}
    if device is not None:
        from toolgym.devices import check_device, resolve_device

        device = check_device(device, "--device")
        if sampler != "hf" and device != "auto":
            raise ConfigError(f"--device applies to --sampler hf; {sampler} places the model itself")
        hf_kwargs["device"] = resolve_device(device, what="--device", local_rank=None)
    try:
        params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_tokens, seed=seed)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if sampler == "openai":  # the served model name; the tokenizer comes from a local copy
        smp = build_sampler("openai", model, base_url=base_url, max_model_len=max_total_tokens)
        tok_ref = _resolve_model(tokenizer or model, "tokenizer")
    else:
        model_path = _resolve_model(model)
        tok_ref = _resolve_model(tokenizer, "tokenizer") if tokenizer else model_path
        smp = build_sampler(sampler, model_path, max_model_len=max_total_tokens,
                            **(hf_kwargs if sampler == "hf" else {}))
    tpl = ChatTemplate(getattr(smp, "tokenizer", None) or tok_ref)
    runner = RolloutRunner(smp, tpl, env_id, params,
                           EpisodeLimits(max_turns=max_turns, max_total_tokens=max_total_tokens, max_wall_s=max_wall_s),
                           env_kwargs=_parse_kwargs(env_kwarg), seed=seed)
    specs = [TaskSpec(seed=seed + i, options={"index": i}) for i in range(tasks)]
    t0 = time.perf_counter()
    groups = asyncio.run(runner.arun(specs, group))
    wall = time.perf_counter() - t0
    trajs = [t for g in groups for t in g]
    meta = {"env_id": env_id, "model": model, "sampler": sampler, "device": getattr(smp, "device", None),
            "tasks": tasks, "group": group,
            "sampling": params.to_dict(), "max_turns": max_turns, "max_total_tokens": max_total_tokens,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_jsonl(out, trajs, meta)
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
        typer.echo(f"wrote {summary['episodes']} episodes ({summary['groups']} groups) to {out} in {wall:.1f} s; "
                   f"mean reward {summary['mean_reward']:.3f}, {summary['model_tokens']} model tokens, "
                   f"{summary['errors']} errors; finish: {summary['finish_reasons']}")


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out
