"""Log-likelihood multiple-choice scoring, computed the way lm-evaluation-harness (0.4.x, `HFLM`) does.

Each choice is scored as the summed log-probability of the continuation " " + choice given the
task's context (`toolgym.envs.tasks.multiple_choice.loglik_request` writes the per-dataset prompts). Tokenization follows the
harness: trailing context whitespace moves into the continuation, the context is encoded on its own,
the continuation tokens are whole[len(context):] of the encoding of context + continuation, and the
model input is context tokens + continuation tokens. Strings are encoded with the tokenizer's own
special-token default (a tokenizer that prepends BOS gets it, as in `HFLM.tok_encode`), except that a
string already starting with the BOS text gets none added; an empty context becomes the BOS (else EOS)
token. Then acc = [argmax loglik == gold] and acc_norm = [argmax loglik / len(choice) == gold], where
the length is the character length of the choice text without the leading space (lm-eval's
`completion_len`; its byte-length variant is the separate `acc_bytes`); np.argmax's first index wins
ties.

Speed comes from packing: one row holds the question prefix once, followed by every choice;
a block attention mask lets each choice see the prefix and itself only, and position ids restart
after the prefix for every choice, so each choice's log-probabilities are those of the plain
prefix + choice sequence. Several questions share one batch (rows sorted by length to limit
padding), and logits are computed only at the positions that predict continuation tokens.

Imports torch and transformers: load this module lazily.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from toolgym.envs.tasks.multiple_choice import arc_context as arc_context  # its old import path

TARGET_DELIMITER = " "


@dataclass
class MCItem:
    """One multiple-choice question to score."""

    id: str
    context: str
    choices: list[str]
    gold: int


@dataclass
class MCScore:
    """Per-question outcome: the log-likelihood of every choice and both accuracies."""

    id: str
    logliks: list[float]
    gold: int
    pred: int
    pred_norm: int
    acc: float
    acc_norm: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def decide(item_id: str, logliks: Sequence[float], choices: Sequence[str], gold: int) -> MCScore:
    """acc and acc_norm from per-choice log-likelihoods (harness formulas; first index wins ties)."""
    lls = [float(x) for x in logliks]
    pred = max(range(len(lls)), key=lambda i: (lls[i], -i))
    normed = [ll / max(1, len(c)) for ll, c in zip(lls, choices, strict=True)]
    pred_norm = max(range(len(normed)), key=lambda i: (normed[i], -i))
    return MCScore(item_id, lls, gold, pred, pred_norm, float(pred == gold), float(pred_norm == gold))


def _encode(tokenizer: Any, text: str, special: bool | None = None) -> list[int]:
    """`HFLM.tok_encode`: the tokenizer's special-token default unless the text already starts with BOS."""
    if special is None:
        bos = getattr(tokenizer, "bos_token", None)
        if bos and text.startswith(str(bos)):
            special = False
    kwargs = {} if special is None else {"add_special_tokens": special}
    return list(tokenizer(text, **kwargs)["input_ids"])


