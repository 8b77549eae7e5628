"""Collate trajectories into padded tensors of the response region.

The training tokens are exactly the rollout's tokens: prompt_ids + response_ids, never re-tokenized.
Every [B, T] tensor covers the response region only (spec: the prompt is excluded).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def to(self, device: torch.device | str) -> TokenBatch:
        return TokenBatch(
            input_ids=self.input_ids.to(device),
            attention_mask=self.attention_mask.to(device),
            prompt_lens=self.prompt_lens.to(device),
            response_lens=self.response_lens.to(device),
            loss_mask=self.loss_mask.to(device),
            rollout_logprobs=self.rollout_logprobs.to(device),
            max_response_len=self.max_response_len,
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
    )
