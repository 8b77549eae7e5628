"""Per-token log-probs of the sampled response tokens under a causal LM, in float32.

Two paths (``model.logprob_head``):

* ``chunked`` (default): the model runs to its last hidden states (through whatever wraps it, DDP or peft,
  so a DDP reducer sees the forward; ``logits_to_keep=1`` keeps the model's own head to one position), and
  the LM head runs only at the response positions, chunk by chunk, recomputed in backward
  (:mod:`toolgym.training.update.lm_head`): nothing of size [B, T, V] is kept for backward.
* ``full``: the model's logits at every position and each row's float32 log-softmax kept for backward
  (about 1.08 x B x T x V x 4 bytes). The chunked path falls back to it, with one warning naming the
  reason, where it cannot serve a model: FSDP (the head's weight is sharded outside the forward), a head
  that is not a ``torch.nn.Linear`` (e.g. LoRA adapters on ``lm_head``), or logits the head does not
  reproduce (an unknown transform of its output; checked once per model, in the first forward).
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any, Literal

import torch

from toolgym.training.update.batch import TokenBatch
from toolgym.training.update.lm_head import Head, compute_dtype, head_logits, logits_match, token_logprobs

HeadPath = Literal["chunked", "full"]

_CHECKED: weakref.WeakKeyDictionary[torch.nn.Module, str] = weakref.WeakKeyDictionary()  # head -> "" or a reason
_WARNED: set[str] = set()


def response_logprobs(
    model: torch.nn.Module,
    batch: TokenBatch,
    temperature: float = 1.0,
    with_entropy: bool = False,
    head: HeadPath = "chunked",
    share_prompt: bool = False,
    stats: dict[str, float] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Return ([B, T] log-probs of each response token, optional [B, T] entropies), of ``softmax(logits / T)``.

    Position j of the response is predicted by the logits at prompt_len + j - 1; padding gets 0.
    ``share_prompt``: rows with the same prompt run it once (:mod:`toolgym.training.update.shared_prompt`; the caller
    rules out what it cannot serve: DDP, FSDP, gradient checkpointing). ``stats`` gets ``prompt_tokens`` (what
    the per-row path forwards) and ``prompt_tokens_forwarded`` added. On the chunked head, the backward
    recomputes the head at the loss mask's tokens only (the host lists of collation name them): a gradient sent
    to a log-prob at loss mask 0 (tool output) is dropped there, as every loss here masks those tokens out."""
    if head == "chunked" and share_prompt:
        route = chunked_route(model)
        out = _shared(model, route, batch, temperature, with_entropy, stats) if not isinstance(route, str) else None
        if out is not None:
            return out
    if stats is not None:  # the per-row path: every row forwards its prompt
        per_row = float(sum(batch.host_lens()[0]))
        stats["prompt_tokens"] = stats.get("prompt_tokens", 0.0) + per_row
        stats["prompt_tokens_forwarded"] = stats.get("prompt_tokens_forwarded", 0.0) + per_row
    if head == "chunked":
        route = chunked_route(model)
        if isinstance(route, str):
            _fall_back(route)
        else:
            out = _chunked(model, route, batch, temperature, with_entropy)
            if out is not None:
                return out
    elif head != "full":
        raise ValueError(f"head must be 'chunked' or 'full'; got {head!r}")
    return full_logprobs(model, batch, temperature, with_entropy)


