"""Checkpoints that resume exactly: model, optimizer, scheduler, every RNG, step and data cursor.

Written to a temp folder and renamed, so a kill -9 mid-save never leaves a checkpoint that loads.

Layout of ``step-N/``::

    hf/                 the policy as a Hugging Face folder: config.json, model.safetensors,
                        generation_config.json, tokenizer files and chat template (loads with
                        ``AutoModelForCausalLM.from_pretrained``, vLLM, ``toolgym export``)
    trainer_state.pt    optimizer, scheduler, RNG states, step, data cursor, objective extras;
                        tensors and plain Python containers only, so it loads with ``weights_only=True``
    meta.json           step and data cursor, for humans and tools
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "trainer_state.pt"
META_FILE = "meta.json"
HF_DIR = "hf"


@dataclass
class TrainerState:
    """What the loop needs besides the weights to continue as if never stopped."""

    step: int = 0
    data_cursor: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def rng_state() -> dict[str, Any]:
    """Every RNG's state as tensors and plain Python values (``torch.load(weights_only=True)`` can read it)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": (str(name), torch.from_numpy(np.asarray(keys, dtype=np.int64)), int(pos), int(has_gauss),
                  float(gauss)),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    keys = keys.numpy() if isinstance(keys, torch.Tensor) else np.asarray(keys)
    np.random.set_state((name, keys.astype(np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    directory: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    state: TrainerState,
    rng: dict[str, Any] | None = None,
    *,
    tokenizer: Any = None,
    model_state: dict[str, torch.Tensor] | None = None,
    optimizer_state: dict[str, Any] | None = None,
    extra_dirs: dict[str, Callable[[Path], None]] | None = None,
) -> Path:
    """Save to DIR/step-N atomically and point DIR/latest at it.

    ``model_state`` / ``optimizer_state``: full (unsharded) state dicts when the caller gathered them (FSDP:
    :func:`toolgym.training.update.data_parallel.full_state_dict`); default ``model.state_dict()`` and
    ``optimizer.state_dict()``. ``tokenizer`` is saved into ``hf/`` with its chat template. ``extra_dirs``:
    folder name -> a writer called with that folder inside the checkpoint (e.g. LoRA adapters)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"step-{state.step:06d}"
    tmp = directory / f".tmp-step-{state.step:06d}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    write_hf_folder(tmp / HF_DIR, model, tokenizer, model_state)
    for name, write in (extra_dirs or {}).items():
        write(tmp / name)
    torch.save(
        {
            "optimizer": optimizer_state if optimizer_state is not None else optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "rng": rng if rng is not None else rng_state(),
            "state": {"step": state.step, "data_cursor": state.data_cursor, "extra": state.extra},
        },
        tmp / STATE_FILE,
    )
    (tmp / META_FILE).write_text(json.dumps({"step": state.step, "data_cursor": state.data_cursor}))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    latest_tmp = directory / f".latest-{os.getpid()}"
    latest_tmp.write_text(final.name)
    os.replace(latest_tmp, directory / "latest")
    return final


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest complete checkpoint, or None."""
    directory = Path(directory)
    pointer = directory / "latest"
    if pointer.exists():
        candidate = directory / pointer.read_text().strip()
        if (candidate / STATE_FILE).exists():
            return candidate
    done = sorted(p for p in directory.glob("step-*") if (p / STATE_FILE).exists())
    return done[-1] if done else None


def write_hf_folder(out: str | Path, model: torch.nn.Module, tokenizer: Any = None,
                    model_state: dict[str, torch.Tensor] | None = None) -> Path:
    """``model`` (with ``model_state`` as its weights when given) and ``tokenizer`` as a Hugging Face folder:
    safetensors weights, config, generation config (where the model has one), tokenizer and chat template."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sd = model_state if model_state is not None else model.state_dict()
    sd = {k: v.detach().cpu() for k, v in sd.items()}
    if hasattr(model, "save_pretrained"):
        # transformers >= 5 always writes safetensors (v4 took safe_serialization=True, its default too);
        # save_pretrained also writes generation_config.json when the model can generate.
        model.save_pretrained(out, state_dict=sd)
    else:  # a bare nn.Module (tests): the weights alone, tied tensors stored once
        from safetensors.torch import save_file

        seen: dict[int, str] = {}
        flat = {}
        for k, v in sd.items():
            ptr = v.untyped_storage().data_ptr()
            if ptr not in seen:
                seen[ptr] = k
                flat[k] = v.contiguous().clone()
        save_file(flat, str(out / "model.safetensors"))
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out


def load_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The model weights of checkpoint ``path`` (``step-N``): every ``hf/*.safetensors`` file merged; a
    checkpoint from before the ``hf/`` folder keeps them in its pickle under ``"model"``."""
    from safetensors.torch import load_file

    files = sorted((Path(path) / HF_DIR).glob("*.safetensors"))
    if not files:
        return _load_blob(path)["model"]
    sd: dict[str, torch.Tensor] = {}
    for f in files:
        sd.update(load_file(str(f)))
    return sd


def apply_weights(model: torch.nn.Module, sd: dict[str, torch.Tensor]) -> None:
    """``model.load_state_dict(sd)``, allowing keys that ``save_pretrained`` left out because the tensor is
    tied to one that was saved (e.g. ``lm_head.weight`` with tied embeddings)."""
    res = model.load_state_dict(sd, strict=False)
    if res.unexpected_keys:
        raise RuntimeError(f"checkpoint has weights the model lacks: {res.unexpected_keys[:5]}")
    if res.missing_keys:
        own = model.state_dict(keep_vars=True)
        loaded = {own[k].data_ptr() for k in sd if k in own}
        really = [k for k in res.missing_keys if own[k].data_ptr() not in loaded]
        if really:
            raise RuntimeError(f"checkpoint lacks weights: {really[:5]}")


def _load_blob(path: str | Path) -> dict[str, Any]:
    f = Path(path) / STATE_FILE
    try:
        return torch.load(f, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        # Not possible with weights_only=True: checkpoints written before this format (numpy RNG arrays and
        # the model inside the pickle), or an objective whose state_dict() holds objects outside torch's
        # allow-list. They are this run's own files, so the full unpickler is acceptable for them.
        return torch.load(f, map_location="cpu", weights_only=False)


def load_checkpoint(
    path: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    restore_rng: bool = True,
    *,
    set_model: Callable[[dict[str, torch.Tensor]], None] | None = None,
    set_optimizer: Callable[[dict[str, Any]], None] | None = None,
) -> TrainerState:
    """Restore a checkpoint. ``set_model`` / ``set_optimizer`` take the full state dicts when plain
    ``load_state_dict`` cannot (FSDP: :func:`toolgym.training.update.data_parallel.load_full_state_dict`)."""
    blob = _load_blob(path)
    sd = blob["model"] if "model" in blob else load_weights(path)
    if set_model is not None:
        set_model(sd)
    else:
        apply_weights(model, sd)
    if optimizer is not None:
        if set_optimizer is not None:
            set_optimizer(blob["optimizer"])
        else:
            optimizer.load_state_dict(blob["optimizer"])
    if scheduler is not None and blob.get("scheduler") is not None:
        scheduler.load_state_dict(blob["scheduler"])
    if restore_rng:
        set_rng_state(blob["rng"])
    s = blob["state"]
    return TrainerState(step=s["step"], data_cursor=s["data_cursor"], extra=s.get("extra", {}))
