"""One policy for sampling and scoring: the trainer scores the sampled tokens under softmax(logits / T), T the
rollout temperature, which is the distribution the sampler drew them from (top-p < 1 is refused by the config).

The rollouts here are the trainer's own (``Orchestrator.rollouts``: its runner, its HF sampler sharing the module), so
the behaviour log-probs are the sampler's processed ones. Tolerance: the sampler decodes with a KV cache, one token
at a time; the trainer runs one full forward. Both are float32 on the same weights; they agree to ~5e-7 per token
(measured), so 1e-4 is a safe bound that still sits two orders of magnitude below the T = 1 vs T = 0.7 gap (>= 0.02
here; measured 0.05-0.08 on this model).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from toolgym.training.algorithms.distillation.step import mopd_forward_loss
from toolgym.training.config import load_config
from toolgym.training.policy_gradient.losses import mismatch_weight
from toolgym.training.trainer import Trainer
from toolgym.training.update.logprobs import response_logprobs

from .trainer_util import tiny_config

TOL = 1e-4  # per-token |trainer log-prob - behaviour log-prob|, float32 KV-cache decode vs full forward
GAP = 0.02  # the least per-token gap T = 1 scoring must show at T = 0.7 for the control to have power


def _trainer_with_rollouts(tmp_path: Path, temperature: float, **over) -> tuple[Trainer, list]:
    data = tiny_config(tmp_path / "run", **{"sft__enabled": False, "rollout__temperature": temperature,
                                             "rollout__sandbox": None, **over})
    if data["algorithm"] != "ctpo":
        data["options"] = {"k": 20, "max_teacher_tokens": 512, "token_mismatch_weight": True}
        data["model"]["model_kwargs"]["max_positions"] = 1024
    tr = Trainer(load_config(data), console=False)
    tr.build(rollouts=True)
    groups = tr.orchestrator.rollouts(0, 0)
    trajs = [t for g in groups for t in g]
    assert all(sum(t.loss_mask) >= 1 and t.error is None for t in trajs)
    return tr, groups


def _t1_logprobs(tr: Trainer, traj) -> torch.Tensor:
    """What the trainer computed before this change: the model's own softmax (temperature 1)."""
    with torch.no_grad():
        lp, _ = response_logprobs(tr.module, tr.collate([traj]))
    return lp[0, : len(traj.response_ids)].cpu()


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_recomputed_logprobs_are_the_behaviour_policy_and_the_first_ratio_is_one(tmp_path, temperature):
    tr, groups = _trainer_with_rollouts(tmp_path, temperature, loss={"mismatch_weight": True})
    obj = tr.algorithm.objective(tr.cfg)
    batch, prep = obj.prepare(tr.ctx, groups)
    for t, old in zip(batch.trajectories, batch.old_logp, strict=True):
        m = torch.tensor(t.loss_mask, dtype=torch.bool)
        behaviour = torch.tensor(t.behavior_logprobs)
        assert float((old - behaviour)[m].abs().max()) < TOL
        # control: temperature-1 scoring (the old trainer) is far from the behaviour policy at T = 0.7
        gap = float((_t1_logprobs(tr, t) - behaviour)[m].abs().max())
        if temperature == 1.0:
            assert gap < TOL
        else:
            assert gap > GAP, f"control has no power: T=1 scoring is only {gap} away"
    assert tr.score_temperature == temperature
    # the rollout-vs-trainer weight compares like with like: exp(sum(old - behaviour)) = 1 per sequence
    assert prep["mismatch_weight_mean"] == pytest.approx(1.0, abs=1e-3)
    assert batch.seq_weight is not None
    torch.testing.assert_close(batch.seq_weight, torch.ones_like(batch.seq_weight), atol=1e-3, rtol=0)
    # the first mini-batch runs on the weights that sampled: every token ratio is 1
    first = [i for i, g in enumerate(batch.group_index) if g == 0]
    _, m = obj.loss(tr.ctx, batch, first, sum(sum(batch.trajectories[i].loss_mask) for i in first), len(first))
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert m["ratio_max"] == pytest.approx(1.0, abs=1e-4) and m["ratio_min"] == pytest.approx(1.0, abs=1e-4)


