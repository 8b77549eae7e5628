"""Supervised warm start: demonstrations as chat messages -> token ids -> loss on assistant tokens only.

Demonstrations are tokenized exactly as the rollout runner builds its contexts (first prompt from the
chat template, then each assistant turn's ids followed by the template's continuation ids), so that
the warm-started policy sees at RL time the very token layout it was trained on.

The Arith demonstrations are a mix on purpose: a fraction use the Python tool correctly (code block
-> tool output -> ``Answer: <output>``), the rest answer directly and are mostly wrong, so that the
warm-started policy uses the tool only part of the time and RL has something real to learn.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from toolgym._jsonl import iter_jsonl
from toolgym.errors import ConfigError


def arith_demonstrations(n: int, seed: int = 0, tool_fraction: float = 0.5, direct_correct: float = 0.2,
                         env_id: str = "toolgym/Arith-v0", env_kwargs: dict[str, Any] | None = None,
                         first_index: int = 1_000_000) -> list[dict[str, Any]]:
    """``n`` demonstrations ``{"messages": [...], "tools": [...]}`` on the env's training stream.

    Prompts come from the env itself (``reset``; no sandbox is opened). Tool outputs are what
    ``print(expr)`` prints, i.e. the exact value. Indices start at ``first_index`` so that they do not
    coincide with the RL prompts (which start at 0).
    """
    from toolgym.envs.builtin.arith import PART_SEPARATOR, question
    from toolgym.envs.registry import make_env

    kw = {k: v for k, v in (env_kwargs or {}).items() if k != "sandbox"}
    env = make_env(env_id, kw, sandbox=None, partition="train")
    rng = random.Random(f"demos:{seed}")
    out = []
    try:
        for i in range(n):
            obs, info = env.reset(seed=first_index + i, options={"index": first_index + i})
            meta = info.get("metadata") or {}
            truth = env.unwrapped.task.ground_truth
            exprs = meta.get("expressions") or ([meta["expression"]] if meta.get("expression") is not None else None)
            if exprs is None or truth is None:
                raise ConfigError(f"sft.demos: env {env_id!r} has no arithmetic expression in its task metadata; "
                                  "give sft.data (a JSONL of demonstrations) instead")
            msgs = [dict(m) for m in obs]
            for part, (expr, part_truth) in enumerate(zip(exprs, truth.split(PART_SEPARATOR.strip()), strict=True)):
                if part:  # a multi-part episode: the env asks the next part after each answer
                    msgs.append({"role": "user", "content": question(expr)})
                value = int(part_truth)
                if rng.random() < tool_fraction:
                    msgs += [{"role": "assistant", "content": f"```python\nprint({expr})\n```"},
                             {"role": "tool", "name": "python", "content": str(value)}]
                elif rng.random() >= direct_correct:  # a plausible wrong guess: right size, wrong digits
                    width = max(1, len(str(abs(value))) - 1)
                    value += rng.choice([-1, 1]) * rng.randint(1, 10**width)
                msgs.append({"role": "assistant", "content": f"Answer: {value}"})
            out.append({"messages": msgs, "tools": info.get("tools") or []})
    finally:
        env.close()
    return out


def read_demonstrations(path: str | Path) -> list[dict[str, Any]]:
    """JSONL, one ``{"messages": [...], "tools": [...]?}`` per line."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"sft.data: file not found: {p}")
    out = []
    for i, rec in iter_jsonl(p, name=f"sft.data: {p}", error=ConfigError):
        if not isinstance(rec, dict) or not isinstance(rec.get("messages"), list):
            raise ConfigError(f"sft.data: {p}:{i} must be an object with a 'messages' list")
        out.append(rec)
    return out


def write_demonstrations(demos: Sequence[dict[str, Any]], path: str | Path) -> None:
    Path(path).write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in demos))


