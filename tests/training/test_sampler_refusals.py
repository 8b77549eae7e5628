"""Training configs the trainer cannot honour are refused with one actionable line:

* ``rollout.sampler: openai``: nothing pushes weights to the server, so training would sample a frozen policy
  (allowed with ``rollout.frozen_policy_ok: true``, with a warning);
* ``rollout.top_p < 1``: the sampler's distribution is truncated, and the trainer's log-probs (softmax of
  logits / T) would not be the behaviour policy's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from toolgym.errors import ConfigError
from toolgym.training.config import config_to_dict, load_config
from toolgym.training.trainer import Trainer

from .trainer_util import tiny_config

TOOLGYM = str(Path(sys.executable).parent / "toolgym")
MODEL = {"model": {"name_or_path": "smollm2-135m-instruct"}}
OPENAI = {"sampler": "openai", "base_url": "http://127.0.0.1:9/v1"}


def test_openai_sampler_is_refused_for_training_in_one_line():
    with pytest.raises(ConfigError) as exc:
        load_config({**MODEL, "rollout": OPENAI})
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("rollout.sampler=openai cannot receive weight updates during training")
    for hint in ("sampler: hf or vllm", "toolgym bench --sampler openai", "rollout.frozen_policy_ok: true"):
        assert hint in msg


def test_openai_sampler_with_explicit_opt_in_loads_round_trips_and_warns(tmp_path):
    cfg = load_config({**MODEL, "rollout": {**OPENAI, "frozen_policy_ok": True}})
    assert cfg.rollout.sampler == "openai" and cfg.rollout.frozen_policy_ok is True
    assert load_config(config_to_dict(cfg)) == cfg
    assert load_config(MODEL).rollout.frozen_policy_ok is False  # the default refuses
    with pytest.raises(ConfigError, match="rollout.frozen_policy_ok: must be true or false"):
        load_config({**MODEL, "rollout": {**OPENAI, "frozen_policy_ok": "yes"}})
    # the trainer builds the HTTP sampler (no connection at construction) and warns that it stays frozen
    data = tiny_config(tmp_path / "run", sft__enabled=False)
    data["rollout"].update(OPENAI, frozen_policy_ok=True, sandbox=None)
    tr = Trainer(load_config(data), console=False)
    with pytest.warns(UserWarning, match=r"rollout.sampler=openai: the server at http://127.0.0.1:9/v1 gets no weight"):
        tr.build(rollouts=True)
    assert tr.orchestrator.sampler.name == "openai"


@pytest.mark.parametrize("top_p", [0.9, 0.5])
def test_truncating_top_p_is_refused_for_training(top_p):
    with pytest.raises(ConfigError) as exc:
        load_config({**MODEL, "rollout": {"top_p": top_p}})
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"rollout.top_p={top_p:g} truncates the sampling distribution, so the trainer's log-probs "
                          "would not be the behaviour policy's: use top_p: 1.0")
    # held-out evaluation does not train: it may truncate
    assert load_config({**MODEL, "eval": {"top_p": top_p}}).eval.top_p == top_p
    assert load_config({**MODEL, "rollout": {"top_p": 1.0, "temperature": 0.7}}).rollout.temperature == 0.7


def test_cli_train_with_openai_sampler_prints_one_line_and_exits_2(tmp_path):
    bad = tmp_path / "openai.yaml"
    bad.write_text("algorithm: ctpo\nmodel: {name_or_path: demo}\n"
                   "rollout: {sampler: openai, base_url: 'http://127.0.0.1:9/v1'}\n")
    p = subprocess.run([TOOLGYM, "train", str(bad)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: rollout.sampler=openai cannot receive weight updates")
    assert not (tmp_path / "runs").exists()  # refused before any run folder is made
    p = subprocess.run([TOOLGYM, "train", str(bad), "-s", "rollout.sampler=hf", "-s", "rollout.top_p=0.9"],
                       capture_output=True, text=True, timeout=120)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: rollout.top_p=0.9 truncates")
