"""`toolgym train CONFIG.yaml [--resume]` and `toolgym sft CONFIG.yaml`.

Heavy imports (torch, transformers) happen inside the commands so that `toolgym --help` stays fast.
Expected failures (bad config, missing model) print one `error: ...` line and exit 2.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import typer

from toolgym._progress import Bar
from toolgym._stop import Stopped, command_line, signals
from toolgym.devices import check_device
from toolgym.errors import ToolgymError

_DEVICE_HELP = "where the model runs: auto (CUDA when available, else CPU) | cpu | cuda | cuda:N"


def _check_model_name(cfg: Any) -> None:
    """Resolve model.name_or_path / model.tokenizer up front (local path, toolgym asset, Hugging Face Hub id),
    so a Hub id that cannot be had here is one line before anything is built."""
    from toolgym.assets import resolve_model

    name = cfg.model.name_or_path
    if not (name == "demo" or name.startswith("demo:")):
        resolve_model(name)
    if cfg.model.tokenizer:
        resolve_model(cfg.model.tokenizer, "tokenizer")


def _fail(exc: ToolgymError) -> None:
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(getattr(exc, "exit_code", 2))


def _table(summary: dict) -> str:
    b, a = summary.get("before"), summary.get("after")
    if not (b and a):
        return ""
    rows = ["| | step | held-out reward | tool-use rate |", "|---|---|---|---|",
            f"| before RL | {b['step']} | {b['reward_mean']:.3f} | {b['tool_rate']:.2f} |",
            f"| after RL | {a['step']} | {a['reward_mean']:.3f} | {a['tool_rate']:.2f} |"]
    return "\n".join(rows)


def train(
    config: Path = typer.Argument(..., help="run config (YAML)"),
    resume: bool = typer.Option(False, "--resume", help="continue from the latest checkpoint in output_dir"),
    set_: list[str] = typer.Option([], "--set", "-s", help="override a field: section.key=value (repeatable)"),
    output_dir: str = typer.Option(None, "--output-dir", "-o", help="override output_dir"),
    seed: int = typer.Option(None, "--seed", help="override seed"),
    no_progress: bool = typer.Option(False, "--no-progress", help="no progress bar (logs only)"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
    ray: str = typer.Option(None, "--ray", metavar="ADDRESS",
                            help="rollouts on Ray: a running cluster's host:port (ray start --head), "
                                 "or 'local' to start one on this machine"),
    device: str = typer.Option(None, "--device", help=_DEVICE_HELP + " (overrides model.device)"),
) -> None:
    """Train a policy with RL (CTPO, GRPO, GSPO, ...) from a YAML config: SFT warm start, rollouts, updates, evals."""
    from toolgym.training.config import load_config

    overrides = list(set_)
    if output_dir:
        overrides.append(f"output_dir={output_dir}")
    if seed is not None:
        overrides.append(f"seed={seed}")
    if no_progress or as_json:
        overrides.append("logging.progress=false")
    if ray:
        overrides.append("distributed=ray")
        if ray != "local":
            overrides.append(f"ray.address={json.dumps(ray)}")
    try:
        if device is not None:
            overrides.append(f"model.device={json.dumps(check_device(device, '--device'))}")
        cfg = load_config(config, overrides)
        _check_model_name(cfg)
        from toolgym.envs import registry

        for env_id in cfg.env_ids():  # every name checked before the first line
            registry.spec(env_id)
        if not as_json and os.environ.get("RANK", "0") == "0":  # before torch loads: the first sign of life
            on = " + ".join(e.label for e in cfg.rollout.mixture())
            typer.echo(f"{'resuming' if resume else 'training'} {cfg.algorithm} on {on}, {cfg.steps} steps "
                       f"-> {cfg.output_dir}")
        from toolgym.training.trainer import train as run
        from toolgym.training.update import data_parallel as D

        with D.default_device(cfg.model.device), signals():
            summary = run(cfg, resume=resume)
    except ToolgymError as exc:
        _fail(exc)
        return
    except Stopped as stop:
        _stopped(stop, cfg.steps)
    if "before" not in summary and "after" not in summary:  # not rank 0 under torchrun
        return
    if as_json:
        typer.echo(json.dumps(summary))
        return
    table = _table(summary)
    if table:
        typer.echo(table)
    typer.echo(f"metrics: {Path(cfg.output_dir) / 'metrics.jsonl'}")
    if summary.get("plot"):
        typer.echo(f"plot: {summary['plot']}")
    viewer = _viewer_command(Path(cfg.output_dir))
    if viewer:
        typer.echo(f"rollouts: {viewer}")


def _viewer_command(out: Path) -> str:
    """The `toolgym rollouts view` command for the run's last saved step (logging.save_rollouts), or ''."""
    import shlex

    files = sorted((out / "rollouts").glob("step-*.jsonl"))
    if not files:
        return ""
    return shlex.join(["toolgym", "rollouts", "view", str(files[-1])])


