"""One sampled sequence of the HF sampler ("a row") and how its next token is drawn.

Shared by the static and the continuous decode loops, so both keep the same per-row contract: each row has
its own temperature/top-k/top-p/max_tokens/stop strings/stop ids and its own random generator (seeded from the
request's seed and the sample index, so a seeded row draws the same numbers whatever else shares its batch),
and the log-prob it records is that of the sampled token under the processed distribution it was drawn from.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from toolgym.agents.sampling import Sample, SamplingParams


@dataclass(eq=False)
class Row:
    """A prompt being continued under one request's parameters (sample `index` of its `params.n`)."""

    prompt: list[int]
    params: SamplingParams
    index: int
    limit: int  # new tokens that fit: min(max_tokens, room left in the context)
    stop_ids: frozenset[int]
    eos_ids: frozenset[int]
    decode: Callable[[list[int]], str] | None = None  # for stop strings
    ticket: Any = None  # the scheduler's handle on the request this row belongs to
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str | None = None
    stop_reason: str | int | None = None
    error: BaseException | None = None
    gen: torch.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.gen = torch.Generator(device="cpu")
        if self.params.seed is not None:
            self.gen.manual_seed(int(self.params.seed) * 1_000_003 + self.index)
        else:
            self.gen.seed()

    @property
    def ended(self) -> bool:
        """Finished (stop or length) or failed: the row takes no more tokens."""
        return self.finish is not None or self.error is not None

    def push(self, token: int, logprob: float) -> None:
        """Record a sampled token and decide whether the row is finished."""
        self.tokens.append(token)
        self.logprobs.append(logprob)
        sp = self.params
        if token in self.stop_ids:
            self.finish, self.stop_reason = "stop", (None if token in self.eos_ids else token)
        elif sp.stop and self.decode is not None:
            longest = max(len(s) for s in sp.stop)
            tail = self.decode(self.tokens[-(longest + 8) :])
            hit = next((s for s in sp.stop if s in tail), None)
            if hit is not None:
                self.finish, self.stop_reason = "stop", hit
        if self.finish is None and len(self.tokens) >= self.limit:
            self.finish = "length"

    def sample(self) -> Sample:
        return Sample(token_ids=self.tokens, logprobs=self.logprobs, finish_reason=self.finish or "length",
                      logprob_kind=self.params.logprob_kind(), stop_reason=self.stop_reason)


def processed_logprobs(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """[B, V] log-probs of each row's processed distribution: temperature (1 for greedy rows), then top-k, then
    top-p, renormalized. `logits` are float32 on the CPU."""
    B, V = logits.shape
    temps = torch.tensor([sp.temperature for sp in params], dtype=torch.float32)
    top_k = [sp.top_k for sp in params]
    top_p = torch.tensor([sp.top_p for sp in params], dtype=torch.float32)
    greedy = temps <= 0
    scaled = logits / torch.where(greedy, torch.ones_like(temps), temps).unsqueeze(1)
    if any(k > 0 for k in top_k):
        ks = torch.tensor([min(k, V) if k > 0 else V for k in top_k])
        kth = torch.sort(scaled, dim=-1, descending=True).values.gather(1, (ks - 1).unsqueeze(1))
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if bool((top_p < 1).any()):
        sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        before = probs.cumsum(-1) - probs  # mass strictly above each token
        drop = before >= top_p.unsqueeze(1)
        drop[:, 0] = False
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        scaled = torch.full_like(scaled, float("-inf")).scatter(1, order, sorted_logits)
    return torch.log_softmax(scaled, dim=-1)


def draw(logits: torch.Tensor, rows: list[Row]) -> None:
    """Sample one token for every row that has not ended (row b reads logits[b]) and push it.

    A row whose draw fails (NaN or inf in its distribution, say) gets the error; the other rows go on."""
    live = [b for b, r in enumerate(rows) if not r.ended]
    if not live:
        return
    logp = processed_logprobs(logits[live], [rows[b].params for b in live])
    for i, b in enumerate(live):
        row = rows[b]
        try:
            if row.params.temperature <= 0:
                tok = int(torch.argmax(logits[b]))
            else:
                tok = int(torch.multinomial(logp[i].exp(), 1, generator=row.gen))
            lp = float(logp[i, tok])
            if not math.isfinite(lp):
                raise ValueError(f"the model's distribution for this row is not finite (log-prob {lp} for token {tok})")
            row.push(tok, lp)
        except Exception as exc:  # noqa: BLE001 - this row's failure, not the batch's
            row.error = exc
