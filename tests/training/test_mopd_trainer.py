"""`algorithm: mopd | sdpo | opd` in the trainer: config presets, the micro-batch loss, the EMA teacher
after each step, checkpointed teacher weights, the optional policy-gradient term, a separate teacher."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from toolgym.agents.trajectory import Trajectory
from toolgym.errors import ConfigError
from toolgym.training.algorithms.distillation.options import MOPDOptions, OPDOptions
from toolgym.training.algorithms.policy_gradient import PolicyGradient
from toolgym.training.config import load_config
from toolgym.training.trainer import Trainer

from .trainer_util import tiny_config

LONG = {"layers": 1, "hidden": 32, "heads": 2, "intermediate": 64, "max_positions": 1024, "vocab_size": 300}


def _cfg(tmp_path: Path, **over):
    base = {"algorithm": "mopd", "sft__enabled": False, "mini_batches": 1,
            "model": {"name_or_path": "demo", "model_kwargs": LONG}, "options": {"k": 20, "max_teacher_tokens": 512}}
    base.update(over)
    data = tiny_config(tmp_path / "run", **base)
    if data["algorithm"] != "ctpo" and "mini_batches" not in over:
        data.pop("mini_batches")  # take the algorithm's default
    return data


def _ready(tmp_path: Path, **over) -> Trainer:
    tr = Trainer(load_config(_cfg(tmp_path, **over)), console=False)
    tr.build()
    return tr


def _groups(tr: Trainer, rewards: list[list[float]]) -> list[list[Trajectory]]:
    g = torch.Generator().manual_seed(0)
    vocab = tr.module.config.vocab_size
    out = []
    for gi, group in enumerate(rewards):
        msgs = [{"role": "user", "content": f"What is {gi} + 1?"}]
        prompt = tr.template.prompt_ids(msgs)
        row = []
        for r in group:
            resp = torch.randint(3, vocab, (6,), generator=g).tolist()
            row.append(Trajectory(task_id=f"t{gi}", group_id=f"g{gi}", prompt_ids=prompt, response_ids=resp,
                                  loss_mask=[1, 1, 0, 0, 1, 1], behavior_logprobs=[0.0] * 6, reward=r,
                                  turns=msgs + [{"role": "assistant", "content": "x"}]))
        out.append(row)
    return out


def _perturb(model: torch.nn.Module) -> None:
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))


def test_presets_and_bad_options_are_config_errors(tmp_path):
    cfg = load_config(_cfg(tmp_path))
    # one on-policy step per rollout batch (docs/algorithms/mopd.md, "Defaults")
    assert cfg.mini_batches == 1 and cfg.update_epochs == 1
    assert isinstance(cfg.options, MOPDOptions) and cfg.options.mode == "contrastive" and cfg.options.k == 20
    assert cfg.options.ema_rate == 0.05 and cfg.options.alpha == 0.5 and cfg.options.divergence == "jsd"
    sdpo = load_config(_cfg(tmp_path, algorithm="sdpo"))
    assert sdpo.options.mode == "sdpo" and sdpo.options.divergence == "jsd"
    opd = load_config(_cfg(tmp_path, algorithm="opd", options={"teacher": "smollm2-135m-instruct"}))
    assert isinstance(opd.options, OPDOptions)
    assert (opd.options.context, opd.options.divergence, opd.options.ema_rate) == ("none", "sampled_rkl", 0.0)
    with pytest.raises(ConfigError, match=r"options\.teacher"):
        load_config(_cfg(tmp_path, algorithm="opd", options={}))
    with pytest.raises(ConfigError, match=r"options\.k"):
        load_config(_cfg(tmp_path, options={"k": 0}))
    with pytest.raises(ConfigError, match=r"unknown options key 'kk'; did you mean 'k'\?"):
        load_config(_cfg(tmp_path, options={"kk": 3}))


def test_gradient_is_nonzero_exactly_for_rollouts_with_context(tmp_path):
    tr = _ready(tmp_path)
    obj = tr.algorithm.objective(tr.cfg)
    # a mixed group, and a group of one: its rollout has no peer, hence no context
    # (docs/algorithms/mopd.md, "Peer selection")
    batch, prep = obj.prepare(tr.ctx, _groups(tr, [[1.0, 0.0, 1.0], [0.0]]))
    seq_mask = batch.extra["mopd"].inputs.seq_mask.tolist()
    assert seq_mask == [1.0, 1.0, 1.0, 0.0]
    assert prep["mopd/trained_frac"] == pytest.approx(0.75)
    params = [p for p in tr.module.parameters() if p.requires_grad]
    for i, has_context in enumerate(seq_mask):
        tr.optimizer.zero_grad(set_to_none=False)
        loss, m = obj.loss(tr.ctx, batch, [i], 4.0, 1.0)
        assert math.isfinite(float(loss.detach()))
        loss.backward()
        norm = float(torch.sqrt(sum((p.grad.float() ** 2).sum() for p in params)))
        if has_context:
            assert norm > 0, f"rollout {i} has a context but no gradient"
        else:
            assert float(loss.detach()) == 0.0 and norm == 0.0, f"rollout {i} has no context but a gradient ({norm})"


def test_micro_batches_add_up_to_the_mini_batch_loss(tmp_path):
    tr = _ready(tmp_path)
    obj = tr.algorithm.objective(tr.cfg)
    batch, _ = obj.prepare(tr.ctx, _groups(tr, [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]))
    _perturb(obj.teacher.model)  # a teacher far from the student: a loss well above float32 noise
    whole, _ = obj.loss(tr.ctx, batch, list(range(6)), 24.0, 6.0)
    parts = [obj.loss(tr.ctx, batch, rows, 24.0, 6.0)[0] for rows in ([0, 1], [2, 3, 4], [5])]
    assert float(sum(parts).detach()) == pytest.approx(float(whole.detach()), rel=1e-5)


def test_update_then_ema_teacher_follows_the_student(tmp_path):
    tr = _ready(tmp_path)
    obj = tr.algorithm.objective(tr.cfg)
    batch, _ = obj.prepare(tr.ctx, _groups(tr, [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]))
    teacher_before = {k: v.clone() for k, v in obj.teacher.model.state_dict().items()}
    student_before = {k: v.clone() for k, v in tr.module.state_dict().items()}
    out = tr.update(batch, obj)
    assert out["optimizer_steps"] == 1 and math.isfinite(out["loss"]) and out["loss"] > 0
    student = tr.module.state_dict()
    moved = [k for k in student if not torch.equal(student[k], student_before[k])]
    assert moved, "a distillation step with context must move the student"
    # the teacher has not moved yet; after_update applies phi <- 0.95 phi + 0.05 theta
    assert all(torch.equal(v, teacher_before[k]) for k, v in obj.teacher.model.state_dict().items())
    m = obj.after_update(tr.ctx)
    assert m["mopd/ema_updates"] == 1
    for k in moved:
        want = 0.95 * teacher_before[k] + 0.05 * student[k]
        torch.testing.assert_close(obj.teacher.model.state_dict()[k], want, rtol=1e-5, atol=1e-7)


def test_rl_coef_adds_the_policy_gradient_loss(tmp_path):
    tr = _ready(tmp_path, options={"k": 20, "max_teacher_tokens": 512, "rl_coef": 0.5})
    obj = tr.algorithm.objective(tr.cfg)
    batch, prep = obj.prepare(tr.ctx, _groups(tr, [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]))
    assert "adv_zero_groups" in prep  # the policy-gradient preparation ran
    # on-policy, equal-length rows give a policy loss of exactly 0 (advantages sum to 0 per group);
    # older behaviour log-probs for one rollout make the ratio differ from 1 there
    batch.old_logp[0] = batch.old_logp[0] - 0.1
    loss, m = obj.loss(tr.ctx, batch, list(range(6)), 24.0, 6.0)
    rl, _ = PolicyGradient(tr.cfg).loss(tr.ctx, batch, list(range(6)), 24.0, 6.0)
    rl, loss = float(rl.detach()), float(loss.detach())
    assert rl != 0.0
    assert loss == pytest.approx(float(m["mopd/loss_part"]) + 0.5 * rl, rel=1e-5)


def test_real_run_checkpoints_the_teacher(tmp_path):
    cfg = load_config(_cfg(tmp_path, steps=2, sft__enabled=True))
    tr = Trainer(cfg, console=False)
    summary = tr.fit()
    assert summary["steps"] == 2
    from toolgym.training.outputs.logging import read_metrics

    rows = read_metrics(tmp_path / "run", "train")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(math.isfinite(r["loss"]) and "mopd/trained_frac" in r for r in rows)
    assert rows[-1]["mopd/ema_updates"] == 2
    blob = torch.load(tmp_path / "run" / "checkpoints" / "step-000002" / "trainer_state.pt", weights_only=True)
    saved = blob["state"]["extra"]["objective"]
    assert saved["steps"] == 2 and saved["updates"] == 2
    for k, v in tr.objective.teacher.model.state_dict().items():
        torch.testing.assert_close(saved["teacher"][k], v.cpu())
    # a fresh objective restores the teacher from the checkpoint instead of copying the student
    fresh = tr.algorithm.objective(cfg)
    fresh.load_state_dict(saved)
    fresh._ensure_teacher(tr.ctx)
    for k, v in fresh.teacher.model.state_dict().items():
        torch.testing.assert_close(v, saved["teacher"][k])


def test_separate_teacher_with_another_vocabulary_is_refused(tmp_path):
    tr = _ready(tmp_path, algorithm="opd", options={"teacher": "smollm2-135m-instruct", "k": 20})
    obj = tr.algorithm.objective(tr.cfg)
    with pytest.raises(ConfigError, match="different tokenizer"):
        obj.prepare(tr.ctx, _groups(tr, [[1.0, 0.0]]))


def test_separate_frozen_teacher_scores_the_plain_prompt_and_stays_frozen(tmp_path):
    teacher_dir = tmp_path / "teacher"
    first = _ready(tmp_path / "a")
    _perturb(first.module)
    first.module.save_pretrained(teacher_dir)
    first.tokenizer.save_pretrained(teacher_dir)
    tr = _ready(tmp_path / "b", algorithm="opd", options={"teacher": str(teacher_dir), "k": 20})
    obj = tr.algorithm.objective(tr.cfg)
    groups = _groups(tr, [[1.0, 0.0], [0.0]])
    batch, prep = obj.prepare(tr.ctx, groups)
    assert batch.extra["mopd"].inputs.seq_mask.tolist() == [1.0, 1.0, 1.0]  # OPD: every rollout trains
    assert batch.extra["mopd"].teacher_prompts == [t.prompt_ids for g in groups for t in g]
    frozen = {k: v.clone() for k, v in obj.teacher.model.state_dict().items()}
    out = tr.update(batch, obj)
    assert math.isfinite(out["loss"]) and out["loss"] != 0  # a sampled-token estimate: either sign
    assert obj.after_update(tr.ctx)["mopd/ema_updates"] == 0
    assert all(torch.equal(v, frozen[k]) for k, v in obj.teacher.model.state_dict().items())


def test_behaviour_gap_comes_only_from_computed_trainer_logprobs(tmp_path):
    from toolgym.training.trainer import behaviour_gap

    tr = Trainer(load_config(_cfg(tmp_path, rollout__sandbox=None)), console=False)
    tr.build(rollouts=True)  # on-policy MOPD with the hf sampler: the trainer's log-probs are never computed
    assert not tr.orchestrator.samples_elsewhere and not tr.ctx.separate_sampler  # the sampler runs tr.module
    groups = _groups(tr, [[1.0, 0.0], [0.0, 1.0]])
    batch, _ = tr.objective.prepare(tr.ctx, groups)
    assert not batch.old_logp_computed
    assert behaviour_gap(batch) == {}  # zero placeholders are not log-probs: no gap of |behaviour log-prob|
    # a separate engine samples from pushed weights: the gap is measured against the trainer's real log-probs
    tr.ctx.separate_sampler = True
    batch, _ = tr.objective.prepare(tr.ctx, groups)
    assert batch.old_logp_computed
    own = tr.old_logprobs(batch.trajectories)
    assert all(float(lp.abs().max()) > 0.5 for lp in own)
    for t, lp in zip(batch.trajectories, own, strict=True):
        t.behavior_logprobs = lp.tolist()
    assert behaviour_gap(batch)["behaviour_gap_max"] < 1e-5
    for t in batch.trajectories:  # a push that did not happen: the engine's log-probs are another policy's
        t.behavior_logprobs = [0.0] * len(t.response_ids)
    assert behaviour_gap(batch)["behaviour_gap_mean"] > 0.5
