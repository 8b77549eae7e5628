"""`toolgym export RUN_DIR [--step N] --out DIR`: a checkpoint of a run as a Hugging Face folder.

Checkpoints already hold one (``step-N/hf/``: safetensors weights, config, generation config, tokenizer and
chat template); export copies it. A checkpoint from before that layout is rebuilt from the run's
``config.yaml`` (model and tokenizer) and the weights in its ``trainer_state.pt``.
Expected failures (no run, no such step) print one ``error: ...`` line and exit 2.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import typer

from toolgym.errors import ToolgymError


class ExportError(ToolgymError):
    """No run, no checkpoint, or no such step to export."""


def find_checkpoint(run_dir: Path, step: int | None) -> Path:
    """``RUN_DIR/checkpoints/step-N`` (``step``) or the latest complete one; RUN_DIR may be the checkpoints folder."""
    from toolgym.training.outputs.checkpoint import STATE_FILE, latest_checkpoint

    if not run_dir.is_dir():
        raise ExportError(f"no run folder at {run_dir}")
    ckdir = run_dir / "checkpoints" if (run_dir / "checkpoints").is_dir() else run_dir
    if step is None:
        ckpt = latest_checkpoint(ckdir)
        if ckpt is None:
            raise ExportError(f"no checkpoint in {ckdir}")
        return ckpt
    ckpt = ckdir / f"step-{step:06d}"
    if not (ckpt / STATE_FILE).exists():
        have = sorted(int(p.name.split("-")[1]) for p in ckdir.glob("step-*") if (p / STATE_FILE).exists())
        raise ExportError(f"no checkpoint for step {step} in {ckdir}; steps saved: "
                          f"{', '.join(map(str, have)) or 'none'}")
    return ckpt


def export_checkpoint(run_dir: Path, out: Path, step: int | None = None) -> Path:
    """Write the Hugging Face folder of a run's checkpoint to ``out``; returns the checkpoint exported."""
    from toolgym.training.outputs.checkpoint import HF_DIR

    ckpt = find_checkpoint(run_dir, step)
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"--out {out} exists and is not empty")
    hf = ckpt / HF_DIR
    if (hf / "config.json").exists():
        shutil.copytree(hf, out, dirs_exist_ok=True)
        return ckpt
    _rebuild(ckpt, run_dir if (run_dir / "config.yaml").exists() else run_dir.parent, out)
    return ckpt


def _rebuild(ckpt: Path, run_dir: Path, out: Path) -> None:
    """A checkpoint without ``hf/``: the run's model and tokenizer, with the checkpoint's weights."""
    from toolgym.training.config import load_config
    from toolgym.training.model.load import load_policy
    from toolgym.training.outputs.checkpoint import apply_weights, load_weights, write_hf_folder

    if not (run_dir / "config.yaml").exists():
        raise ExportError(f"{ckpt} has no hf/ folder and {run_dir} no config.yaml to rebuild the model from")
    cfg = load_config(run_dir / "config.yaml")
    model, tok = load_policy(cfg, run_dir)
    model.float()
    apply_weights(model, load_weights(ckpt))
    write_hf_folder(out, model, tok)


def export(
    run_dir: Path = typer.Argument(..., help="a training run's output_dir (or its checkpoints/ folder)"),
    out: Path = typer.Option(..., "--out", help="folder to write the Hugging Face model into"),
    step: int = typer.Option(None, "--step", help="the checkpoint's step (default: the latest)"),
) -> None:
    """Export a run's checkpoint as a Hugging Face folder (safetensors, tokenizer, chat template) for vLLM & co."""
    try:
        ckpt = export_checkpoint(run_dir, out, step)
    except ToolgymError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(getattr(exc, "exit_code", 2)) from None
    typer.echo(json.dumps({"checkpoint": str(ckpt), "out": str(out)}))
