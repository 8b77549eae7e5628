"""Cutting a mini-batch into micro-batches: by a row cap (``grad_accum``) and a padded-token budget
(``max_tokens_per_micro_batch``).

Why: one forward holds a micro-batch's activations, and a right-padded batch costs rows x its longest row.
With a budget, rows are sorted by length (longest first) and packed greedily, so short rows pad to short
neighbours, not to the longest trajectory of the step; a row longer than the budget runs alone. The loss
normalisers are the mini-batch's global counts, so any cut adds up to the same mini-batch loss and gradient.
"""

from __future__ import annotations

from collections.abc import Sequence


def plan_micro_batches(rows: Sequence[int], lengths: Sequence[int], *, max_tokens: int | None = None,
                       max_rows: int | None = None) -> list[list[int]]:
    """``rows`` (indices) cut into micro-batches of at most ``max_rows`` rows and, with ``max_tokens``, at most
    ``max_tokens`` padded tokens (rows x longest row; ``lengths[k]`` is the length of ``rows[k]``).

    Without a budget the rows keep their order in consecutive slices (the ``grad_accum`` behaviour)."""
    if len(rows) != len(lengths):
        raise ValueError(f"{len(rows)} rows but {len(lengths)} lengths")
    cap = max_rows if max_rows and max_rows > 0 else max(len(rows), 1)
    if not max_tokens:
        return [list(rows[i : i + cap]) for i in range(0, len(rows), cap)]
    order = sorted(range(len(rows)), key=lambda k: -lengths[k])  # stable: equal lengths keep their order
    out: list[list[int]] = []
    longest = 0
    for k in order:
        if out and len(out[-1]) < cap and (len(out[-1]) + 1) * longest <= max_tokens:
            out[-1].append(rows[k])
        else:
            out.append([rows[k]])
            longest = max(lengths[k], 1)
    return out


def split_to(chunks: list[list[int]], count: int) -> list[list[int]]:
    """Split the largest micro-batches in half until there are ``count`` (data-parallel ranks must run as
    many forwards as each other: FSDP gathers weights in every one). Needs ``count`` <= the number of rows."""
    out = [list(c) for c in chunks]
    while len(out) < count:
        k = max(range(len(out)), key=lambda i: len(out[i]))
        if len(out[k]) < 2:
            raise ValueError(f"cannot make {count} micro-batches of {sum(len(c) for c in out)} rows")
        half = len(out[k]) // 2
        out[k : k + 1] = [out[k][:half], out[k][half:]]
    return out
