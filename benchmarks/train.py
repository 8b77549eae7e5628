"""Trainer tokens/s on SmolLM2-135M against a minimal hand-written transformers training step (target >= 0.9).

Both sides train on the same batch (B trajectories, prompt P + response R tokens, one tool span masked
out, rewards 0/1 in groups): the toolgym side is ``Trainer.update`` (the CTPO objective: trainer
log-probs, ``policy_loss`` with its metrics, AdamW, grad clipping, scheduler) with one mini-batch; the
baseline is a plain loop written against transformers: forward, gather the sampled tokens' log-probs,
a clipped token-ratio PG loss, backward, clip, AdamW step. The two alternate, repeat after repeat, and the
script prints the median seconds of each, policy tokens per second, and the median per-repeat ratio
(the order of the two alternates from one repeat to the next).

    .venv/bin/python benchmarks/train.py [--batch 8] [--prompt 64] [--response 192] [--repeats 5] [--threads N]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from toolgym.agents.trajectory import Trajectory
from toolgym.training.config import load_config
from toolgym.training.trainer import Trainer


def make_trajectories(vocab: int, b: int, p: int, r: int, seed: int = 0) -> list[list[Trajectory]]:
    g = torch.Generator().manual_seed(seed)
    groups = []
    for gi in range(b // 4):
        row = []
        for k in range(4):
            mask = [1] * r
            for j in range(r // 2, min(r, r // 2 + 16)):  # a tool-output span
                mask[j] = 0
            row.append(Trajectory(task_id=f"t{gi}", group_id=f"g{gi}", prompt_ids=torch.randint(0, vocab, (p,), generator=g).tolist(),
                                  response_ids=torch.randint(0, vocab, (r,), generator=g).tolist(), loss_mask=mask,
                                  behavior_logprobs=[0.0] * r, reward=float(k % 2)))
        groups.append(row)
    return groups


def baseline_step(model: torch.nn.Module, opt: torch.optim.Optimizer, ids: torch.Tensor, attn: torch.Tensor,
                  p: int, mask: torch.Tensor, adv: torch.Tensor, old: torch.Tensor) -> float:
    out = model(input_ids=ids, attention_mask=attn, use_cache=False)
    logits = out.logits[:, p - 1 : -1].float()
    lp = torch.log_softmax(logits, -1).gather(-1, ids[:, p:].unsqueeze(-1)).squeeze(-1)
    ratio = torch.exp(lp - old)
    a = adv.unsqueeze(1)
    pg = -torch.minimum(ratio * a, ratio.clamp(0.8, 1.2) * a)
    loss = (pg * mask).sum() / mask.sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return float(loss.detach())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--response", type=int, default=192)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    tmp = tempfile.mkdtemp()
    cfg = load_config({"algorithm": "ctpo", "output_dir": tmp, "mini_batches": 1, "steps": 1,
                       "model": {"name_or_path": a.model},
                       "rollout": {"prompts_per_step": a.batch // 4, "group_size": 4, "sandbox": None},
                       "optimizer": {"lr": 1e-6}, "logging": {"progress": False, "jsonl": False}})
    tr = Trainer(cfg, console=False)
    tr.build()
    obj = tr.algorithm.objective(cfg)
    groups = make_trajectories(tr.module.config.vocab_size, a.batch, a.prompt, a.response)
    batch, _ = obj.prepare(tr.ctx, groups)
    tokens = sum(sum(t.loss_mask) for g in groups for t in g)

    base = copy.deepcopy(tr.module).train()
    bopt = torch.optim.AdamW(base.parameters(), lr=1e-6, weight_decay=0.01)
    trajs = [t for g in groups for t in g]
    ids = torch.tensor([t.prompt_ids + t.response_ids for t in trajs])
    attn = torch.ones_like(ids)
    mask = torch.tensor([t.loss_mask for t in trajs], dtype=torch.float32)
    old = torch.stack(batch.old_logp)
    adv = batch.advantages

    tg, bl, ratios = [], [], []
    def run_toolgym() -> float:
        t = time.perf_counter()
        tr.update(batch, obj)
        return time.perf_counter() - t

    def run_baseline() -> float:
        t = time.perf_counter()
        baseline_step(base, bopt, ids, attn, a.prompt, mask, adv, old)
        return time.perf_counter() - t

    for i in range(a.repeats + 1):
        if i % 2 == 0:  # alternate which side goes first (caches, allocator state, thermal drift)
            t_tg, t_bl = run_toolgym(), run_baseline()
        else:
            t_bl, t_tg = run_baseline(), run_toolgym()
        if i == 0:
            continue  # warm-up
        tg.append(t_tg)
        bl.append(t_bl)
        ratios.append(t_bl / t_tg)  # toolgym throughput / baseline throughput
    res = {"model": a.model, "batch": a.batch, "prompt": a.prompt, "response": a.response, "policy_tokens": tokens,
           "toolgym_s": statistics.median(tg), "baseline_s": statistics.median(bl),
           "toolgym_tok_s": tokens / statistics.median(tg), "baseline_tok_s": tokens / statistics.median(bl),
           "throughput_ratio": statistics.median(ratios), "ratios": ratios, "threads": torch.get_num_threads(), "repeats": a.repeats}
    if a.json:
        print(json.dumps(res))
    else:
        print(f"policy tokens per step: {tokens} ({a.batch} x ({a.prompt} prompt + {a.response} response))")
        print(f"toolgym Trainer.update : {res['toolgym_s']:.3f} s  {res['toolgym_tok_s']:.0f} tok/s")
        print(f"hand-written step      : {res['baseline_s']:.3f} s  {res['baseline_tok_s']:.0f} tok/s")
        print(f"throughput ratio (toolgym / hand-written), median of {a.repeats} paired repeats: "
              f"{res['throughput_ratio']:.3f}  (target >= 0.9); per repeat: "
              + " ".join(f"{r:.3f}" for r in ratios))
    Path(tmp, "bench.json").write_text(json.dumps(res))


if __name__ == "__main__":
    main()
