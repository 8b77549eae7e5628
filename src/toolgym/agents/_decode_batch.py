"""The rows the HF sampler decodes together, and their KV cache: rows join (prompts prefilled, keys/values
merged in) and leave (cache rows dropped) between any two decode steps, which is what continuous batching needs.

Layout: one transformers `DynamicCache` for the whole batch, left-padded so every row's next token goes in the
same (last) column; row b's real tokens are the last `lens[b]` columns. The 2D attention mask hides the padding
and position ids count real tokens only, so a row's logits do not depend on what else is in the batch, up to
float reduction order (matrix shapes change with the batch; see `HFSampler` on what that can flip).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

from toolgym.agents._hf_rows import Row, draw
from toolgym.agents._prefix_store import PrefixStore


def supports_merging(model: Any) -> bool:
    """True when the model's KV cache is plain full-attention `DynamicLayer`s (the layered `DynamicCache` of
    recent transformers): those can be padded, concatenated and sliced along the batch. Sliding-window, linear-attention or quantized layers
    (and older transformers) cannot; the sampler then batches statically."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer

        cache = DynamicCache(config=model.config)
        return all(type(layer) is DynamicLayer for layer in cache.layers)
    except Exception:  # noqa: BLE001 - any failure here means "not supported", never a crash
        return False