def chunked_route(model: Any) -> tuple[torch.nn.Module, torch.nn.Module, Head] | str:
    """``(decoder, head module, Head)`` for the chunked path, or why the model cannot take it."""
    from toolgym.training.model.lora import base_model
    from toolgym.training.update.data_parallel import is_fsdp

    inner = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
    if is_fsdp(inner):
        return "FSDP shards the LM head's weight outside the model's forward"
    inner = base_model(inner)
    if not (callable(getattr(inner, "get_decoder", None)) and callable(getattr(inner, "get_output_embeddings", None))):
        return f"{type(inner).__name__} has no get_decoder() and get_output_embeddings()"
    decoder, lm = inner.get_decoder(), inner.get_output_embeddings()
    if not isinstance(decoder, torch.nn.Module) or decoder is inner:
        return f"{type(inner).__name__}.get_decoder() gives no separate decoder module"
    if not isinstance(lm, torch.nn.Linear) or not lm.weight.is_floating_point():
        return f"its LM head is a {type(lm).__name__}, not a floating-point torch.nn.Linear (adapters on lm_head?)"
    if _CHECKED.get(lm):
        return _CHECKED[lm]
    cfg = getattr(inner, "config", None)
    text = cfg.get_text_config() if callable(getattr(cfg, "get_text_config", None)) else cfg
    softcap = getattr(text, "final_logit_softcapping", None)
    scale = 1.0
    if isinstance(getattr(inner, "logit_scale", None), (int, float)):  # Cohere: logits * logit_scale
        scale *= float(inner.logit_scale)
    if isinstance(getattr(text, "logits_scaling", None), (int, float)):  # Granite: logits / logits_scaling
        scale /= float(text.logits_scaling)
    return decoder, lm, Head(lm.weight, lm.bias, scale, float(softcap) if softcap else None)


def _shared(model: torch.nn.Module, route: tuple[torch.nn.Module, torch.nn.Module, Head], batch: TokenBatch,
            temperature: float, with_entropy: bool,
            stats: dict[str, float] | None) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """The shared-prompt path; None where no prompt repeats or this model cannot take it (one warning). The
    first micro-batch of a model is checked against the per-row path (one extra no-grad forward per run)."""
    from toolgym.training.update import shared_prompt as S

    decoder, _lm, head = route
    if S.checked(decoder):
        return None
    sp = S.plan(batch)
    if len(sp.prompts) == len(sp.owner):  # no prompt repeats: nothing to share
        return None
    out = S.shared_logprobs(decoder, head, batch, sp, temperature, with_entropy)
    if isinstance(out, str):
        S.record_check(decoder, out)
        _fall_back(f"share_prompt: {out}", "log-probs: one forward per row, prompt included")
        return None
    if S.checked(decoder) is None:  # both paths in the weights' precision (autocast off): see S.full_precision
        dev = batch.input_ids.device
        lowered = S.autocast_on(dev)  # else out is already in full precision
        with torch.no_grad(), S.full_precision(dev):
            ours = S.shared_logprobs(decoder, head, batch, sp, temperature, False) if lowered else \
                (out[0].detach(), None)
            ref, _ = response_logprobs(model, batch, temperature, head="chunked")
        low = head.weight.dtype not in (torch.float32, torch.float64)
        ok = not isinstance(ours, str) and S.close_enough(ours[0], ref, batch.loss_mask, low)
        S.record_check(decoder, "" if ok else "its log-probs on the shared cache differ from the per-row path's")
        if not ok:
            _fall_back(f"share_prompt: {S.checked(decoder)}", "log-probs: one forward per row, prompt included")
            return None
    if stats is not None:
        stats["prompt_tokens"] = stats.get("prompt_tokens", 0.0) + sp.prompt_tokens
        stats["prompt_tokens_forwarded"] = stats.get("prompt_tokens_forwarded", 0.0) + sp.prompt_tokens_forwarded
    return out


def _fall_back(reason: str, what: str = "log-probs: full logits for this model") -> None:
    if reason not in _WARNED:
        _WARNED.add(reason)
        warnings.warn(f"{what} ({reason})", stacklevel=3)


