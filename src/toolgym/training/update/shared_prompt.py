"""One prompt forward per group: the G completions of a prompt reuse its keys and values (``model.share_prompt``).

Why: a group's G episodes share their prompt (system turn, tool schemas, task). The per-row path forwards and
back-propagates that prompt G times; with 550 prompt tokens against 128 completion tokens most of the update is
the same prompt again. Here each distinct prompt of a micro-batch runs once through the decoder with its KV cache,
the cache is gathered to one row per completion, and the completions run on top of it (positions ``p + j``, an
attention mask over prompt and completion). The first completion token is predicted by the prompt's last hidden
state, the others by the completion's; the LM head runs at those positions only (:mod:`toolgym.training.update.lm_head`).
The cache tensors stay in the autograd graph, so the gradient of all G completions flows back through the one
prompt forward: the same loss and gradient as the per-row path, up to float rounding.

Prompts are right-padded: a shorter prompt's padding sits between its last token and its completion, masked out,
so no query row ever attends to nothing (left padding would make fully masked rows and NaN in some kernels).

Where it cannot serve (the trainer decides, one log line): data parallelism over several processes (DDP's reducer
expects one forward per backward), FSDP, gradient checkpointing (it turns the cache off), a model without a
separate decoder and linear head, or a cache that is not plain per-layer keys and values (sliding windows,
linear attention). A model is also checked once against the per-row path on its first micro-batch.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from toolgym.training.update.batch import TokenBatch
from toolgym.training.update.lm_head import Head, token_logprobs

_CHECKED: weakref.WeakKeyDictionary[torch.nn.Module, str] = weakref.WeakKeyDictionary()  # decoder -> "" or why not


@dataclass
class SharedPlan:
    """Which prompt each row uses: ``prompts`` are the distinct ones, ``owner[i]`` row i's index into them."""

    prompts: list[list[int]]
    owner: list[int]
    responses: list[list[int]]

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens the per-row path forwards."""
        return sum(len(self.prompts[u]) for u in self.owner)

    @property
    def prompt_tokens_forwarded(self) -> int:
        """Prompt tokens forwarded here (each distinct prompt once)."""
        return sum(len(p) for p in self.prompts)


def plan(batch: TokenBatch) -> SharedPlan:
    """Rows of ``batch`` grouped by identical prompt ids (from the host lists collation kept)."""
    return plan_of(*batch.host_rows())


def plan_of(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]) -> SharedPlan:
    """Rows grouped by identical prompt ids."""
    index: dict[tuple[int, ...], int] = {}
    distinct: list[list[int]] = []
    owner: list[int] = []
    for p in prompts:
        key = tuple(p)
        if key not in index:
            index[key] = len(distinct)
            distinct.append(list(key))
        owner.append(index[key])
    return SharedPlan(distinct, owner, [list(r) for r in responses])


def unsupported_cache(cache: Any) -> str:
    """Why ``cache`` cannot be gathered and extended row-wise with gradient ('' when it can)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    if not isinstance(cache, DynamicCache):
        return f"its forward returns a {type(cache).__name__}, not a DynamicCache"
    kinds = {type(layer).__name__ for layer in cache.layers if type(layer) is not DynamicLayer}
    if kinds:
        return f"its cache has {', '.join(sorted(kinds))} layers (only plain keys and values are shared)"
    return ""


@dataclass
class ResponseStates:
    """The head's inputs at every response token: ``hidden[k]`` predicts token ``targets[k]``, which is token
    ``cols[k]`` of row ``rows[k]``."""

    hidden: torch.Tensor  # [N, H]
    rows: torch.Tensor  # [N]
    cols: torch.Tensor  # [N]
    targets: torch.Tensor  # [N]