def _stopped(stop: Stopped, steps: int) -> None:
    """One line: where the run stopped, what was kept, the command that goes on; exit 128 + the signal."""
    info = stop.info
    step = info.get("step", 0)
    kept = f"checkpoint {info['checkpoint']}" if info.get("checkpoint") else "no checkpoint yet"
    typer.echo(f"stopped at step {step} of {steps} ({stop.name}; {kept}); resume: {command_line(['--resume'])}",
               err=True)
    raise typer.Exit(stop.exit_code)


def sft(
    config: Path = typer.Argument(..., help="run config (YAML) with an sft: section"),
    out: Path = typer.Option(..., "--out", help="folder for the warm-started model and tokenizer"),
    set_: list[str] = typer.Option([], "--set", "-s", help="override a field: section.key=value"),
    device: str = typer.Option(None, "--device", help=_DEVICE_HELP + " (overrides model.device)"),
) -> None:
    """Supervised warm start only: train on demonstrations (assistant tokens only) and save the model."""
    from toolgym.training.config import load_config

    try:
        overrides = [*set_, "sft.enabled=true"]
        if device is not None:
            overrides.append(f"model.device={json.dumps(check_device(device, '--device'))}")
        cfg = load_config(config, overrides)
        _check_model_name(cfg)
        import torch

        from toolgym.agents.chat import ChatTemplate
        from toolgym.training import sft as S
        from toolgym.training.model.load import load_policy
        from toolgym.training.trainer import Trainer
        from toolgym.training.update import data_parallel as D

        torch.manual_seed(cfg.seed)
        with D.default_device(cfg.model.device):
            tr = Trainer(cfg, console=False)
        typer.echo(f"preparing demonstrations ({cfg.sft.data or f'{cfg.sft.demos} generated'})", err=True)
        demos = tr._demonstrations() if not cfg.sft.data else S.read_demonstrations(cfg.sft.data)
        out.mkdir(parents=True, exist_ok=True)
        typer.echo(f"loading the model: {cfg.model.name_or_path}", err=True)
        model, tok = load_policy(cfg, out / ".scratch", demos)
        model.to(tr.dist.device)
        template = ChatTemplate(tok)
        trajs = S.demonstration_trajectories(template, demos, cfg.sft.max_seq_len)
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        total = -(-len(trajs) // cfg.sft.batch_size) * cfg.sft.epochs
        with Bar("sft", total, unit="batches", stream=sys.stderr) as bar:
            res = S.sft_train(model, trajs, epochs=cfg.sft.epochs, lr=cfg.sft.lr, batch_size=cfg.sft.batch_size,
                              pad_id=pad, seed=cfg.seed,
                              on_step=lambda r: bar.update(int(r["sft_step"]), f"loss {r['sft_loss']:.3f}"))
        typer.echo(f"saving the model to {out}", err=True)
        model.save_pretrained(out)
        tok.save_pretrained(out)
    except ToolgymError as exc:
        _fail(exc)
        return
    typer.echo(json.dumps({"out": str(out), "demonstrations": len(trajs), **res}))
    sys.stdout.flush()
