"""CTPO / GRPO / GSPO / full IS: group-relative advantages and ``policy_loss`` with the config's ratio,
clip and aggregation (docs/algorithms/ctpo.md, docs/algorithms/baselines.md)."""

from __future__ import annotations

import torch

from toolgym.agents.trajectory import Trajectory
from toolgym.training.algorithms.base import Objective, RolloutBatch, StepContext, scored_rewards
from toolgym.training.config_schema import TrainConfig
from toolgym.training.policy_gradient.advantages import group_advantages
from toolgym.training.policy_gradient.losses import (
    ClipConfig,
    finite_rows,
    mismatch_weight,
    per_token_loss,
    policy_loss,
)
from toolgym.training.update.logprobs import response_logprobs


def normalisers(agg: str, token_count: float, seq_count: float) -> dict[str, float]:
    """The global normaliser of the aggregation (so micro-batches of one mini-batch add up exactly)."""
    if agg == "token-mean":
        return {"global_token_count": max(token_count, 1.0)}
    return {"global_seq_count": max(seq_count, 1.0)}


def group_batch(ctx: StepContext, groups: list[list[Trajectory]], estimator: str, eps: float,
                need_old: bool = True, own_old: frozenset[int] = frozenset()) -> tuple[RolloutBatch, dict[str, float]]:
    """The step's flat batch: group-relative advantages over scored rewards (infrastructure failures left
    out), the trainer's old log-probs (zeros when ``need_old`` is False: an on-policy objective that never
    reads them; zeros too for the rows of ``own_old``, whose old log-probs the update's own forward gives),
    and the rows that train (finite reward and, when computed, finite old log-probs)."""
    trajs = [t for g in groups for t in g]
    gidx = [i for i, g in enumerate(groups) for _ in g]
    scored, infra = scored_rewards(trajs)
    adv, stats = group_advantages(torch.tensor(scored, dtype=torch.float64), gidx, estimator, eps)
    old = [torch.zeros(len(t.response_ids)) for t in trajs]
    # a row with no prompt (an episode that failed before its first turn, an infrastructure failure) has
    # nothing to score or train: it stays out of the old-log-prob pass and of the batch
    no_prompt = {i for i, t in enumerate(trajs) if not t.prompt_ids}
    run = [i for i in range(len(trajs)) if i not in own_old and i not in no_prompt] if need_old else []
    if run:
        for i, lp in zip(run, ctx.old_logprobs([trajs[i] for i in run]), strict=True):
            old[i] = lp
    keep = stats.valid.clone()
    for i in no_prompt:
        keep[i] = False
    for i in run:
        if len(trajs[i].loss_mask):
            m = torch.tensor(trajs[i].loss_mask, dtype=torch.float32).unsqueeze(0)
            keep[i] &= bool(finite_rows(m, old[i].unsqueeze(0))[0])
    metrics = {"adv_zero_groups": stats.n_zero_groups, "reward_nonfinite": stats.n_nonfinite - infra,
               "infra_failures": infra, "rows_skipped_prepare": int((~keep).sum())}
    return RolloutBatch(trajs, gidx, adv.float(), old, None, keep, old_logp_computed=bool(run),
                        own_old_rows=frozenset(own_old) if need_old else frozenset()), metrics


def on_policy_rows(ctx: StepContext, groups: list[list[Trajectory]]) -> frozenset[int]:
    """Rows of the first mini-batch when it is exactly on-policy: sampled by the trainer's current weights
    (the ``hf`` sampler on this module, ``rollout.max_staleness: 0``), one epoch, no mismatch weight, no
    dropout in the update. Their old log-probs are the detached log-probs of the update's own forward (what
    the no-grad pass would give), so that pass runs only for the later mini-batches, whose ratio needs the
    pre-update weights. Stale rollouts (``max_staleness >= 1``) never take it: their weight and the logged
    behaviour gap need every row's log-probs at the step's starting weights before the first update."""
    cfg = ctx.cfg
    if (cfg.update_epochs != 1 or cfg.mismatch_weight_on or cfg.rollout.max_staleness >= 1 or ctx.separate_sampler
            or cfg.model.update_dropout):
        return frozenset()
    per_mini = len(groups) // cfg.mini_batches
    rows, i = [], 0
    for g, members in enumerate(groups):
        for _ in members:
            if g < per_mini:
                rows.append(i)
            i += 1
    return frozenset(rows)


