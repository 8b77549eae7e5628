"""HFSampler: transformers on CPU (or one GPU), batched, with a KV cache.

A hand-written decode loop instead of `model.generate`, because each row of a batch may carry its own
temperature/top-k/top-p/max_tokens/stop/seed (episodes of different groups share batches), and the
behaviour log-probs must be those of the processed distribution each token was actually drawn from.
"""

from __future__ import annotations

import inspect
from typing import Any

from toolgym.agents._batching import BatchQueue, Request
from toolgym.agents.sampling import ContextOverflow, Sample, Sampler, SamplerError, SamplingParams


class HFSampler(Sampler):
    """Samples from a transformers causal LM. `model` is a name or a loaded `PreTrainedModel`.

    A name is resolved like every model name in toolgym (an existing local path, a toolgym asset, or a
    Hugging Face Hub id; see `toolgym.assets.resolve_model`). `device` is auto | cpu | cuda | cuda:N;
    None means auto for a name and the model's own device for a loaded model. The model and every
    input go to that device (sampling itself runs on the CPU logits of the last position)."""

    name = "hf"

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        device: str | None = None,
        dtype: str = "float32",
        max_batch_size: int = 32,
        max_model_len: int | None = None,
        eos_token_ids: list[int] | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from toolgym._assets.names import load_error
        from toolgym.assets import resolve_model
        from toolgym.devices import resolve_device

        if device is None and not isinstance(model, str):  # a loaded model samples where it lives
            params = next(iter(model.parameters()), None)
            dev: Any = params.device if params is not None else torch.device("cpu")
        else:
            dev = resolve_device(device or "auto", local_rank=None)
        if isinstance(tokenizer, str):
            tok_name = tokenizer
            tok_ref = resolve_model(tok_name, "tokenizer")
            try:
                tokenizer = AutoTokenizer.from_pretrained(tok_ref)
            except (OSError, ValueError) as exc:
                raise load_error(tok_name, "tokenizer", exc) from None
        if isinstance(model, str):
            name = model
            ref = resolve_model(name)
            try:
                model = AutoModelForCausalLM.from_pretrained(ref, dtype=getattr(torch, dtype))
                if tokenizer is None:
                    tokenizer = AutoTokenizer.from_pretrained(ref)
            except (OSError, ValueError) as exc:
                raise load_error(name, "model", exc) from None
        self.model = model.to(dev).eval()
        self.tokenizer = tokenizer
        self.device = dev
        cfg = self.model.config
        self.max_model_len = max_model_len or getattr(cfg, "max_position_embeddings", None)
        self.eos_token_ids = set(eos_token_ids or _eos_ids(self.model, tokenizer))
        self.pad_id = _pad_id(self.model, tokenizer)
        self._queue = BatchQueue(self._run_batch, max_batch=max_batch_size)
        # transformers 5.x renamed the KV-cache argument from past_key_values to cache
        fwd = inspect.signature(self.model.forward).parameters
        self._cache_kw = "cache" if "cache" in fwd else "past_key_values"
        self._fwd_extra = {"logits_to_keep": 1} if "logits_to_keep" in fwd else {}

    async def agenerate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Sample]]:
        import asyncio

        for p in prompts:
            self.check_prompt(p, params)
        return list(await asyncio.gather(*(self._queue.submit(list(p), params) for p in prompts)))

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Take new weights from the trainer in place (names as in the HF model's state_dict)."""
        missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
        if unexpected:
            raise SamplerError(f"update_weights: unknown parameter names {unexpected[:3]}...")

    # -- engine side (worker thread) ------------------------------------------------------------------

    def _run_batch(self, requests: list[Request]) -> list[list[Sample] | BaseException]:
        rows: list[tuple[int, int, list[int], SamplingParams]] = []  # (request index, sample index, prompt, params)
        out: list[list[Sample] | BaseException] = [[] for _ in requests]
        for i, req in enumerate(requests):
            try:
                self.check_prompt(req.prompt, req.params)
            except ContextOverflow as exc:
                out[i] = exc
                continue
            for j in range(req.params.n):
                rows.append((i, j, req.prompt, req.params))
        if rows:
            samples = self._decode(rows)
            for (i, _j, _p, _params), s in zip(rows, samples, strict=True):
                res = out[i]
                assert isinstance(res, list)
                res.append(s)
        return out

    def _decode(self, rows: list[tuple[int, int, list[int], SamplingParams]]) -> list[Sample]:
        import torch

        dev = self.device
        B = len(rows)
        prompts = [r[2] for r in rows]
        params = [r[3] for r in rows]
        L = max(len(p) for p in prompts)
        ids = torch.full((B, L), self.pad_id, dtype=torch.long)
        attn = torch.zeros((B, L), dtype=torch.long)
        for b, p in enumerate(prompts):  # left padding keeps every row's next token at the end
            ids[b, L - len(p) :] = torch.tensor(p)
            attn[b, L - len(p) :] = 1
        ids, attn = ids.to(dev), attn.to(dev)
        limits = [self.check_prompt(p, sp) for p, sp in zip(prompts, params, strict=True)]
        gens = []
        for (_i, j, _p, sp) in rows:
            g = torch.Generator(device="cpu")
            if sp.seed is not None:
                g.manual_seed(int(sp.seed) * 1_000_003 + j)
            else:
                g.seed()
            gens.append(g)
        temps = torch.tensor([sp.temperature for sp in params], dtype=torch.float32)
        top_k = [sp.top_k for sp in params]
        top_p = torch.tensor([sp.top_p for sp in params], dtype=torch.float32)
        stop_ids = [self.eos_token_ids | set(sp.stop_token_ids) for sp in params]
        max_stop = max((len(s) for sp in params for s in sp.stop), default=0)

        toks: list[list[int]] = [[] for _ in range(B)]
        lps: list[list[float]] = [[] for _ in range(B)]
        finish: list[str | None] = [None] * B
        stop_reason: list[str | int | None] = [None] * B
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        past = None
        cur_ids, cur_pos = ids, pos
        cache_kw = self._cache_kw
        with torch.inference_mode():
            while True:
                out = self.model(input_ids=cur_ids, attention_mask=attn, position_ids=cur_pos, use_cache=True,
                                 **self._fwd_extra, **{cache_kw: past})
                past = getattr(out, cache_kw)
                logits = out.logits[:, -1, :].float().cpu()
                nxt, lp = _sample_rows(logits, temps, top_k, top_p, gens, finish)
                for b in range(B):
                    if finish[b] is not None:
                        continue
                    t = int(nxt[b])
                    toks[b].append(t)
                    lps[b].append(float(lp[b]))
                    if t in stop_ids[b]:
                        finish[b], stop_reason[b] = "stop", (None if t in self.eos_token_ids else t)
                    elif params[b].stop and self.tokenizer is not None:
                        tail = self.tokenizer.decode(toks[b][-(max_stop + 8) :], skip_special_tokens=False)
                        hit = next((s for s in params[b].stop if s in tail), None)
                        if hit is not None:
                            finish[b], stop_reason[b] = "stop", hit
                    if finish[b] is None and len(toks[b]) >= limits[b]:
                        finish[b] = "length"
                if all(f is not None for f in finish):
                    break
                feed = torch.tensor([toks[b][-1] if toks[b] else self.pad_id for b in range(B)], dtype=torch.long)
                cur_ids = feed.view(B, 1).to(dev)
                attn = torch.cat([attn, torch.ones((B, 1), dtype=attn.dtype, device=dev)], dim=1)
                cur_pos = cur_pos[:, -1:] + 1
        return [
            Sample(
                token_ids=toks[b],
                logprobs=lps[b],
                finish_reason=finish[b] or "length",
                logprob_kind=params[b].logprob_kind(),
                stop_reason=stop_reason[b],
            )
            for b in range(B)
        ]


def _sample_rows(logits, temps, top_k, top_p, gens, finish):  # type: ignore[no-untyped-def]
    """Draw one token per row from its processed distribution; return (tokens, log-probs of those tokens)."""
    import torch

    B, V = logits.shape
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
    logp = torch.log_softmax(scaled, dim=-1)
    nxt = torch.empty(B, dtype=torch.long)
    for b in range(B):
        if finish[b] is not None:
            nxt[b] = 0
        elif bool(greedy[b]):
            nxt[b] = int(torch.argmax(logits[b]))
        else:
            nxt[b] = int(torch.multinomial(logp[b].exp(), 1, generator=gens[b]))
    return nxt, logp.gather(1, nxt.unsqueeze(1)).squeeze(1)


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    ids: list[int] = []
    gc = getattr(model, "generation_config", None)
    for src in (getattr(gc, "eos_token_id", None), getattr(model.config, "eos_token_id", None),
                getattr(tokenizer, "eos_token_id", None)):
        if isinstance(src, int):
            ids.append(src)
        elif isinstance(src, (list, tuple)):
            ids.extend(int(x) for x in src)
    if tokenizer is not None:  # chat models end a turn with the template's end-of-turn token
        for tok in ("<|im_end|>", "<|eot_id|>", "<|end|>"):
            tid = tokenizer.convert_tokens_to_ids(tok) if tok in tokenizer.get_vocab() else None
            if isinstance(tid, int):
                ids.append(tid)
    return sorted(set(ids))


def _pad_id(model: Any, tokenizer: Any) -> int:
    for v in (getattr(tokenizer, "pad_token_id", None), getattr(model.config, "pad_token_id", None)):
        if isinstance(v, int):
            return v
    eos = _eos_ids(model, tokenizer)
    return eos[0] if eos else 0