def encode_pair(tokenizer: Any, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """Context and continuation token ids exactly as the harness splits them."""
    if not context:  # HFLM.loglikelihood: the prefix token is the context
        cont = _encode(tokenizer, continuation, special=False)
        prefix = _prefix_token(tokenizer)
        return ([prefix], cont) if not cont or cont[0] != prefix else (cont[:1], cont[1:])
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:  # trailing context whitespace moves into the continuation
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = _encode(tokenizer, context + continuation)
    ctx = _encode(tokenizer, context)
    if not ctx:  # a whitespace-only context: condition on the prefix token, as for an empty one
        return [_prefix_token(tokenizer)], whole
    return ctx, whole[len(ctx) :]


def _prefix_token(tokenizer: Any) -> int:
    for attr in ("bos_token_id", "eos_token_id"):
        tok = getattr(tokenizer, attr, None)
        if tok is not None:
            return int(tok)
    raise ValueError("empty context and the tokenizer has neither a BOS nor an EOS token")


@torch.inference_mode()
def naive_loglik(model: Any, ctx: Sequence[int], cont: Sequence[int]) -> float:
    """Reference: one plain forward of context + continuation, one choice at a time."""
    ids = torch.tensor([list(ctx) + list(cont)[:-1]], dtype=torch.long)
    logits = model(input_ids=ids).logits[0].float()
    logp = torch.log_softmax(logits[len(ctx) - 1 :], dim=-1)
    target = torch.tensor(list(cont), dtype=torch.long)
    return float(logp.gather(1, target[:, None]).sum())


def score_naive(model: Any, tokenizer: Any, items: Sequence[MCItem]) -> list[MCScore]:
    """The minimal loop: every choice of every question in its own forward (baseline and check)."""
    out = []
    for it in items:
        lls = []
        for ch in it.choices:
            ctx, cont = encode_pair(tokenizer, it.context, TARGET_DELIMITER + ch)
            lls.append(naive_loglik(model, ctx, cont))
        out.append(decide(it.id, lls, it.choices, it.gold))
    return out


@dataclass
class _Packed:
    ids: list[int]
    pos: list[int]
    seg: list[int]  # 0 = prefix, j + 1 = choice j
    targets: list[tuple[int, int, int]]  # (choice index, position predicting the token, token id)


def _pack(ctx: list[int], conts: list[list[int]]) -> _Packed:
    ids = list(ctx)
    pos = list(range(len(ctx)))
    seg = [0] * len(ctx)
    targets: list[tuple[int, int, int]] = []
    for j, cont in enumerate(conts):
        start = len(ids)
        # The last continuation token is never fed: nothing is predicted from it.
        body = cont[:-1]
        ids.extend(body)
        pos.extend(range(len(ctx), len(ctx) + len(body)))
        seg.extend([j + 1] * len(body))
        for i, tok in enumerate(cont):
            targets.append((j, len(ctx) - 1 if i == 0 else start + i - 1, tok))
    return _Packed(ids, pos, seg, targets)


def _block_mask(rows: list[_Packed], length: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive [B, 1, T, T] mask: causal, and choice tokens see only the prefix and themselves."""
    b = len(rows)
    seg = torch.full((b, length), -1, dtype=torch.long)
    for r, p in enumerate(rows):
        seg[r, : len(p.seg)] = torch.tensor(p.seg)
    q = seg[:, :, None]
    k = seg[:, None, :]
    causal = torch.ones(length, length, dtype=torch.bool).tril()[None]
    allowed = causal & (k >= 0) & ((k == 0) | (k == q))
    # Padding rows attend to themselves so no softmax row is empty.
    eye = torch.eye(length, dtype=torch.bool)[None] & (q < 0)
    allowed = allowed | eye
    mask = torch.zeros(b, 1, length, length, dtype=dtype)
    mask.masked_fill_(~allowed[:, None], torch.finfo(dtype).min)
    return mask


def _supports_bool_logits_to_keep() -> bool:
    import transformers

    return int(transformers.__version__.split(".")[0]) >= 5


class LoglikScorer:
    """Scores multiple-choice items with a causal LM; questions are packed and batched."""

    def __init__(self, model: Any, tokenizer: Any, *, batch_questions: int = 8, max_tokens: int = 4096) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_questions = max(1, batch_questions)
        self.max_tokens = max_tokens
        self._bool_keep = _supports_bool_logits_to_keep()
        self._dtype = next(model.parameters()).dtype
        self._device = next(model.parameters()).device  # inputs are built on the CPU, then moved here

    def _encode(self, item: MCItem) -> tuple[list[int], list[list[int]]]:
        ctx: list[int] | None = None
        conts = []
        for ch in item.choices:
            c, cont = encode_pair(self.tokenizer, item.context, TARGET_DELIMITER + ch)
            if ctx is None:
                ctx = c
            conts.append(cont)
        assert ctx is not None
        return ctx, conts

    @torch.inference_mode()
    def _forward(self, rows: list[_Packed]) -> list[list[float]]:
        length = max(len(p.ids) for p in rows)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(rows), length), int(pad), dtype=torch.long)
        pos = torch.zeros((len(rows), length), dtype=torch.long)
        for r, p in enumerate(rows):
            ids[r, : len(p.ids)] = torch.tensor(p.ids)
            pos[r, : len(p.pos)] = torch.tensor(p.pos)
        mask = _block_mask(rows, length, self._dtype)
        keep = torch.zeros((len(rows), length), dtype=torch.bool)
        for r, p in enumerate(rows):
            for _, at, _ in p.targets:
                keep[r, at] = True
        dev = self._device
        ids, mask, pos = ids.to(dev), mask.to(dev), pos.to(dev)
        if self._bool_keep:
            flat = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=keep.to(dev)).logits
            flat = flat.reshape(-1, flat.shape[-1])
        else:  # older transformers: full logits, then select
            flat = self.model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[keep.to(dev)]
        logp = torch.log_softmax(flat.float(), dim=-1)
        # Row-major order of the kept positions -> index into `flat`.
        order = keep.flatten().cumsum(0) - 1
        results: list[list[float]] = []
        for r, p in enumerate(rows):
            n_choices = 1 + max(j for j, _, _ in p.targets)
            sums = [0.0] * n_choices
            rows_idx = torch.tensor([int(order[r * length + at]) for _, at, _ in p.targets], device=logp.device)
            toks = torch.tensor([t for _, _, t in p.targets], device=logp.device)
            vals = logp[rows_idx, toks].tolist()
            for (j, _, _), v in zip(p.targets, vals, strict=True):
                sums[j] += v
            results.append(sums)
        return results

    def score(
        self, items: Sequence[MCItem], *, progress: Callable[[int, int], None] | None = None
    ) -> list[MCScore]:
        """Score every item; results come back in input order."""
        packed = []
        for it in items:
            ctx, conts = self._encode(it)
            p = _pack(ctx, conts)
            if len(p.ids) > self.max_tokens:
                raise ValueError(f"question {it.id}: packed length {len(p.ids)} exceeds max_tokens={self.max_tokens}")
            packed.append(p)
        order = sorted(range(len(items)), key=lambda i: -len(packed[i].ids))
        lls: dict[int, list[float]] = {}
        done = 0
        for start in range(0, len(order), self.batch_questions):
            chunk = order[start : start + self.batch_questions]
            for i, sums in zip(chunk, self._forward([packed[i] for i in chunk]), strict=True):
                lls[i] = sums
            done += len(chunk)
            if progress is not None:
                progress(done, len(items))
        return [decide(it.id, lls[i], it.choices, it.gold) for i, it in enumerate(items)]