def response_states(decoder: torch.nn.Module, sp: SharedPlan, device: torch.device | str) -> ResponseStates | str:
    """Run each distinct prompt once with its cache, the completions on the gathered cache, and return the
    hidden states that predict the response tokens; or why this decoder's cache cannot serve."""
    if any(not p for p in sp.prompts):
        raise ValueError("a trajectory needs at least one prompt token")
    b = len(sp.owner)
    width = max(len(p) for p in sp.prompts)
    pids = torch.zeros((len(sp.prompts), width), dtype=torch.long)
    pmask = torch.zeros((len(sp.prompts), width), dtype=torch.long)
    for u, p in enumerate(sp.prompts):
        pids[u, : len(p)] = torch.tensor(p, dtype=torch.long)
        pmask[u, : len(p)] = 1
    pids, pmask = pids.to(device), pmask.to(device)
    out = decoder(input_ids=pids, attention_mask=pmask, use_cache=True)
    cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    why = unsupported_cache(cache)
    if why:
        return why
    owner = torch.tensor(sp.owner, dtype=torch.long, device=device)
    plen = pmask.sum(1)  # [U]
    last = out.last_hidden_state[torch.arange(len(sp.prompts), device=device), plen - 1]  # [U, H]
    del out
    n_max = max(1, max(len(r) for r in sp.responses))
    cids = torch.zeros((b, n_max), dtype=torch.long)
    cmask = torch.zeros((b, n_max), dtype=torch.long)
    for i, r in enumerate(sp.responses):
        cids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        cmask[i, : len(r)] = 1
    cids, cmask = cids.to(device), cmask.to(device)
    cache.batch_select_indices(owner)  # one row of keys and values per completion, still in the graph
    mask = torch.cat([pmask[owner], cmask], dim=1)
    pos = plen[owner].unsqueeze(1) + torch.arange(n_max, device=device)
    h = decoder(input_ids=cids, attention_mask=mask, position_ids=pos, use_cache=True,
                **{_cache_argument(decoder): cache}).last_hidden_state  # [B, N, H]
    del cache
    resp = [len(r) for r in sp.responses]
    rows = torch.repeat_interleave(torch.arange(b), torch.tensor(resp, dtype=torch.long)).to(device)
    cols = (torch.cat([torch.arange(n) for n in resp]) if b else torch.zeros(0, dtype=torch.long)).to(device)
    # token j of a row: predicted by its prompt's last state (j = 0) or by completion position j - 1
    src = torch.where((cols == 0).unsqueeze(1), last[owner[rows]], h[rows, (cols - 1).clamp_min(0)])
    return ResponseStates(src, rows, cols, cids[rows, cols])


def _cache_argument(decoder: torch.nn.Module) -> str:
    """The forward's name for a cache to continue: ``cache`` (transformers >= 5.2x) or ``past_key_values``."""
    import inspect

    params = inspect.signature(decoder.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def shared_logprobs(decoder: torch.nn.Module, head: Head, batch: TokenBatch, sp: SharedPlan, temperature: float,
                    with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None] | str:
    """``([B, T] log-probs, [B, T] entropies or None)`` of ``batch``'s response tokens with each prompt run
    once, or why this decoder's cache cannot serve."""
    st = response_states(decoder, sp, batch.input_ids.device)
    if isinstance(st, str):
        return st
    lp, ent = token_logprobs(st.hidden, head, st.targets, temperature, with_entropy, live=batch.host_live())
    zeros = torch.zeros(tuple(batch.loss_mask.shape), dtype=torch.float32, device=lp.device)
    logp = zeros.index_put((st.rows, st.cols), lp)
    return logp, (zeros.index_put((st.rows, st.cols), ent) if ent is not None else None)


def checked(decoder: torch.nn.Module) -> str | None:
    """The once-per-model verdict: None (not checked yet), '' (equal to the per-row path) or why not."""
    return _CHECKED.get(decoder)


def record_check(decoder: torch.nn.Module, reason: str) -> None:
    _CHECKED[decoder] = reason


def full_precision(device: torch.device | str) -> Any:
    """Autocast off on ``device`` (where it is on) for the once-per-model check: in bf16 the shared and per-row
    paths round differently (0.145 per token apart on a 135M model, as far as bf16 is from fp32: 0.173), so
    the check compares them in the weights' own precision, where a real difference stands out."""
    import contextlib

    kind = torch.device(device).type
    return torch.autocast(device_type=kind, enabled=False) if autocast_on(device) else contextlib.nullcontext()


def autocast_on(device: torch.device | str) -> bool:
    """Whether autocast is on for ``device``'s type (False for a type without autocast)."""
    try:
        return bool(torch.is_autocast_enabled(torch.device(device).type))
    except (RuntimeError, TypeError):
        return False


def close_enough(ours: torch.Tensor, theirs: torch.Tensor, mask: torch.Tensor, low_precision: bool) -> bool:
    """Per-token log-probs of the two paths agree up to the compute dtype's rounding."""
    tol = 5e-2 if low_precision else 1e-3
    d = (ours - theirs).abs()[mask > 0]
    return bool(torch.isfinite(ours[mask > 0]).all()) and (d.numel() == 0 or float(d.max()) <= tol)