def _chunked(model: torch.nn.Module, route: tuple[torch.nn.Module, torch.nn.Module, Head], batch: TokenBatch,
             temperature: float, with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """The chunked path; None (after one warning) where this model's forward shows it cannot serve it."""
    decoder, lm, head = route
    shape = tuple(batch.input_ids.shape)
    captured: list[torch.Tensor] = []

    def grab(_module: Any, _args: Any, out: Any) -> None:
        h = out[0] if isinstance(out, tuple) else getattr(out, "last_hidden_state", None)
        if isinstance(h, torch.Tensor) and tuple(h.shape[:2]) == shape:
            captured.append(h)

    handle = decoder.register_forward_hook(grab)
    try:
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False,
                    logits_to_keep=1)
    except TypeError as exc:
        if "logits_to_keep" not in str(exc):
            raise
        _CHECKED[lm] = "its forward takes no logits_to_keep"
    finally:
        handle.remove()
    if not _CHECKED.get(lm):
        if len(captured) != 1:
            _CHECKED[lm] = "its decoder's output is not the [B, L, H] input of the LM head"
        elif out.logits.shape[1] != 1:
            _CHECKED[lm] = "it ignores logits_to_keep"
        elif lm not in _CHECKED:  # once per model: does the head reproduce the model's logits?
            with torch.no_grad():
                dtype = compute_dtype(captured[0], head.weight)
                ours, _ = head_logits(captured[0][:, -1], head.weight, head.bias, head.scale, head.softcap, dtype)
                ok = logits_match(ours, out.logits[:, -1].float(), dtype)
            _CHECKED[lm] = "" if ok else "its logits are not its LM head's output (an unknown transform)"
    if _CHECKED.get(lm):
        _fall_back(_CHECKED[lm])
        return None
    hidden = captured.pop()
    del out  # the model's one-position logits
    return _scatter_logprobs(hidden, head, batch, temperature, with_entropy)


def _scatter_logprobs(hidden: torch.Tensor, head: Head, batch: TokenBatch, temperature: float,
                      with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The head at the response positions of ``hidden`` ([B, L, H]) only, into [B, T] (0 at padding)."""
    b, t = batch.loss_mask.shape
    prompt, resp = batch.host_lens()  # kept from collation: no host read
    for i, (p, n) in enumerate(zip(prompt, resp, strict=True)):
        if n and p < 1:
            raise ValueError(f"row {i}: a trajectory needs at least one prompt token")
    rows = torch.repeat_interleave(torch.arange(b), torch.tensor(resp, dtype=torch.long))
    cols = torch.cat([torch.arange(n) for n in resp]) if b else torch.zeros(0, dtype=torch.long)
    src = torch.tensor(prompt, dtype=torch.long)[rows] - 1 + cols  # position p + j - 1 predicts token p + j
    dev = hidden.device
    rows, cols, src = rows.to(dev), cols.to(dev), src.to(dev)
    targets = batch.input_ids[rows, src + 1]
    lp, ent = token_logprobs(hidden[rows, src], head, targets, temperature, with_entropy, live=batch.host_live())
    zeros = torch.zeros((b, t), dtype=torch.float32, device=dev)
    logp = zeros.index_put((rows, cols), lp)
    return logp, (zeros.index_put((rows, cols), ent) if ent is not None else None)


def full_logprobs(
    model: torch.nn.Module,
    batch: TokenBatch,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The plain path: the model's logits at every position, a row-wise float32 log-softmax (peak one [L, V]
    slice at a time in the forward; every row's log-softmax is kept for backward)."""
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
    logits = out.logits
    b, t = batch.loss_mask.shape
    ent = None
    rows_lp = []
    rows_ent = []
    prompt, resp = batch.host_lens()
    for i in range(b):
        p, n = prompt[i], resp[i]
        if n == 0:
            rows_lp.append(torch.zeros(t, dtype=torch.float32, device=logits.device))
            rows_ent.append(torch.zeros(t, dtype=torch.float32, device=logits.device))
            continue
        if p < 1:
            raise ValueError(f"row {i}: a trajectory needs at least one prompt token")
        row = logits[i, p - 1 : p - 1 + n].float()
        if temperature != 1.0:
            row = row / temperature
        lsm = torch.log_softmax(row, dim=-1)
        targets = batch.input_ids[i, p : p + n]
        lp = lsm.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        rows_lp.append(torch.nn.functional.pad(lp, (0, t - n)))
        if with_entropy:
            e = -(lsm.exp() * lsm).sum(-1)
            rows_ent.append(torch.nn.functional.pad(e, (0, t - n)))
    logp = torch.stack(rows_lp)
    if with_entropy:
        ent = torch.stack(rows_ent)
    return logp, ent
