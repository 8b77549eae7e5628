"""Per-token log-probs of the sampled response tokens under a causal LM, in float32.

Row-wise log-softmax keeps peak memory at one [L, V] slice instead of [B, L, V] in float32.
"""

from __future__ import annotations

import torch

from toolgym.training.batch import TokenBatch


def response_logprobs(
    model: torch.nn.Module,
    batch: TokenBatch,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Return ([B, T] log-probs of each response token, optional [B, T] entropies).

    Position j of the response is predicted by the logits at prompt_len + j - 1.
    """
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
    logits = out.logits
    b, t = batch.loss_mask.shape
    ent = None
    rows_lp = []
    rows_ent = []
    for i in range(b):
        p = int(batch.prompt_lens[i])
        n = int(batch.response_lens[i])
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