def encode_demonstration(template: Any, messages: list[dict[str, Any]], tools: list[dict] | None = None,
                         eos_id: int | None = None) -> tuple[list[int], list[int], list[int]]:
    """(prompt_ids, response_ids, loss_mask) laid out as the rollout runner lays out a real episode.

    The prompt is every message before the first assistant turn. Each assistant turn contributes its
    content ids plus the end-of-turn id (mask 1, what a sampler would emit); what follows (tool
    messages, the next assistant header) is template tokens (mask 0).
    """
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), None)
    if first is None or first == 0:
        raise ConfigError("a demonstration needs at least one message before its first assistant turn, and one assistant turn")
    prompt = template.prompt_ids(messages[:first], tools or None)
    if eos_id is None:
        close = template.turn_close_ids
        eos_id = close[0] if close else None
    resp: list[int] = []
    mask: list[int] = []
    i = first
    while i < len(messages):
        m = messages[i]
        if m.get("role") != "assistant":
            raise ConfigError(f"demonstration message {i}: expected an assistant turn, got role {m.get('role')!r}")
        ids = template.encode(m.get("content") or "") + ([eos_id] if eos_id is not None else [])
        resp += ids
        mask += [1] * len(ids)
        j = i + 1
        while j < len(messages) and messages[j].get("role") != "assistant":
            j += 1
        if j < len(messages):  # more turns follow: the template's continuation, not trained on
            cont = template.continuation_ids(ids, messages[i + 1 : j])
            resp += cont
            mask += [0] * len(cont)
        i = j
    return prompt, resp, mask


def demonstration_trajectories(template: Any, demos: Sequence[dict[str, Any]], max_seq_len: int) -> list[Any]:
    """Demonstrations as Trajectory records (behaviour log-probs zero), cut to ``max_seq_len`` tokens."""
    from toolgym.agents.trajectory import Trajectory

    out = []
    for k, d in enumerate(demos):
        prompt, resp, mask = encode_demonstration(template, d["messages"], d.get("tools"))
        room = max(0, max_seq_len - len(prompt))
        resp, mask = resp[:room], mask[:room]
        out.append(Trajectory(task_id=f"demo-{k}", group_id="sft", prompt_ids=prompt, response_ids=resp,
                              loss_mask=mask, behavior_logprobs=[0.0] * len(resp)))
    return out


def sft_train(model: Any, trajectories: Sequence[Any], *, epochs: int, lr: float, batch_size: int, pad_id: int,
              seed: int = 0, weight_decay: float = 0.0, grad_clip: float | None = 1.0,
              on_step: Callable[[dict[str, float]], None] | None = None, sync_grads: Callable[[Any], None] | None = None) -> dict[str, float]:
    """Token-mean cross-entropy on mask-1 tokens, AdamW, cosine decay; returns final-epoch stats."""
    import torch

    from toolgym.training.update.batch import collate
    from toolgym.training.update.logprobs import response_logprobs

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    steps_per_epoch = math.ceil(len(trajectories) / batch_size)
    total = max(1, steps_per_epoch * epochs)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s / total, 1.0))))
    rng = random.Random(f"sft:{seed}")
    model.train()
    device = next(model.parameters()).device  # batches are built on the CPU: follow the model
    step = 0
    last: dict[str, float] = {}
    for epoch in range(epochs):
        order = list(range(len(trajectories)))
        rng.shuffle(order)
        tot_loss = tot_tok = tot_ok = 0.0
        for b in range(0, len(order), batch_size):
            batch = collate([trajectories[i] for i in order[b : b + batch_size]], pad_id).to(device)
            logp, _ = response_logprobs(model, batch)
            mask = batch.loss_mask
            n = mask.sum().clamp_min(1)
            loss = -(logp * mask).sum() / n
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if sync_grads is not None:
                sync_grads(model)
            if grad_clip:
                torch.nn.utils.clip_grad_norm_(params, grad_clip)
            opt.step()
            sched.step()
            step += 1
            with torch.no_grad():
                tot_loss += float(loss) * float(n)
                tot_tok += float(n)
                tot_ok += float(((logp > math.log(0.5)).float() * mask).sum())
            if on_step is not None:
                on_step({"sft_step": step, "sft_epoch": epoch, "sft_loss": float(loss.detach())})
        last = {"sft_loss": tot_loss / max(tot_tok, 1), "sft_token_acc": tot_ok / max(tot_tok, 1),
                "sft_epoch": epoch + 1, "sft_steps": step}
    model.eval()
    return last