class DecodeBatch:
    """Rows decoding together on one model. Not thread-safe: one scheduler thread drives it."""

    def __init__(self, model: Any, device: Any, pad_id: int, cache_kw: str, fwd_extra: dict[str, Any],
                 amp: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
                 prefixes: PrefixStore | None = None) -> None:
        """`amp`: the context every forward runs in (`forward_context`: the trainer's autocast, entered in the
        decode thread itself because autocast is per thread). `prefixes`: where finished rows leave their cache for
        a later prompt that continues them (None: every prompt is prefilled whole)."""
        self.model, self.device, self.pad_id, self.amp = model, device, pad_id, amp
        self.prefixes = prefixes
        self._cache_kw, self._fwd_extra = cache_kw, fwd_extra
        self.rows: list[Row] = []
        self.lens: list[int] = []  # real tokens of each row in the cache
        self.width = 0  # columns of the cache
        self.cache: Any = None

    def join(self, rows: list[Row]) -> None:
        """Prefill `rows`, merge them into the batch and draw their first token (rows it ends leave with `leave`).

        A prompt that continues a finished row's tokens reuses that row's kept cache and forwards only the rest.
        A prefill that fails is retried row by row, so one bad prompt (too big for memory, say) fails alone."""
        parts = []
        fresh = rows
        if self.prefixes is not None:
            self.prefixes.check_weights(self.model)
            fresh = []
            for r in rows:
                hit = self.prefixes.find(r.prompt)
                if hit is None:
                    fresh.append(r)
                    continue
                try:
                    parts.append(self._extend(r, *hit))
                except Exception as exc:  # noqa: BLE001
                    r.error = exc
        if fresh:
            try:
                parts.append(self._prefill(fresh))
            except Exception as exc:  # noqa: BLE001
                if len(fresh) == 1:
                    fresh[0].error = exc
                else:
                    for r in fresh:
                        try:
                            parts.append(self._prefill([r]))
                        except Exception as e:  # noqa: BLE001
                            r.error = e
        for part in parts:
            self._merge(*part)

    def step(self) -> None:
        """One decode step: feed every row its last token and draw the next. Raises when the forward pass fails
        (the cache may then be half-updated: the caller fails the rows and calls `reset`)."""
        if not self.rows:
            return
        W = self.width
        ids = torch.tensor([[r.tokens[-1]] for r in self.rows], dtype=torch.long)
        pos = torch.tensor([[n] for n in self.lens], dtype=torch.long)
        lens = torch.tensor(self.lens, dtype=torch.long) + 1
        mask = (torch.arange(W + 1).unsqueeze(0) >= (W + 1 - lens).unsqueeze(1)).long()
        with torch.inference_mode():
            with self.amp():
                out = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                 position_ids=pos.to(self.device), use_cache=True, **self._fwd_extra,
                                 **{self._cache_kw: self.cache})
            self.cache = getattr(out, self._cache_kw)
            self.width += 1
            self.lens = [n + 1 for n in self.lens]
            draw(out.logits[:, -1, :], self.rows)

    def leave(self, rows: list[Row]) -> None:
        """Drop `rows` and their cache rows; trim padding columns no remaining row needs."""
        gone = {id(r) for r in rows}
        keep = [i for i, r in enumerate(self.rows) if id(r) not in gone]
        if len(keep) == len(self.rows):
            return
        if self.prefixes is not None:
            self._keep_prefixes([i for i, r in enumerate(self.rows) if id(r) in gone])
        if not keep:
            self.reset()
            return
        lens = [self.lens[i] for i in keep]
        trim = self.width - max(lens)
        with torch.inference_mode():
            idx = torch.tensor(keep, dtype=torch.long, device=self.device)
            for layer in self.cache.layers:
                layer.keys = layer.keys[:, :, trim:].index_select(0, idx)
                layer.values = layer.values[:, :, trim:].index_select(0, idx)
        self.rows = [self.rows[i] for i in keep]
        self.lens, self.width = lens, self.width - trim

    def reset(self) -> None:
        self.rows, self.lens, self.width, self.cache = [], [], 0, None

    # -- internals ---------------------------------------------------------------------------------------------

    def _prefill(self, rows: list[Row]) -> tuple[Any, list[int], list[Row], int]:
        """Forward the distinct prompts of `rows` (the episodes of a group share their first one), then draw each
        row's first token last, so a failure before it leaves the rows untouched for a retry. Returns the rows'
        cache, their lengths, the rows and the cache width; rows that ended at once leave after the merge."""
        which: dict[tuple[int, ...], int] = {}
        src = [which.setdefault(tuple(r.prompt), len(which)) for r in rows]
        prompts = [list(p) for p in which]
        L = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), L), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), L), dtype=torch.long)
        for b, p in enumerate(prompts):  # left padding keeps every row's next token at the end
            ids[b, L - len(p) :] = torch.tensor(p)
            mask[b, L - len(p) :] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.inference_mode():
            with self.amp():
                out = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                 position_ids=pos.to(self.device), use_cache=True, **self._fwd_extra,
                                 **{self._cache_kw: None})
            cache = getattr(out, self._cache_kw)
            logits = out.logits[:, -1, :]
            if len(prompts) < len(rows):  # one cache row per row
                idx = torch.tensor(src, dtype=torch.long, device=self.device)
                logits = logits.index_select(0, idx)
                for layer in cache.layers:
                    layer.keys = layer.keys.index_select(0, idx)
                    layer.values = layer.values.index_select(0, idx)
            draw(logits, rows)
        return cache, [len(r.prompt) for r in rows], list(rows), L

    def _extend(self, row: Row, n: int, entry: Any) -> tuple[Any, list[int], list[Row], int]:
        """Prefill `row` on the first `n` tokens of a kept cache: only the rest of its prompt goes forward."""
        from transformers.cache_utils import DynamicCache

        rest = row.prompt[n:]
        width = n + len(rest)
        with torch.inference_mode():
            cache = DynamicCache(config=self.model.config)
            for i, (k, v) in enumerate(zip(entry.keys, entry.values, strict=True)):
                cache.update(k[:, :, :n], v[:, :, :n], i)
            with self.amp():
                out = self.model(input_ids=torch.tensor([rest], dtype=torch.long).to(self.device),
                                 attention_mask=torch.ones((1, width), dtype=torch.long).to(self.device),
                                 position_ids=torch.arange(n, width).unsqueeze(0).to(self.device), use_cache=True,
                                 **self._fwd_extra, **{self._cache_kw: cache})
            cache = getattr(out, self._cache_kw)
            draw(out.logits[:, -1, :], [row])
        return cache, [width], [row], width

    def _keep_prefixes(self, idx: list[int]) -> None:
        """Hand the caches of rows that finished (not failed or cancelled) to the prefix store."""
        assert self.prefixes is not None
        W = self.width
        for i in idx:
            r, n = self.rows[i], self.lens[i]
            if r.finish is None or r.error is not None:  # failed or cancelled: nothing to continue
                continue
            tokens = r.prompt + r.tokens[:-1]  # the last token was drawn, never forwarded
            if len(tokens) != n:
                continue
            layers = self.cache.layers
            self.prefixes.put(tokens, [la.keys[i : i + 1, :, W - n :] for la in layers],
                              [la.values[i : i + 1, :, W - n :] for la in layers])

    def _merge(self, cache: Any, lens: list[int], rows: list[Row], width: int) -> None:
        if self.cache is None:
            self.cache, self.lens, self.rows, self.width = cache, list(lens), list(rows), width
            return
        W = max(self.width, width)
        with torch.inference_mode():
            for old, new in zip(self.cache.layers, cache.layers, strict=True):
                old.keys = torch.cat([_pad_left(old.keys, W - self.width), _pad_left(new.keys, W - width)], 0)
                old.values = torch.cat([_pad_left(old.values, W - self.width), _pad_left(new.values, W - width)], 0)
        self.rows += rows
        self.lens += lens
        self.width = W


def forward_context(device: Any, dtype: str | None) -> Callable[[], AbstractContextManager[Any]]:
    """What the sampler's forwards run under: `torch.autocast(dtype)` on the device's type, as the trainer's
    `model.dtype: bf16` forward does (fp32 master weights, bf16 compute), so sampled and trained log-probs come
    from the same numerics; None: the weights' own dtype."""
    if dtype is None:
        return contextlib.nullcontext
    dt = AUTOCAST_DTYPES.get(dtype)
    if dt is None:
        raise ValueError(f"autocast must be one of {sorted(AUTOCAST_DTYPES)} or None, not {dtype!r}")
    kind = torch.device(device).type
    return lambda: torch.autocast(device_type=kind, dtype=dt)


AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}


def _pad_left(t: torch.Tensor, n: int) -> torch.Tensor:
    """`n` zero columns before the sequence dimension (-2) of a [B, H, T, D] cache tensor."""
    return torch.nn.functional.pad(t, (0, 0, n, 0)) if n else t
