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
    top-p, renormalized. `logits` are float32 on any device; the result stays there. Which steps run is decided
    from the Python-side parameters, so nothing here reads the device back."""
    B, V = logits.shape
    dev = logits.device
    temps = [sp.temperature if sp.temperature > 0 else 1.0 for sp in params]
    scaled = logits
    if any(t != 1.0 for t in temps):
        scaled = logits / torch.tensor(temps, dtype=torch.float32).to(dev).unsqueeze(1)
    top_k = [sp.top_k for sp in params]
    if any(k > 0 for k in top_k):
        ks = torch.tensor([min(k, V) if k > 0 else V for k in top_k]).to(dev)
        kth = torch.sort(scaled, dim=-1, descending=True).values.gather(1, (ks - 1).unsqueeze(1))
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if any(sp.top_p < 1 for sp in params):
        top_p = torch.tensor([sp.top_p for sp in params], dtype=torch.float32).to(dev)
        sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        before = probs.cumsum(-1) - probs  # mass strictly above each token
        drop = before >= top_p.unsqueeze(1)
        drop[:, 0] = False
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        scaled = torch.full_like(scaled, float("-inf")).scatter(1, order, sorted_logits)
    return torch.log_softmax(scaled, dim=-1)


def pick_tokens(logits: torch.Tensor, params: list[SamplingParams], uniforms: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's token and its processed log-prob, as two [B] tensors on the logits' device, in one batch.

    A sampled row b takes the token where the cumulative probability first exceeds `uniforms[b]` times the row's
    total (inverse-CDF sampling: the same distribution as multinomial, driven by one uniform the caller drew from
    the row's own generator); a greedy row (temperature 0) takes the argmax and ignores its uniform. The target
    stays strictly below the total, so a token of probability 0 can never be picked."""
    logits = logits.float()
    logp = processed_logprobs(logits, params)
    greedy = [sp.temperature <= 0 for sp in params]
    dev = logits.device
    if all(greedy):
        tok = logits.argmax(-1)
    else:
        cdf = logp.exp().cumsum(-1)
        total = cdf[:, -1:]
        u = torch.tensor(uniforms, dtype=torch.float32).to(dev).unsqueeze(1)
        target = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))
        tok = torch.searchsorted(cdf, target, right=True).squeeze(1).clamp(max=logits.shape[1] - 1)
        if any(greedy):
            tok = torch.where(torch.tensor(greedy).to(dev), logits.argmax(-1), tok)
    return tok, logp.gather(1, tok.unsqueeze(1)).squeeze(1)


def draw(logits: torch.Tensor, rows: list[Row]) -> None:
    """Sample one token for every row that has not ended (row b reads logits[b]) and push it.

    `logits` [B, V] stay on the model's device: the processing and the draw run there in one batch, and only the
    [rows] token ids and log-probs come back, in one copy. A row whose distribution is broken (NaN or inf) gets
    the error; the other rows go on."""
    live = [b for b, r in enumerate(rows) if not r.ended]
    if not live:
        return
    picked = [rows[b] for b in live]
    if len(live) < len(rows):
        logits = logits[torch.tensor(live)]
    uniforms = [0.0 if r.params.temperature <= 0 else float(torch.rand((), generator=r.gen)) for r in picked]
    tok, lp = pick_tokens(logits, [r.params for r in picked], uniforms)
    host = torch.stack([tok.double(), lp.double()]).cpu().tolist()  # exact: ids < 2**53
    for row, t, lp_ in zip(picked, host[0], host[1], strict=True):
        if not math.isfinite(lp_):
            row.error = ValueError(f"the model's distribution for this row is not finite (log-prob {lp_} for "
                                   f"token {int(t)})")
        else:
            row.push(int(t), lp_)
