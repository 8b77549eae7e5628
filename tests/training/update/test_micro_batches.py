"""Micro-batches by a padded-token budget (``max_tokens_per_micro_batch``): the plan (every row once, within
the budget, length-bucketed, a longer row alone) and, in the trainer, the same mini-batch loss and gradient
as one micro-batch, for CTPO and MOPD; the no-grad old log-probs pass takes the same cut."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.training.trainer_util import tiny_config
from toolgym.agents.trajectory import Trajectory
from toolgym.errors import ConfigError
from toolgym.training.config import load_config
from toolgym.training.trainer import Trainer
from toolgym.training.update.micro_batches import plan_micro_batches, split_to

# ---------------------------------------------------------------- the plan


def test_plan_keeps_every_row_once_within_the_budget_and_buckets_by_length() -> None:
    rows = list(range(10, 20))
    lengths = [5, 40, 7, 33, 6, 90, 8, 35, 5, 41]
    plan = plan_micro_batches(rows, lengths, max_tokens=80)
    assert sorted(r for c in plan for r in c) == rows
    length = dict(zip(rows, lengths, strict=True))
    for c in plan:
        padded = len(c) * max(length[r] for r in c)
        assert padded <= 80 or len(c) == 1  # the 90-token row runs alone
    assert [15] in plan
    # longest first, packed greedily: 41 + 40 would pad to 82 > 80; the short rows never pad to a long one
    assert plan == [[15], [19], [11, 17], [13, 16], [12, 14, 10, 18]]


def test_plan_without_a_budget_is_the_grad_accum_slicing_and_the_row_cap_holds() -> None:
    rows, lengths = list(range(7)), [3, 9, 1, 4, 4, 8, 2]
    assert plan_micro_batches(rows, lengths, max_rows=3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert plan_micro_batches(rows, lengths) == [rows]
    assert all(len(c) <= 2 for c in plan_micro_batches(rows, lengths, max_tokens=1000, max_rows=2))


def test_split_to_equalises_the_count_for_data_parallel_ranks() -> None:
    plan = [[1, 2, 3, 4], [5]]
    out = split_to(plan, 4)
    assert len(out) == 4 and sorted(r for c in out for r in c) == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError):
        split_to([[1], [2]], 3)


def test_config_checks_the_budget(tmp_path) -> None:
    assert load_config(tiny_config(tmp_path)).max_tokens_per_micro_batch is None
    with pytest.raises(ConfigError, match="max_tokens_per_micro_batch: must be null or an integer >= 1"):
        load_config(tiny_config(tmp_path, max_tokens_per_micro_batch=0))


# ---------------------------------------------------------------- in the trainer

MODEL = {"name_or_path": "demo", "model_kwargs": {"layers": 1, "hidden": 32, "heads": 2, "intermediate": 64,
                                                  "max_positions": 1024, "vocab_size": 300}}
LENGTHS = [[3, 17, 8], [25, 5, 11]]  # response lengths: two groups of three


def _trainer(tmp_path: Path, algorithm: str, budget: int | None) -> Trainer:
    over = {"sft__enabled": False, "model": MODEL, "algorithm": algorithm, "mini_batches": 1,
            "rollout": {**tiny_config(tmp_path)["rollout"], "group_size": 3}, "max_tokens_per_micro_batch": budget}
    if algorithm == "mopd":
        over["options"] = {"k": 20, "max_teacher_tokens": 512, "ema_rate": 0.0}
    tr = Trainer(load_config(tiny_config(tmp_path / f"{algorithm}-{budget}", **over)), console=False)
    tr.build()
    return tr


def _groups(tr: Trainer) -> list[list[Trajectory]]:
    g = torch.Generator().manual_seed(0)
    vocab = tr.module.config.vocab_size
    out = []
    for gi, lengths in enumerate(LENGTHS):
        msgs = [{"role": "user", "content": f"What is {gi} + 1?"}]
        prompt = tr.template.prompt_ids(msgs)
        row = []
        for k, n in enumerate(lengths):
            resp = torch.randint(3, vocab, (n,), generator=g).tolist()
            row.append(Trajectory(task_id=f"t{gi}", group_id=f"g{gi}", prompt_ids=prompt, response_ids=resp,
                                  loss_mask=[int(j % 4 != 2) for j in range(n)], behavior_logprobs=[-1.0] * n,
                                  reward=float((gi + k) % 2), turns=msgs + [{"role": "assistant", "content": "x"}]))
        out.append(row)
    return out


def _update(tr: Trainer) -> tuple[dict, dict[str, torch.Tensor], list[list[int]], list[torch.Tensor]]:
    """One update: its metrics, the gradient the optimizer step saw, the rows of each loss call, old log-probs."""
    obj = tr.objective = tr.algorithm.objective(tr.cfg)
    if tr.cfg.algorithm == "mopd":  # a teacher far from the student: a loss well above float32 noise
        obj._ensure_teacher(tr.ctx)
        with torch.no_grad():
            for p in obj.teacher.model.parameters():
                p.add_(0.2 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    batch, _ = obj.prepare(tr.ctx, _groups(tr))
    calls: list[list[int]] = []
    loss_fn = obj.loss
    obj.loss = lambda ctx, b, rows, tok, seqs: (calls.append(list(rows)), loss_fn(ctx, b, rows, tok, seqs))[1]
    grads: dict[str, torch.Tensor] = {}
    tr.optimizer.register_step_pre_hook(lambda *_: grads.update(
        {n: p.grad.clone() for n, p in tr.module.named_parameters() if p.grad is not None}))
    out = tr.update(batch, obj)
    return out, grads, calls, batch.old_logp


@pytest.mark.parametrize("algorithm", ["ctpo", "mopd"])
def test_micro_batches_by_budget_give_the_one_micro_batch_loss_and_gradient(tmp_path, algorithm) -> None:
    whole = _trainer(tmp_path, algorithm, None)
    cut = _trainer(tmp_path, algorithm, 64)
    ref, ref_grads, ref_calls, ref_old = _update(whole)
    out, grads, calls, old = _update(cut)
    assert len(ref_calls) == 1 and len(calls) >= 3
    trajs = [t for g in _groups(cut) for t in g]
    for rows in calls:  # within the budget, or a longer row alone
        padded = len(rows) * max(len(trajs[i].prompt_ids) + len(trajs[i].response_ids) for i in rows)
        assert padded <= 64 or len(rows) == 1
    assert sorted(r for c in calls for r in c) == list(range(6))
    assert out["loss"] == pytest.approx(ref["loss"], rel=1e-5, abs=1e-7) and abs(ref["loss"]) > 1e-4
    assert set(grads) == set(ref_grads) and grads
    for name, g in ref_grads.items():
        torch.testing.assert_close(grads[name], g, rtol=1e-4, atol=1e-6, msg=name)
    for a, b in zip(old, ref_old, strict=True):  # the no-grad pass, cut the same way, gives the same log-probs
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.device_standin
def test_a_budgeted_update_on_the_device_equals_the_cpu_one(tmp_path, device, monkeypatch) -> None:
    from tests.training.test_device_trainer import _groups as groups_of
    from tests.training.test_device_trainer import _trainer as trainer_on

    def run(where: str) -> tuple[dict, dict[str, torch.Tensor]]:
        tr = trainer_on(tmp_path / where, where, monkeypatch, max_tokens_per_micro_batch=1)  # every row alone
        obj = tr.objective = tr.algorithm.objective(tr.cfg)
        batch, _ = obj.prepare(tr.ctx, groups_of(tr, [[1.0, 0.0], [0.0, 1.0]]))
        loss_fn = obj.loss
        obj.loss = lambda ctx, b, rows, *a: (calls.append(len(rows)), loss_fn(ctx, b, rows, *a))[1]
        grads: list[dict[str, torch.Tensor]] = []
        tr.optimizer.register_step_pre_hook(lambda *_: grads.append(
            {n: p.grad.detach().cpu().clone() for n, p in tr.module.named_parameters() if p.grad is not None}))
        return tr.update(batch, obj), grads

    calls: list[int] = []
    m_dev, g_dev = run(device)
    assert calls == [1, 1, 1, 1]  # 2 mini-batches of 2 rows, one row per micro-batch
    monkeypatch.undo()
    m_cpu, g_cpu = run("cpu")
    assert m_dev["loss"] == pytest.approx(m_cpu["loss"], rel=1e-4, abs=1e-6)
    assert len(g_dev) == len(g_cpu) == 2  # two mini-batches
    for a, b in zip(g_dev, g_cpu, strict=True):
        assert set(a) == set(b) and a
        for k in b:
            torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-6, msg=k)
