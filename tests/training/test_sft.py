"""SFT warm start: demonstrations tokenized like real episodes, loss on assistant tokens only, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from toolgym.agents.chat import ChatTemplate
from toolgym.training.model.demo import build_demo
from toolgym.training.sft import (
    arith_demonstrations,
    demonstration_trajectories,
    encode_demonstration,
    sft_train,
)
from toolgym.training.update.batch import collate
from toolgym.training.update.logprobs import response_logprobs

from .trainer_util import tiny_config

EK = {"min_digits": 2, "max_digits": 2, "system_prompt": None}


def _setup(n: int = 24):
    demos = arith_demonstrations(n, seed=0, tool_fraction=0.5, direct_correct=0.0, env_kwargs=EK)
    corpus = [m["content"] for d in demos for m in d["messages"]] + ["user\nassistant\ntool\nsystem\ntools: python"] * 20
    model, tok = build_demo(corpus, vocab_size=300, layers=1, hidden=32, heads=2, intermediate=64, max_positions=256)
    return demos, model, tok, ChatTemplate(tok)


def test_demonstrations_mix_tool_use_and_direct_answers():
    demos = arith_demonstrations(200, seed=1, tool_fraction=0.5, direct_correct=0.2, env_kwargs=EK)
    tool = [d for d in demos if any(m["role"] == "tool" for m in d["messages"])]
    assert 0.35 < len(tool) / len(demos) < 0.65
    for d in tool[:20]:
        msgs = d["messages"]
        expr = msgs[-4]["content"].removeprefix("What is ").removesuffix("?")
        assert msgs[-3]["content"] == f"```python\nprint({expr})\n```"
        assert msgs[-1]["content"] == f"Answer: {msgs[-2]['content']}"
    direct = [d for d in demos if len(d["messages"]) == 2]
    assert direct and all(d["messages"][-1]["content"].startswith("Answer: ") for d in direct)


def test_encoding_matches_the_rollout_layout():
    demos, model, tok, tmpl = _setup()
    d = next(d for d in demos if len(d["messages"]) > 2)
    prompt, resp, mask = encode_demonstration(tmpl, d["messages"], d["tools"])
    first = next(i for i, m in enumerate(d["messages"]) if m["role"] == "assistant")
    assert prompt == tmpl.prompt_ids(d["messages"][:first], d["tools"])
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    model_ids = [t for t, m in zip(resp, mask, strict=True) if m]
    code, answer = d["messages"][first]["content"], d["messages"][-1]["content"]
    assert model_ids == tmpl.encode(code) + [eos] + tmpl.encode(answer) + [eos]
    tool_part = tok.decode([t for t, m in zip(resp, mask, strict=True) if not m])
    assert d["messages"][first + 1]["content"] in tool_part  # tool output: in the sequence, not trained on
    # the continuation after the first turn is exactly what the runner appends
    n1 = len(tmpl.encode(code)) + 1
    cont = tmpl.continuation_ids(resp[:n1], d["messages"][first + 1 : first + 2])
    assert resp[n1 : n1 + len(cont)] == cont


def test_sft_lowers_assistant_token_loss(tmp_path):
    demos, model, tok, tmpl = _setup(48)
    trajs = demonstration_trajectories(tmpl, demos, 128)
    batch = collate(trajs, tok.pad_token_id)

    def nll() -> float:
        with torch.no_grad():
            lp, _ = response_logprobs(model, batch)
        return float(-(lp * batch.loss_mask).sum() / batch.loss_mask.sum())

    before = nll()
    stats = sft_train(model, trajs, epochs=3, lr=3e-3, batch_size=16, pad_id=tok.pad_token_id)
    after = nll()
    assert after < before - 0.5
    assert stats["sft_steps"] == 9


@pytest.mark.slow
def test_sft_cli_writes_a_loadable_model(tmp_path):
    cfg = tiny_config(tmp_path / "work", sft={"enabled": True, "demos": 16, "epochs": 1, "lr": 1e-3, "batch_size": 8,
                                              "max_seq_len": 64})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "warm"
    p = subprocess.run([str(Path(sys.executable).parent / "toolgym"), "sft", str(path), "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["demonstrations"] == 16
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(out)
    assert AutoTokenizer.from_pretrained(out).chat_template


def test_demonstration_file_errors_name_file_and_line(tmp_path):
    from toolgym.errors import ConfigError
    from toolgym.training.sft import read_demonstrations

    good = '{"messages": [{"role": "user", "content": "1+1"}, {"role": "assistant", "content": "2"}]}'
    f = tmp_path / "demos.jsonl"
    f.write_text(good + "\n\n" + good + "\n")
    assert len(read_demonstrations(f)) == 2  # blank lines pass
    f.write_text(good + "\n{not json\n")
    with pytest.raises(ConfigError, match=r"demos.jsonl:2: not valid JSON"):
        read_demonstrations(f)
    f.write_text(good + "\n[1, 2]\n")
    with pytest.raises(ConfigError, match=r"demos.jsonl:2 must be an object with a 'messages' list"):
        read_demonstrations(f)
