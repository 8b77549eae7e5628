"""MOPD / SDPO / OPD as a trainer objective (``algorithm: mopd | sdpo | opd``).

``prepare`` builds the peer contexts and teacher prompts of the whole rollout batch once (the
student's sampled ids are reused verbatim); ``loss`` runs the student (with grad) and
the teacher (without) on one micro-batch and rescales the aggregation to the mini-batch's
global counts, so micro-batches and data-parallel ranks add up to one mini-batch loss:

* ``seq-mean-token-mean``: ``sum_i L_i / N_seq``, where ``N_seq`` counts every trainable sequence
  of the mini-batch, those without a context included (they add 0);
* ``token-mean``: the masked divergence sum over the mini-batch's policy-token count.

``after_update`` moves the EMA teacher once per step (skipped when every optimizer step of the step
had a non-finite gradient norm). The teacher's weights travel in checkpoints, so a resumed
run continues like an uninterrupted one. ``options.rl_coef > 0`` adds the ``loss:`` section's
policy-gradient loss (toolgym's extension; the authors use none).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from toolgym.agents.trajectory import Trajectory
from toolgym.errors import ConfigError
from toolgym.training.algorithms.base import Objective, RolloutBatch, StepContext, scored_rewards
from toolgym.training.algorithms.distillation.batch import mopd_step_inputs
from toolgym.training.algorithms.distillation.ema import EMATeacher
from toolgym.training.algorithms.distillation.options import MOPDOptions
from toolgym.training.algorithms.distillation.step import MOPDBatch, build_mopd_batch, mopd_forward_loss
from toolgym.training.algorithms.policy_gradient import (
    PolicyGradient,
    add_sequence_weights,
    group_batch,
    warn_uncorrected_staleness,
)
from toolgym.training.config_schema import TrainConfig
from toolgym.training.update.shared_prompt import plan_of


class DistillationObjective(Objective):
    """The trainer's hook for on-policy distillation (see the module docstring)."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.opt: MOPDOptions = cfg.options if cfg.options is not None else MOPDOptions()
        self.opt._check_run(cfg, "options")  # a config built without the loader: the same rules
        self.pg = PolicyGradient(cfg, reuse_update_logp=False) if self.opt.rl_coef > 0 else None
        if self.pg is None:  # (the policy-gradient term warns itself)
            warn_uncorrected_staleness(cfg)
        self.teacher: EMATeacher | None = None
        self.steps = 0  # prepared steps: seeds the peer choice (restored on resume)
        self._pending: dict[str, Any] | None = None

    @property
    def off_policy(self) -> bool:
        return self.cfg.mini_batches > 1 or self.cfg.update_epochs > 1

    # -- teacher ----------------------------------------------------------------------------------------

    def _ensure_teacher(self, ctx: StepContext) -> EMATeacher:
        if self.teacher is None:
            from toolgym.training.model.lora import AdaptersOff, is_lora

            if self.opt.teacher is None and self.opt.ema_rate == 0 and is_lora(ctx.module) and not self.cfg.sft.enabled:
                # the frozen initial policy of a LoRA run is its base: adapters off, no copy, same after a resume
                self.teacher = EMATeacher.frozen_view(AdaptersOff(ctx.module))
            elif self.opt.teacher is None:
                self.teacher = EMATeacher(ctx.module, self.opt.ema_rate)
            else:
                self.teacher = EMATeacher(self._separate_teacher(ctx), 0.0)
            if self._pending is not None and "teacher" in self._pending:
                self.teacher.model.load_state_dict(self._pending["teacher"])
                self.teacher.updates = int(self._pending.get("updates", 0))
            self._pending = None
        return self.teacher

    def _separate_teacher(self, ctx: StepContext) -> torch.nn.Module:
        """A frozen teacher model; it scores the student's token ids, so the vocabularies must match."""
        from toolgym.training.model.load import load_policy

        tcfg = dataclasses.replace(self.cfg, model=dataclasses.replace(self.cfg.model, name_or_path=self.opt.teacher,
                                                                      tokenizer=None, model_kwargs={}))
        model, tok = load_policy(tcfg, ctx.out_dir)
        if len(tok) != len(ctx.tokenizer) or tok.convert_ids_to_tokens(list(range(min(len(tok), 1000)))) != \
                ctx.tokenizer.convert_ids_to_tokens(list(range(min(len(tok), 1000)))):
            raise ConfigError(f"options.teacher: {self.opt.teacher!r} has a different tokenizer from the student; "
                              "the teacher scores the student's sampled token ids, so both must share one vocabulary")
        dtype = next(ctx.module.parameters()).dtype
        return model.to(device=ctx.device, dtype=dtype)

    # -- the Objective protocol ---------------------------------------------------------------------

    def prepare(self, ctx: StepContext, groups: list[list[Trajectory]]) -> tuple[RolloutBatch, dict[str, float]]:
        self._ensure_teacher(ctx)
        o = self.opt
        metrics: dict[str, float] = {}
        if self.pg is not None:
            batch, metrics = self.pg.prepare(ctx, groups)
        else:  # the advantages are unused by the distillation loss (docs/algorithms/mopd.md)
            # Rollouts from other weights (an engine, a server, Ray workers): the trainer's log-probs are then
            # computed anyway, one no-grad pass, so the behaviour gap can show a push that did not happen.
            # Stale rollouts (rollout.max_staleness >= 1) need them for the sequence-level mismatch weight and the
            # logged gap.
            stale = self.cfg.mismatch_weight_on or self.cfg.rollout.max_staleness >= 1
            batch, metrics = group_batch(ctx, groups, "grpo", 1e-6, need_old=self.off_policy or o.token_mismatch_weight
                                         or ctx.separate_sampler or stale)
            if self.cfg.mismatch_weight_on:  # the distillation term takes the same weight as the RL term would
                metrics.update(add_sequence_weights(batch, self.cfg.loss.mismatch_cap))
        trajs = batch.trajectories
        feedbacks = [t.metadata.get("feedback") for t in trajs] if o.use_feedback else None
        mb = build_mopd_batch(trajs, ctx.tokenizer, rewards=scored_rewards(trajs)[0], mode=o.mode, threshold=o.threshold, seed=self.cfg.seed,
                              step=self.steps, feedbacks=feedbacks, use_feedback=o.use_feedback,
                              max_teacher_tokens=o.max_teacher_tokens, context=o.context)
        batch.extra["mopd"] = mb
        self.steps += 1
        metrics.update(mb.stats)
        return batch, metrics

    def loss(self, ctx: StepContext, batch: RolloutBatch, rows: list[int], token_count: float,
             seq_count: float) -> tuple[torch.Tensor, dict[str, Any]]:
        o = self.opt
        mb: MOPDBatch = batch.extra["mopd"]
        seq_mask = mb.inputs.seq_mask
        trained = [i for i in rows if batch.keep[i] and seq_mask[i] > 0]
        # Rows without a context add exactly 0; they are not run. With none to train, one row runs at
        # weight 0 so every parameter still takes part in the backward pass (data-parallel ranks agree).
        run = trained or rows[:1]
        trajs = [batch.trajectories[i] for i in run]
        pad = ctx.pad_id
        inputs = mopd_step_inputs([t.prompt_ids for t in trajs], [mb.teacher_prompts[i] for i in run],
                                  [t.response_ids for t in trajs], [t.loss_mask for t in trajs],
                                  [1 if trained else 0] * len(run), pad)
        T = inputs.loss_mask.shape[1]
        old = _pad([batch.old_logp[i] for i in run], T) if self.off_policy else None
        behaviour = _pad([torch.tensor(t.behavior_logprobs, dtype=torch.float32) for t in trajs], T) \
            if o.token_mismatch_weight else None
        device = ctx.device
        plan = plan_of([t.prompt_ids for t in trajs], [t.response_ids for t in trajs]) if ctx.share_prompt else None
        loss, m = mopd_forward_loss(
            ctx.model, self._ensure_teacher(ctx).model, inputs, divergence=o.divergence, k=o.k,
            alpha=o.alpha, tail=o.tail, behaviour_temperature=ctx.temperature,
            old_logp=None if old is None else old.to(device),
            rollout_logp=None if behaviour is None else behaviour.to(device),
            ratio_cap=o.ratio_cap, weight_cap=o.weight_cap, agg=o.agg,
            teacher_micro_batch=o.teacher_micro_batch or None, metrics_on_device=True, student_plan=plan,
            seq_weight=_finite(batch.seq_weight[run]) if batch.seq_weight is not None else None,
        )
        if o.agg == "seq-mean-token-mean":
            loss = loss * (len(run) / max(seq_count, 1.0))
        else:
            loss = loss * (m["mopd/tokens"] / max(token_count, 1.0))
        m = {k: v for k, v in m.items() if k not in ("mopd/trained_frac", "mopd/loss")}
        m["mopd/loss_part"] = loss.detach()
        m["tokens"] = m.pop("mopd/tokens").clamp_min(1.0)
        if self.pg is not None:
            rl, pm = self.pg.loss(ctx, batch, rows, token_count, seq_count)
            loss = loss + o.rl_coef * rl
            m["rows_skipped_nonfinite"] = pm.get("rows_skipped_nonfinite", 0)
            m.update({f"rl/{k}": v for k, v in pm.items() if k not in ("rows_skipped_nonfinite", "tokens", "seqs",
                                                                      "prompt_tokens", "prompt_tokens_forwarded")})

        return loss, m

    def after_update(self, ctx: StepContext) -> dict[str, float]:
        teacher = self._ensure_teacher(ctx)
        if self.opt.teacher is None and self.opt.ema_rate > 0:
            teacher.update(ctx.module, ctx.grad_norms)
        return {"mopd/ema_updates": float(teacher.updates), "mopd/ema_skipped": float(teacher.skipped)}

    # -- checkpoints --------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"steps": self.steps}
        if self.teacher is not None and self.opt.teacher is None and self.opt.ema_rate > 0:
            out["teacher"] = {k: v.detach().cpu().clone() for k, v in self.teacher.model.state_dict().items()}
            out["updates"] = self.teacher.updates
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = int(state.get("steps", 0))
        self._pending = state
        self.teacher = None


def _pad(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    return torch.stack([torch.nn.functional.pad(r.float(), (0, width - len(r))) for r in rows])


def _finite(w: torch.Tensor) -> torch.Tensor:
    """Trained rows have finite weights (``keep``); the weight-0 stand-in row of an empty micro-batch may not."""
    return torch.where(torch.isfinite(w), w, torch.zeros_like(w))
