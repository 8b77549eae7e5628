"""Kept KV caches of rows that finished, so the next turn of an episode (whose prompt starts with the previous
turn's prompt and answer) prefills only its new tokens: prefix reuse across turns, as vLLM's prefix caching does.

An entry holds one row's keys/values for the tokens it forwarded (its prompt and all its sampled tokens but the
last, which was drawn and never fed back). A new prompt takes the entry with the longest common prefix and
forwards only the rest. Entries are valid for one set of weights only: the store empties itself when the
model's parameters change (an optimizer step in place, `update_weights`), which it tells by each parameter's
storage and version counter, read on the host. Bounded in bytes; the least recently used entries go first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch

MIN_REUSE = 8  # fewer shared tokens are not worth a prefill of their own


@dataclass(eq=False)
class Entry:
    tokens: list[int]
    keys: list[torch.Tensor]  # per layer [1, heads, len(tokens), head_dim]
    values: list[torch.Tensor]
    nbytes: int


class PrefixStore:
    """Not thread-safe: the decode thread alone uses it."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self.entries: OrderedDict[int, Entry] = OrderedDict()
        self.nbytes = 0
        self._weights: Any = None
        self.hits = 0
        self.reused_tokens = 0

    def check_weights(self, model: Any) -> None:
        """Empty the store when the model's weights are not those its entries were computed with."""
        key = weights_key(model)
        if key != self._weights:
            self.clear()
            self._weights = key

    def clear(self) -> None:
        self.entries.clear()
        self.nbytes = 0

    def put(self, tokens: list[int], keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """Keep a copy of one row's cache (`keys`/`values` may be views of the batch's cache)."""
        if len(tokens) < MIN_REUSE:
            return
        nbytes = sum(t.numel() * t.element_size() for t in keys + values)
        if nbytes > self.budget:
            return
        for k, e in list(self.entries.items()):  # an earlier turn of the same episode is superseded
            if len(e.tokens) <= len(tokens) and tokens[: len(e.tokens)] == e.tokens:
                self._drop(k)
        entry = Entry(list(tokens), [k.clone() for k in keys], [v.clone() for v in values], nbytes)
        self.entries[id(entry)] = entry
        self.nbytes += nbytes
        while self.nbytes > self.budget:
            self._drop(next(iter(self.entries)))

    def find(self, prompt: list[int]) -> tuple[int, Entry] | None:
        """The entry sharing the longest prefix with `prompt`, and how many tokens to reuse (at least one token of
        the prompt is left to forward, for its logits); None below MIN_REUSE."""
        best: tuple[int, Entry] | None = None
        for k, e in self.entries.items():
            n = _common_prefix(prompt, e.tokens)
            if best is None or n > best[0]:
                best, key = (n, e), k
        if best is None:
            return None
        n = min(best[0], len(prompt) - 1)
        if n < MIN_REUSE:
            return None
        self.entries.move_to_end(key)
        self.hits += 1
        self.reused_tokens += n
        return n, best[1]

    def _drop(self, key: int) -> None:
        self.nbytes -= self.entries.pop(key).nbytes


def weights_key(model: Any) -> tuple[tuple[int, int], ...]:
    """Changes whenever a parameter is written in place (its version counter) or replaced (its storage)."""
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


def _common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the common prefix of two token lists (slice comparisons run in C)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo
