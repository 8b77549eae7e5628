"""Tensor side of one MOPD step: padded student/teacher batches and their forward passes.

Token-in/token-out: the student's sampled response ids are reused verbatim for the teacher;
only the prompt part differs. Prompts are left-padded, responses right-padded, and position
ids are recomputed from the attention mask so padding never shifts positions (docs/algorithms/mopd.md,
"Teacher prompt").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from toolgym.training.algorithms.distillation.divergences import gather_logprobs
from toolgym.training.update.shared_prompt import SharedPlan


@dataclass
class PromptResponseBatch:
    """``[left-padded prompt ; right-padded response]`` with its masks."""

    input_ids: torch.Tensor  # [B, P + T]
    attention_mask: torch.Tensor  # [B, P + T]
    position_ids: torch.Tensor  # [B, P + T]
    response_ids: torch.Tensor  # [B, T] (pad where response_mask == 0)
    response_mask: torch.Tensor  # [B, T] 1 where a response token exists
    prompt_len: int  # P, the padded prompt width

    @property
    def response_len(self) -> int:
        return int(self.response_ids.shape[1])

    def to(self, device: torch.device | str) -> PromptResponseBatch:
        return PromptResponseBatch(self.input_ids.to(device), self.attention_mask.to(device),
                                   self.position_ids.to(device), self.response_ids.to(device),
                                   self.response_mask.to(device), self.prompt_len)


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids counting only attended tokens (0 at the first real token)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def build_batch(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int
) -> PromptResponseBatch:
    """Left-pad prompts and right-pad responses into one batch."""
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    b = len(prompts)
    p = max((len(x) for x in prompts), default=0)
    t = max((len(y) for y in responses), default=0)
    ids = torch.full((b, p + t), pad_id, dtype=torch.long)
    att = torch.zeros((b, p + t), dtype=torch.long)
    for i, (x, y) in enumerate(zip(prompts, responses, strict=True)):
        ids[i, p - len(x) : p] = torch.tensor(list(x), dtype=torch.long)
        att[i, p - len(x) : p] = 1
        ids[i, p : p + len(y)] = torch.tensor(list(y), dtype=torch.long)
        att[i, p : p + len(y)] = 1
    return PromptResponseBatch(
        input_ids=ids,
        attention_mask=att,
        position_ids=positions_from_mask(att),
        response_ids=ids[:, p:].clone(),
        response_mask=att[:, p:].clone(),
        prompt_len=p,
    )


def response_logits(model: torch.nn.Module, batch: PromptResponseBatch, temperature: float = 1.0) -> torch.Tensor:
    """Logits predicting each response token: positions P-1 .. P+T-2 ([B, T, V]).

    For an unpadded sequence this is the slice -(R+1) .. -2 of the concatenation (the final position dropped).
    """
    p, t = batch.prompt_len, batch.response_len
    kwargs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask,
              "position_ids": batch.position_ids, "use_cache": False}
    try:
        # only the last T + 1 positions are needed: skip the LM head over long (teacher) prompts
        logits = model(**kwargs, logits_to_keep=t + 1).logits
    except TypeError:  # a model without logits_to_keep
        logits = model(**kwargs).logits
    logits = logits[:, :t] if logits.shape[1] == t + 1 else logits[:, p - 1 : p - 1 + t]
    return logits / temperature if temperature != 1.0 else logits


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Log-prob of each given token under ``logits`` ([B, T, V], [B, T] -> [B, T])."""
    return gather_logprobs(logits, token_ids.unsqueeze(-1)).squeeze(-1)


@dataclass
class MOPDInputs:
    """Student and teacher batches over the same response ids, plus the padded loss mask."""

    student: PromptResponseBatch
    teacher: PromptResponseBatch
    loss_mask: torch.Tensor  # [B, T] float, 1 = model-sampled token
    seq_mask: torch.Tensor  # [B] float, 0 = empty teacher context

    @property
    def response_ids(self) -> torch.Tensor:
        return self.student.response_ids

    def to(self, device: torch.device | str) -> MOPDInputs:
        return MOPDInputs(self.student.to(device), self.teacher.to(device), self.loss_mask.to(device),
                          self.seq_mask.to(device))


def mopd_step_inputs(
    student_prompts: Sequence[Sequence[int]],
    teacher_prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    loss_masks: Sequence[Sequence[int]],
    seq_mask: Sequence[int],
    pad_id: int,
) -> MOPDInputs:
    """Pair each student prompt with its teacher prompt over the same sampled response ids."""
    student = build_batch(student_prompts, responses, pad_id)
    teacher = build_batch(teacher_prompts, responses, pad_id)
    lm = torch.zeros(student.response_ids.shape, dtype=torch.float32)
    for i, m in enumerate(loss_masks):
        if len(m) != len(responses[i]):
            raise ValueError(f"row {i}: loss_mask has {len(m)} entries for {len(responses[i])} response tokens")
        lm[i, : len(m)] = torch.tensor(list(m), dtype=torch.float32)
    return MOPDInputs(student, teacher, lm, torch.tensor(list(seq_mask), dtype=torch.float32))


