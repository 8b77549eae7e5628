"""Checkpoints carry the policy as a Hugging Face folder; `toolgym export` writes one for any checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.training.tiny import tiny_lm
from toolgym.training.config import load_config
from toolgym.training.outputs.checkpoint import (
    STATE_FILE,
    TrainerState,
    latest_checkpoint,
    load_checkpoint,
    load_weights,
    save_checkpoint,
)
from toolgym.training.trainer import Trainer

from .trainer_util import tiny_config

_SCRIPT = Path(sys.executable).parent / "toolgym"
CLI = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-c", "from toolgym.cli import main; main()"]


def _logprobs(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    return torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "run"
    cfg = load_config(tiny_config(out, steps=2, eval={"every": 0, "tasks": 2, "at_start": False},
                                  checkpoint={"every": 1, "keep_last": 3}))
    tr = Trainer(cfg, console=False)
    summary = tr.fit()
    return tr, out, summary


@pytest.mark.slow
def test_training_writes_hf_folders_and_export_loads_in_transformers(trained, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tr, out, summary = trained
    ckdir = out / "checkpoints"
    for step in (1, 2):
        hf = ckdir / f"step-{step:06d}" / "hf"
        assert (hf / "config.json").exists() and (hf / "generation_config.json").exists()
        assert list(hf.glob("*.safetensors")) and not list(hf.glob("*.bin"))
    assert summary["hf"] == str(ckdir / "step-000002" / "hf")
    # the pickle holds no weights and loads with the restricted unpickler
    blob = torch.load(ckdir / "step-000002" / STATE_FILE, weights_only=True)
    assert "model" not in blob and blob["state"]["step"] == 2

    dest = tmp_path / "exported"
    r = subprocess.run([*CLI, "export", str(out), "--out", str(dest)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["checkpoint"].endswith("step-000002")
    model = AutoModelForCausalLM.from_pretrained(dest, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(dest)
    assert tok.chat_template == tr.tokenizer.chat_template
    msgs = [{"role": "user", "content": "What is 3 + 4?"}]
    assert tok.apply_chat_template(msgs, add_generation_prompt=True) == \
        tr.tokenizer.apply_chat_template(msgs, add_generation_prompt=True)
    assert model.generation_config.eos_token_id == tr.module.generation_config.eos_token_id

    ids = torch.tensor([tok.encode("<|im_start|>user\nWhat is 12 + 7?<|im_end|>\n<|im_start|>assistant\n")] * 2)
    tr.module.eval()
    expected = _logprobs(tr.module, ids)
    got = _logprobs(model, ids)
    assert torch.allclose(got, expected, atol=1e-5, rtol=0), (got - expected).abs().max()


@pytest.mark.slow
def test_export_an_earlier_step_differs_from_the_last(trained, tmp_path):
    from transformers import AutoModelForCausalLM

    _, out, _ = trained
    r = subprocess.run([*CLI, "export", str(out), "--step", "1", "--out", str(tmp_path / "s1")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    m1 = AutoModelForCausalLM.from_pretrained(tmp_path / "s1")
    w2 = load_weights(out / "checkpoints" / "step-000002")
    w1 = m1.state_dict()
    assert any(not torch.equal(w1[k], w2[k]) for k in w2)
    for k, v in load_weights(out / "checkpoints" / "step-000001").items():
        torch.testing.assert_close(w1[k], v, rtol=0, atol=0)


@pytest.mark.slow
def test_export_missing_run_or_step_is_one_line(trained, tmp_path):
    _, out, _ = trained
    r = subprocess.run([*CLI, "export", str(tmp_path / "nope"), "--out", str(tmp_path / "x")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [f"error: no run folder at {tmp_path / 'nope'}"]
    r = subprocess.run([*CLI, "export", str(out), "--step", "7", "--out", str(tmp_path / "y")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no checkpoint for step 7") and "1, 2" in lines[0]
    assert not (tmp_path / "y").exists()


def _tied(seed: int):
    model = tiny_lm(seed=seed)
    model.config.tie_word_embeddings = True
    model.tie_weights()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    return model


def test_checkpoint_round_trip_with_tied_weights_and_legacy_pickle(tmp_path):
    model = _tied(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randint(0, 64, (2, 5))
    model(input_ids=x, labels=x).loss.backward()
    opt.step()
    save_checkpoint(tmp_path / "new", model, opt, None, TrainerState(step=1))
    fresh = _tied(5)
    load_checkpoint(latest_checkpoint(tmp_path / "new"), fresh, torch.optim.AdamW(fresh.parameters()))
    for k, v in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k
    # a checkpoint of the earlier format (weights and numpy RNG inside the pickle) still loads
    import numpy as np

    legacy = tmp_path / "old" / "step-000001"
    legacy.mkdir(parents=True)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": None,
                "rng": {"python": __import__("random").getstate(), "numpy": np.random.get_state(),
                        "torch": torch.get_rng_state(), "cuda": None},
                "state": {"step": 1, "data_cursor": 3, "extra": {}}}, legacy / STATE_FILE)
    other = _tied(9)
    st = load_checkpoint(legacy, other, torch.optim.AdamW(other.parameters()))
    assert st.data_cursor == 3
    assert all(torch.equal(other.state_dict()[k], v) for k, v in model.state_dict().items())