def test_t1_scoring_would_break_the_mismatch_weight_at_t07(tmp_path):
    """The old behaviour, computed by hand: T = 1 trainer log-probs against the sampler's T = 0.7 ones give
    sequence weights away from 1 (the weight was correcting a difference of temperature, not of engines)."""
    tr, groups = _trainer_with_rollouts(tmp_path, 0.7)
    ws = []
    for t in (t for g in groups for t in g):
        m = torch.tensor(t.loss_mask, dtype=torch.float32).unsqueeze(0)
        ws.append(float(mismatch_weight(_t1_logprobs(tr, t).unsqueeze(0), torch.tensor([t.behavior_logprobs]), m, 5.0)[0]))
    assert max(abs(w - 1.0) for w in ws) > 0.02, ws


def test_mopd_ratio_and_token_mismatch_weight_use_the_sampling_temperature(tmp_path):
    """MOPD off-policy (2 mini-batches) with the rollout weight: on the first mini-batch the IS ratio and the
    trainer-vs-engine weight are 1 at T = 0.7; scoring the student at T = 1 (the old code) moves both."""
    tr, groups = _trainer_with_rollouts(tmp_path, 0.7, algorithm="mopd", mini_batches=2)
    obj = tr.algorithm.objective(tr.cfg)
    assert obj.off_policy and obj.opt.token_mismatch_weight
    batch, _ = obj.prepare(tr.ctx, groups)
    for t, old in zip(batch.trajectories, batch.old_logp, strict=True):
        m = torch.tensor(t.loss_mask, dtype=torch.bool)
        assert float((old - torch.tensor(t.behavior_logprobs))[m].abs().max()) < TOL
    first = [i for i, g in enumerate(batch.group_index) if g == 0]
    assert all(batch.extra["mopd"].inputs.seq_mask[i] > 0 for i in first)  # peers give every row a context
    _, m = obj.loss(tr.ctx, batch, first, 1.0, float(len(first)))
    assert m["mopd/ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert m["mopd/token_mismatch_weight_mean"] == pytest.approx(1.0, abs=1e-4)
    # control: the same inputs scored with behaviour_temperature = 1, as before
    from toolgym.training.algorithms.distillation.batch import mopd_step_inputs

    trajs = [batch.trajectories[i] for i in first]
    inputs = mopd_step_inputs([t.prompt_ids for t in trajs], [batch.extra["mopd"].teacher_prompts[i] for i in first],
                              [t.response_ids for t in trajs], [t.loss_mask for t in trajs], [1] * len(trajs),
                              tr.pad_id)
    T = inputs.loss_mask.shape[1]

    def pad(rows):
        return torch.stack([torch.nn.functional.pad(torch.as_tensor(r, dtype=torch.float32), (0, T - len(r)))
                            for r in rows])

    old = pad([batch.old_logp[i] for i in first])
    behaviour = pad([t.behavior_logprobs for t in trajs])
    kw = dict(k=20, old_logp=old, rollout_logp=behaviour)
    _, same = mopd_forward_loss(tr.module, obj.teacher.model, inputs, behaviour_temperature=0.7, **kw)
    _, wrong = mopd_forward_loss(tr.module, obj.teacher.model, inputs, behaviour_temperature=1.0, **kw)
    assert same["mopd/ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert abs(wrong["mopd/ratio_mean"] - 1.0) > 1e-3, wrong["mopd/ratio_mean"]


def test_bf16_runs_sample_under_the_trainers_autocast(tmp_path):
    # model.dtype bf16: fp32 master weights, forward under bf16 autocast. The hf sampler's decode thread enters the
    # same autocast, so its behaviour log-probs are those the trainer computes, not those of an fp32 forward.
    tr, groups = _trainer_with_rollouts(tmp_path, 1.0, model__dtype="bf16", loss={"mismatch_weight": True})
    assert tr.orchestrator.sampler.autocast == "bf16"
    obj = tr.algorithm.objective(tr.cfg)
    batch, _ = obj.prepare(tr.ctx, groups)
    gap_bf16 = gap_fp32 = 0.0
    for t, old in zip(batch.trajectories, batch.old_logp, strict=True):
        m = torch.tensor(t.loss_mask, dtype=torch.bool)
        behaviour = torch.tensor(t.behavior_logprobs)
        fp32 = _t1_logprobs(tr, t)  # the same tokens scored without autocast: what sampling did before
        gap_bf16 = max(gap_bf16, float((old - behaviour)[m].abs().max()))
        gap_fp32 = max(gap_fp32, float((fp32 - behaviour)[m].abs().max()))
    assert gap_bf16 < gap_fp32 / 4, (gap_bf16, gap_fp32)  # measured 4.8e-7 vs 9.3e-4
