"""Collate trajectories into padded tensors of the response region.

The training tokens are exactly the rollout's tokens: prompt_ids + response_ids, never re-tokenized.
Every [B, T] tensor covers the response region only (spec: the prompt is excluded).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from toolgym.agents.trajectory import Trajectory


@dataclass
class TokenBatch:
    """Right-padded model inputs plus response-aligned tensors for the loss."""

    input_ids: torch.Tensor  # [B, L] prompt + response, right-padded
    attention_mask: torch.Tensor  # [B, L]
    prompt_lens: torch.Tensor  # [B]
    response_lens: torch.Tensor  # [B]
    loss_mask: torch.Tensor  # [B, T] float, 1 = model token
    rollout_logprobs: torch.Tensor  # [B, T] the sampler's log-probs (0 where mask = 0)
    max_response_len: int
    # the same rows as host lists, kept from collation: the update reads lengths and ids from these, never from
    # the device tensors (each such read would make the host wait for the GPU between forward and backward)
    prompt_ids_host: list[list[int]] | None = field(default=None, repr=False)
    response_ids_host: list[list[int]] | None = field(default=None, repr=False)
    loss_mask_host: list[list[int]] | None = field(default=None, repr=False)  # the trajectories' loss masks

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def host_rows(self) -> tuple[list[list[int]], list[list[int]]]:
        """(prompt ids, response ids) of each row on the host: from collation, else one read of the device."""
        if self.prompt_ids_host is not None and self.response_ids_host is not None:
            return self.prompt_ids_host, self.response_ids_host
        ids = self.input_ids.cpu().tolist()
        plens, rlens = torch.stack([self.prompt_lens, self.response_lens]).cpu().tolist()
        self.prompt_ids_host = [row[:p] for row, p in zip(ids, plens, strict=True)]
        self.response_ids_host = [row[p : p + n] for row, p, n in zip(ids, plens, rlens, strict=True)]
        return self.prompt_ids_host, self.response_ids_host

    def host_lens(self) -> tuple[list[int], list[int]]:
        """(prompt lengths, response lengths) on the host (see :meth:`host_rows`)."""
        prompts, responses = self.host_rows()
        return [len(p) for p in prompts], [len(r) for r in responses]

    def host_live(self) -> list[int]:
        """Indices, into the row-major list of every row's response tokens, of the tokens with a loss mask: the
        only ones a loss sends a gradient to (from collation, else one read of the device)."""
        _, resp = self.host_lens()
        if self.loss_mask_host is None:
            self.loss_mask_host = [row[:n] for row, n in zip(self.loss_mask.cpu().tolist(), resp, strict=True)]
        live, k = [], 0
        for m, n in zip(self.loss_mask_host, resp, strict=True):
            live.extend(k + j for j in range(n) if m[j])
            k += n
        return live

    def to(self, device: torch.device | str) -> TokenBatch:
        return TokenBatch(
            input_ids=self.input_ids.to(device),
            attention_mask=self.attention_mask.to(device),
            prompt_lens=self.prompt_lens.to(device),
            response_lens=self.response_lens.to(device),
            loss_mask=self.loss_mask.to(device),
            rollout_logprobs=self.rollout_logprobs.to(device),
            max_response_len=self.max_response_len,
            prompt_ids_host=self.prompt_ids_host,
            response_ids_host=self.response_ids_host,
            loss_mask_host=self.loss_mask_host,
        )


def collate(trajectories: Sequence[Trajectory], pad_id: int = 0) -> TokenBatch:
    """Pack trajectories; a trajectory with no response still gets a row (its mask is all zero)."""
    if not trajectories:
        raise ValueError("collate needs at least one trajectory")
    lengths = [len(t.prompt_ids) + len(t.response_ids) for t in trajectories]
    max_len = max(lengths)
    max_resp = max(1, max(len(t.response_ids) for t in trajectories))
    b = len(trajectories)
    input_ids = torch.full((b, max_len), pad_id, dtype=torch.long)
    attention = torch.zeros((b, max_len), dtype=torch.long)
    loss_mask = torch.zeros((b, max_resp), dtype=torch.float32)
    rollout_lp = torch.zeros((b, max_resp), dtype=torch.float32)
    for i, t in enumerate(trajectories):
        ids = list(t.prompt_ids) + list(t.response_ids)
        input_ids[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention[i, : len(ids)] = 1
        n = len(t.response_ids)
        if n:
            loss_mask[i, :n] = torch.tensor(t.loss_mask, dtype=torch.float32)
            rollout_lp[i, :n] = torch.tensor(t.behavior_logprobs, dtype=torch.float32)
    return TokenBatch(
        input_ids=input_ids,
        attention_mask=attention,
        prompt_lens=torch.tensor([len(t.prompt_ids) for t in trajectories], dtype=torch.long),
        response_lens=torch.tensor([len(t.response_ids) for t in trajectories], dtype=torch.long),
        loss_mask=loss_mask * (rollout_lp == rollout_lp),  # a NaN rollout log-prob never enters the loss
        rollout_logprobs=torch.nan_to_num(rollout_lp, nan=0.0),
        max_response_len=max_resp,
        prompt_ids_host=[list(t.prompt_ids) for t in trajectories],
        response_ids_host=[list(t.response_ids) for t in trajectories],
        loss_mask_host=[list(t.loss_mask) if t.response_ids else [] for t in trajectories],
    )
