"""One MOPD step for the trainer: trajectories -> teacher inputs -> loss (docs/algorithms/mopd.md).

The trainer owns optimisation and scheduling; these helpers own MOPD's data handling:
peer contexts per group, teacher prompts (student response ids reused verbatim), the
student/teacher forward passes and the loss.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from toolgym.agents.trajectory import Trajectory
from toolgym.training.algorithms.distillation.batch import (
    MOPDInputs,
    mopd_step_inputs,
    student_forward,
    teacher_topk_logprobs,
    token_logprobs,
)
from toolgym.training.algorithms.distillation.loss import Agg, distill_divergence, mopd_loss
from toolgym.training.algorithms.distillation.peers import (
    Mode,
    TeacherContext,
    batch_contexts,
    context_stats,
    problem_of,
    render_teacher_prompt_ids,
)
from toolgym.training.policy_gradient.loss_metrics import to_floats
from toolgym.training.update.shared_prompt import SharedPlan


def prompt_messages(traj: Trajectory) -> list[dict[str, Any]]:
    """The prompt messages of a trajectory: its turns before the first assistant message."""
    out = []
    for m in traj.turns:
        if m.get("role") == "assistant":
            break
        out.append(m)
    return out


@dataclass
class MOPDBatch:
    inputs: MOPDInputs
    contexts: list[TeacherContext]
    stats: dict[str, float] = field(default_factory=dict)
    teacher_prompts: list[list[int]] = field(default_factory=list)  # per rollout (micro-batches rebuild from these)


def build_mopd_batch(
    trajectories: Sequence[Trajectory],
    tokenizer: Any,
    *,
    mode: Mode = "contrastive",
    threshold: float = 0.5,
    seed: int = 0,
    step: int = 0,
    feedbacks: Sequence[str | None] | None = None,
    use_feedback: bool = True,
    max_teacher_tokens: int = 10240,
    template_kwargs: dict[str, Any] | None = None,
    messages: Sequence[Sequence[dict[str, Any]]] | None = None,
    context: Literal["peers", "none"] = "peers",
    rewards: Sequence[float] | None = None,
) -> MOPDBatch:
    """Peer contexts per group (``group_id``), teacher prompt ids, padded student/teacher batches.

    Peers are the decoded response ids with special tokens skipped. The student prompt and the
    response ids are the trajectory's own (token-in/token-out); a rollout with an empty context
    keeps the student prompt as its teacher prompt and gets ``seq_mask = 0``. ``context="none"``
    (standard OPD) gives every rollout the student prompt and ``seq_mask = 1``. ``rewards`` (default: the
    trajectories' own) label peers; NaN marks an infrastructure failure, which is never a peer.
    """
    msgs = [list(m) for m in messages] if messages is not None else [prompt_messages(t) for t in trajectories]
    scores = list(rewards) if rewards is not None else [t.reward for t in trajectories]
    texts = [tokenizer.decode(list(t.response_ids), skip_special_tokens=True) for t in trajectories]
    ctxs = batch_contexts(
        [problem_of(m) for m in msgs], texts, scores, [t.group_id for t in trajectories],
        mode=mode, threshold=threshold, feedbacks=feedbacks, use_feedback=use_feedback, seed=seed, step=step,
    )
    if context == "none":
        ctxs = [TeacherContext(c.problem) for c in ctxs]
    teacher_prompts: list[list[int]] = []
    chat = None
    if any(t.metadata.get("tools") for t in trajectories):  # one template (and its tool-support probe) per batch
        from toolgym.agents.chat import ChatTemplate

        chat = ChatTemplate(tokenizer, template_kwargs)
    for k, (t, ctx) in enumerate(zip(trajectories, ctxs, strict=True)):
        if ctx.seq_mask:
            ids, ctxs[k] = render_teacher_prompt_ids(tokenizer, msgs[k], ctx, max_tokens=max_teacher_tokens,
                                                     template_kwargs=template_kwargs, tools=t.metadata.get("tools"),
                                                     chat_template=chat)
            teacher_prompts.append(ids)
        else:
            teacher_prompts.append(list(t.prompt_ids))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    inputs = mopd_step_inputs(
        [list(t.prompt_ids) for t in trajectories], teacher_prompts, [list(t.response_ids) for t in trajectories],
        [list(t.loss_mask) for t in trajectories],
        [1] * len(ctxs) if context == "none" else [c.seq_mask for c in ctxs], pad,
    )
    stats = context_stats(ctxs, scores, [t.group_id for t in trajectories], threshold)
    return MOPDBatch(inputs, ctxs, stats, teacher_prompts)


def mopd_forward_loss(
    student: torch.nn.Module,
    teacher: torch.nn.Module,
    inputs: MOPDInputs,
    *,
    divergence: Literal["jsd", "topk", "sampled_rkl"] = "jsd",
    k: int = 100,
    alpha: float = 0.5,
    tail: bool = True,
    temperature: float = 1.0,
    behaviour_temperature: float = 1.0,
    old_logp: torch.Tensor | None = None,
    rollout_logp: torch.Tensor | None = None,
    ratio_cap: float = 2.0,
    weight_cap: float = 2.0,
    agg: Agg = "seq-mean-token-mean",
    teacher_micro_batch: int | None = None,
    metrics_on_device: bool = False,
    student_plan: SharedPlan | None = None,
    seq_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Student pass (grad) -> teacher pass at the student's top-k ids (no grad) -> divergence -> loss.

    ``temperature`` scales both models' logits for the divergence (1: the models' own distributions).
    ``behaviour_temperature``: the rollouts' sampling temperature. The IS ratio and the rollout weight
    compare the student's log-probs of the sampled tokens under ``softmax(logits / behaviour_temperature)``,
    the policy that sampled them, with ``old_logp`` / ``rollout_logp`` (which must be of that policy too).
    ``old_logp``: the trainer's log-probs before this update (omit for one on-policy step: rho = 1).
    ``rollout_logp``: the inference engine's log-probs, for the optional rollout weight (needs
    ``old_logp`` or uses the current, detached log-probs as the trainer side). ``metrics_on_device``: tensor
    metrics stay 0-dim device tensors (the trainer reads them once per step). ``student_plan``: the student's
    prompts, each forwarded once for its completions (``model.share_prompt``). ``seq_weight``: [B] the
    sequence-level mismatch weight (``loss.mismatch_weight``), multiplying each row's terms.
    """
    inputs = inputs.to(next(student.parameters()).device)
    s_batch, t_batch = inputs.student, inputs.teacher
    t0 = time.perf_counter()
    out = student_forward(student, s_batch, k=k, temperature=temperature, plan=student_plan)
    t1 = time.perf_counter()
    lq, teacher_logp = teacher_topk_logprobs(teacher, t_batch, out.topk_ids, temperature, teacher_micro_batch)
    t2 = time.perf_counter()
    div = distill_divergence(divergence, lp_topk=out.lp_topk.float(), lq_topk=lq, logp=out.logp.float(),
                             teacher_logp=teacher_logp, alpha=alpha, tail=tail)
    behaviour_logp = None  # [B, T] detached: the ratio and the weight carry no gradient
    if old_logp is not None or rollout_logp is not None:
        behaviour_logp = out.logp.detach()
        if behaviour_temperature != temperature:
            with torch.no_grad():
                scaled = out.logits.detach().float() * (temperature / behaviour_temperature)
                behaviour_logp = token_logprobs(scaled, s_batch.response_ids)
                del scaled
    trainer_old = None
    if rollout_logp is not None:
        trainer_old = old_logp if old_logp is not None else behaviour_logp
    loss, metrics = mopd_loss(
        div, inputs.loss_mask, inputs.seq_mask,
        logp=behaviour_logp if old_logp is not None else None, old_logp=old_logp, ratio_cap=ratio_cap,
        trainer_old_logp=trainer_old, rollout_logp=rollout_logp, weight_cap=weight_cap, agg=agg,
        metrics_on_device=True, seq_weight=None if seq_weight is None else seq_weight.to(div.device),
    )
    if student_plan is not None:  # the saving of model.share_prompt (totals over the update)
        metrics["prompt_tokens"] = float(student_plan.prompt_tokens)
        metrics["prompt_tokens_forwarded"] = float(student_plan.prompt_tokens_forwarded if out.shared
                                                   else student_plan.prompt_tokens)
    m = inputs.loss_mask * inputs.seq_mask.unsqueeze(-1)
    # teacher scoring (longer, peer-conditioned prompts, no grad) against the student forward pass
    metrics["mopd/teacher_cost_ratio"] = (t2 - t1) / max(t1 - t0, 1e-9)
    metrics["mopd/teacher_minus_student_logp"] = ((teacher_logp - out.logp.detach()) * m).sum() / m.sum().clamp(min=1)
    return loss, metrics if metrics_on_device else to_floats(metrics)