def add_sequence_weights(batch: RolloutBatch, cap: float) -> dict[str, float]:
    """Set ``batch.seq_weight`` to each row's truncated mismatch weight ``min(exp(sum_t m_t (old_t - sampler_t)),
    cap)`` (:func:`~toolgym.training.policy_gradient.losses.mismatch_weight`; old: the trainer's log-probs at the step's starting
    weights, sampler: the trajectory's behaviour log-probs) and leave rows with a non-finite weight out; returns
    the step's metrics. The one place the sampler's own log-probs enter a loss (docs/algorithms/ctpo.md,
    "Training on stale rollouts")."""
    ws = []
    for t, lp in zip(batch.trajectories, batch.old_logp, strict=True):
        m = torch.tensor(t.loss_mask, dtype=torch.float32)
        r = torch.tensor(t.behavior_logprobs, dtype=torch.float32)
        ws.append(mismatch_weight(lp.unsqueeze(0), r.unsqueeze(0), m.unsqueeze(0), cap)[0]
                  if len(t.loss_mask) else torch.tensor(1.0))
    batch.seq_weight = torch.stack(ws).float()
    batch.keep &= torch.isfinite(batch.seq_weight)
    return {"rows_skipped_prepare": int((~batch.keep).sum()),
            "mismatch_weight_mean": float(torch.nan_to_num(batch.seq_weight).mean()),
            "mismatch_weight_capped_frac": float((batch.seq_weight >= cap).float().mean())}


def warn_uncorrected_staleness(cfg: TrainConfig) -> None:
    """One warning when stale rollouts train without the mismatch weight (an explicit false: allowed)."""
    line = cfg.uncorrected_staleness()
    if line is not None:
        import warnings

        warnings.warn(line, stacklevel=3)


class PolicyGradient(Objective):
    """The clipped importance-sampled policy gradient, one registered name per ratio/clip preset."""

    def __init__(self, cfg: TrainConfig, reuse_update_logp: bool = True) -> None:
        self.cfg = cfg
        self.clip = ClipConfig.from_loss(cfg.loss)
        self.reuse_update_logp = reuse_update_logp  # False: every row's old log-probs from the no-grad pass
        warn_uncorrected_staleness(cfg)

    def prepare(self, ctx: StepContext, groups: list[list[Trajectory]]) -> tuple[RolloutBatch, dict[str, float]]:
        own = on_policy_rows(ctx, groups) if self.reuse_update_logp else frozenset()
        batch, metrics = group_batch(ctx, groups, self.cfg.advantage.estimator, self.cfg.advantage.eps, own_old=own)
        if self.cfg.mismatch_weight_on:
            metrics.update(add_sequence_weights(batch, self.cfg.loss.mismatch_cap))
        return batch, metrics

    def loss(self, ctx: StepContext, batch: RolloutBatch, rows: list[int], token_count: float,
             seq_count: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        tb = ctx.collate([batch.trajectories[i] for i in rows])
        shared: dict[str, float] = {}
        logp, _ = response_logprobs(ctx.model, tb, temperature=ctx.temperature, head=ctx.cfg.model.logprob_head,
                                    share_prompt=ctx.share_prompt, stats=shared)
        dev = logp.device  # the batch's per-step tensors live on the CPU: each micro-batch's slice moves once
        T = tb.loss_mask.shape[1]
        old = torch.stack([torch.nn.functional.pad(batch.old_logp[i], (0, T - len(batch.old_logp[i]))) for i in rows])
        old = old.to(dev, non_blocking=True)
        if batch.own_old_rows:  # exactly on-policy rows: the old log-probs are this forward's, detached
            own = torch.tensor([i in batch.own_old_rows for i in rows], device=dev).unsqueeze(1)
            old = torch.where(own, logp.detach(), old)
        mask = tb.loss_mask * batch.keep[rows].to(dev, torch.float32).unsqueeze(1)
        adv = batch.advantages[rows].to(dev)
        w = batch.seq_weight[rows].to(dev) if batch.seq_weight is not None else None
        ok = finite_rows(mask, logp, old, adv, w)  # on the device: no host read between forward and backward
        skipped = (~ok & (mask.sum(1) > 0)).sum()
        mask = mask * ok.float().unsqueeze(1)
        logp = torch.where(mask > 0, logp, torch.zeros_like(logp))
        old = torch.where(mask > 0, old, torch.zeros_like(old))
        loss, m = policy_loss(logp, old, adv, mask, ratio=self.cfg.loss.ratio, clip=self.clip, agg=self.cfg.loss.agg,
                              seq_weight=w, metrics_on_device=True, check_finite=False,
                              **normalisers(self.cfg.loss.agg, token_count, seq_count))
        m["rows_skipped_nonfinite"] = skipped
        m.update(shared)  # prompt tokens per row and forwarded (totals over the update)
        record = batch.extra.get("update_record")
        if record is not None:  # logging.save_rollouts: the tokens this pass clipped, by the loss's own rule
            terms = per_token_loss(logp.detach(), old, adv, mask, ratio=self.cfg.loss.ratio, clip=self.clip)
            record.record(rows, adv, mask, terms.clip_high, terms.clip_low, terms.clip_dual)
        return loss, m