def shared_response_logits(model: torch.nn.Module, batch: PromptResponseBatch, plan: SharedPlan,
                           temperature: float = 1.0) -> torch.Tensor | None:
    """:func:`response_logits` with each distinct prompt forwarded once (:mod:`toolgym.training.update.shared_prompt`),
    in the compute dtype (bf16 under autocast, as the per-row logits); None where the model cannot take that
    path (checked once per model against the per-row logits, both in the weights' precision)."""
    from toolgym.training.update import shared_prompt as S
    from toolgym.training.update.logprobs import chunked_route

    route = chunked_route(model)
    if isinstance(route, str) or len(plan.prompts) == len(plan.owner):
        return None
    decoder, _lm, head = route
    if S.checked(decoder):
        return None
    logits = _logits_on_cache(decoder, head, batch, plan, temperature)
    if isinstance(logits, str):
        S.record_check(decoder, logits)
        return None
    if S.checked(decoder) is None:  # once per model: the same log-probs as the per-row forward
        dev = batch.input_ids.device
        lowered = S.autocast_on(dev)  # else logits are already in full precision
        with torch.no_grad(), S.full_precision(dev):
            ours = _logits_on_cache(decoder, head, batch, plan, temperature) if lowered else logits.detach()
            ref = response_logits(model, batch, temperature)
        ok = not isinstance(ours, str) and S.close_enough(
            token_logprobs(ours.float(), batch.response_ids), token_logprobs(ref.float(), batch.response_ids),
            batch.response_mask, head.weight.dtype not in (torch.float32, torch.float64))
        S.record_check(decoder, "" if ok else "its log-probs on the shared cache differ from the per-row path's")
        if not ok:
            return None
    return logits


def _logits_on_cache(decoder: torch.nn.Module, head: Any, batch: PromptResponseBatch, plan: SharedPlan,
                     temperature: float) -> torch.Tensor | str:
    """[B, T, V] response logits in the compute dtype, each prompt forwarded once; or why the cache cannot serve."""
    from toolgym.training.update import shared_prompt as S
    from toolgym.training.update.lm_head import compute_dtype, head_logits

    st = S.response_states(decoder, plan, batch.input_ids.device)
    if isinstance(st, str):
        return st
    dtype = compute_dtype(st.hidden, head.weight)
    z, _ = head_logits(st.hidden, head.weight, head.bias, head.scale, head.softcap, dtype, as_float=False)
    if temperature != 1.0:
        z = z / temperature
    b, t = batch.response_ids.shape
    return torch.zeros((b, t, z.shape[-1]), dtype=z.dtype, device=z.device).index_put((st.rows, st.cols), z)


@dataclass
class StudentOutputs:
    logits: torch.Tensor  # [B, T, V] response-aligned, with gradient
    lp_topk: torch.Tensor  # [B, T, K] with gradient
    topk_ids: torch.Tensor  # [B, T, K] no gradient
    logp: torch.Tensor  # [B, T] log-prob of the sampled tokens, with gradient
    shared: bool = False  # each distinct prompt was forwarded once (model.share_prompt)


def student_forward(
    model: torch.nn.Module, batch: PromptResponseBatch, k: int = 100, temperature: float = 1.0,
    plan: SharedPlan | None = None,
) -> StudentOutputs:
    """Student pass with gradient: top-k ids of its own logits and its log-probs there.

    One full-vocabulary log-softmax serves both gathers (top-k and sampled tokens): with a 49k
    vocabulary every [B, T, V] copy kept for backward costs as much as the logits themselves.
    ``plan``: the rows' prompts, each run once for its completions (``model.share_prompt``); the per-row
    forward where the model cannot take it.
    """
    logits = shared_response_logits(model, batch, plan, temperature) if plan is not None else None
    shared = logits is not None
    if logits is None:
        logits = response_logits(model, batch, temperature)
    lp_full = torch.log_softmax(logits if logits.dtype in (torch.float32, torch.float64) else logits.float(), dim=-1)
    ids = logits.detach().topk(min(k, logits.shape[-1]), dim=-1).indices
    logp = lp_full.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
    return StudentOutputs(logits, lp_full.gather(-1, ids), ids, logp, shared)


@torch.no_grad()
def teacher_topk_logprobs(
    model: torch.nn.Module,
    batch: PromptResponseBatch,
    topk_ids: torch.Tensor,
    temperature: float = 1.0,
    micro_batch: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher pass without gradient, gathered at the student's top-k ids.

    Returns ``(lq_topk [B, T, K], teacher log-prob of the sampled tokens [B, T])``. Only the
    [B, T, K] slice is kept; the full-vocabulary logits of each micro-batch are dropped at once.
    """
    b = batch.input_ids.shape[0]
    step = micro_batch or b
    lq_parts, lt_parts = [], []
    for s in range(0, b, step):
        sub = PromptResponseBatch(
            batch.input_ids[s : s + step],
            batch.attention_mask[s : s + step],
            batch.position_ids[s : s + step],
            batch.response_ids[s : s + step],
            batch.response_mask[s : s + step],
            batch.prompt_len,
        )
        logits = response_logits(model, sub, temperature).float()
        lq_parts.append(gather_logprobs(logits, topk_ids[s : s + step]))
        lt_parts.append(token_logprobs(logits, sub.response_ids))
        del logits
    return torch.cat(lq_parts), torch.cat(lt_parts)
