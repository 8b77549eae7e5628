"""HFSampler: transformers on CPU (or one GPU), continuously batched, with a KV cache.

A hand-written decode loop instead of `model.generate`, because each row of a batch may carry its own
temperature/top-k/top-p/max_tokens/stop/seed (episodes of different groups share batches), and the
behaviour log-probs must be those of the processed distribution each token was actually drawn from.

Continuous batching (the default): rows join the running decode loop at the next step (their prompts
prefilled, their keys/values merged into the batch's cache) and leave when they end, so in multi-turn
episodes a short turn never waits for a long one. transformers' own `ContinuousBatchingManager` is not used:
it samples every request from the global torch generator (no per-request seed), applies one greedy-or-sample
mode to all requests, and has no stop strings. `batching="static"` keeps the older scheduler (a batch runs
until its longest row ends), which models whose KV cache cannot be merged (sliding-window or linear-attention
layers, transformers before the layered DynamicCache) fall back to.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from toolgym.agents._batching import BatchQueue, ContinuousBatcher, Request
from toolgym.agents.sampling import Sample, Sampler, SamplerError, SamplingParams

BATCHING = ("auto", "continuous", "static")


class HFSampler(Sampler):
    """Samples from a transformers causal LM. `model` is a name or a loaded `PreTrainedModel`.

    A name is resolved like every model name in toolgym (an existing local path, a toolgym asset, or a
    Hugging Face Hub id; see `toolgym.assets.resolve_model`). `device` is auto | cpu | cuda | cuda:N;
    None means auto for a name and the model's own device for a loaded model. The model and every
    input go to that device, and so does sampling: temperature, top-k/top-p, log-softmax and the draw run
    there in one batch per step, and only each row's token id and log-prob come back to the host.

    `autocast` (bf16 | fp16 | None) runs every forward under `torch.autocast` of that dtype, in the decode
    thread itself (autocast is per thread): what the trainer's `model.dtype: bf16` does over fp32 master
    weights, so the behaviour log-probs come from the numerics the trainer scores with.

    Prefix reuse (continuous batching only): a row that finishes leaves its KV cache in a store of at most
    `prefix_cache_mb` MiB (0: off); a later prompt that starts with that row's tokens (the next turn of its
    episode) forwards only what is new. The store empties when the weights change.

    `max_batch_size` caps the rows (samples) decoding at once (with `batching="static"`: the requests per
    decode loop). `batching` is continuous | static | auto (continuous where the model's cache allows it).

    Seeded requests give the same tokens whatever else shares the batch and whatever the device: each row
    draws one uniform per token from its own CPU generator, seeded by the request's seed and its sample index,
    and the device turns it into a token by inverse CDF (`searchsorted` on the cumulative probabilities). What batch composition can change is float
    reduction order (matrix shapes differ), so logits and log-probs differ in the last bits (~1e-6), and a
    sampled token flips only when its random draw falls that close to the boundary between two tokens (or a
    greedy row's two best logits are that close); after a flip the row's continuation differs.
    """

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
        batching: str = "auto",
        autocast: str | None = None,
        prefix_cache_mb: float = 512,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from toolgym._assets.names import load_error
        from toolgym.agents._decode_batch import DecodeBatch, forward_context, supports_merging
        from toolgym.agents._prefix_store import PrefixStore
        from toolgym.assets import resolve_model
        from toolgym.devices import resolve_device

        if batching not in BATCHING:
            raise ValueError(f"batching must be one of {BATCHING}, not {batching!r}")
        forward_context("cpu", autocast)  # an unknown dtype fails here, before a model loads
        if device is None and not isinstance(model, str):  # a loaded model samples where it lives
            params = next(iter(model.parameters()), None)
            dev: Any = str(params.device) if params is not None else "cpu"
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
        self.autocast = autocast
        self._amp = forward_context(dev, autocast)
        cfg = self.model.config
        self.max_model_len = max_model_len or getattr(cfg, "max_position_embeddings", None)
        self.eos_token_ids = set(eos_token_ids or _eos_ids(self.model, tokenizer))
        self.pad_id = _pad_id(self.model, tokenizer)
        self.vocab_size = _vocab_size(self.model)
        # transformers 5.x renamed the KV-cache argument from past_key_values to cache
        fwd = inspect.signature(self.model.forward).parameters
        self._cache_kw = "cache" if "cache" in fwd else "past_key_values"
        self._fwd_extra = {"logits_to_keep": 1} if "logits_to_keep" in fwd else {}
        mergeable = supports_merging(self.model)
        if batching == "continuous" and not mergeable:
            raise ValueError("batching='continuous' needs a KV cache of full-attention DynamicLayers (no "
                             "sliding-window or linear-attention layers); use batching='static'")
        self.batching = "continuous" if batching != "static" and mergeable else "static"
        self._queue: BatchQueue | ContinuousBatcher
        self.prefix_store: Any = None
        if self.batching == "continuous":
            self.prefix_store = PrefixStore(int(prefix_cache_mb * 2**20)) if prefix_cache_mb > 0 else None
            engine = DecodeBatch(self.model, dev, self.pad_id, self._cache_kw, self._fwd_extra, self._amp,
                                 self.prefix_store)
            self._queue = ContinuousBatcher(engine, self._rows, max_rows=max_batch_size)
        else:
            self._queue = BatchQueue(self._run_batch, max_batch=max_batch_size)

    async def agenerate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Sample]]:
        for p in prompts:
            self.check_prompt(p, params)
        return list(await asyncio.gather(*(self._queue.submit(list(p), params) for p in prompts)))

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Take new weights from the trainer in place (names as in the HF model's state_dict), between steps."""
        with self._queue.paused():
            missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
        if unexpected:
            raise SamplerError(f"update_weights: unknown parameter names {unexpected[:3]}...")

    # -- engine side (worker thread) ------------------------------------------------------------------

    def _rows(self, req: Request) -> list[Any]:
        """The request's rows, one per sample; raises SamplerError for a prompt the model cannot take."""
        from toolgym.agents._hf_rows import Row

        sp = req.params
        limit = self.check_prompt(req.prompt, sp)
        bad = next((t for t in req.prompt if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise SamplerError(f"prompt token id {bad} is outside the model's vocabulary of {self.vocab_size}")
        tok = self.tokenizer
        decode = (lambda ids: tok.decode(ids, skip_special_tokens=False)) if tok is not None else None
        eos = frozenset(self.eos_token_ids)
        stop = eos | frozenset(sp.stop_token_ids)
        return [Row(list(req.prompt), sp, j, limit, stop, eos, decode) for j in range(sp.n)]

    def _run_batch(self, requests: list[Request]) -> list[list[Sample] | BaseException]:
        """The static path: one decode loop over all rows of `requests` until the last one ends."""
        out: list[list[Sample] | BaseException] = [[] for _ in requests]
        rows: list[tuple[int, Any]] = []
        for i, req in enumerate(requests):
            try:
                rows += [(i, r) for r in self._rows(req)]
            except SamplerError as exc:
                out[i] = exc
        if rows:
            self._decode([r for _, r in rows])
            for i, r in rows:
                res = out[i]
                if r.error is not None:
                    out[i] = SamplerError(f"sampling failed: {type(r.error).__name__}: {r.error}")
                elif isinstance(res, list):
                    res.append(r.sample())
        return out

    def _decode(self, rows: list[Any]) -> None:
        import torch

        from toolgym.agents._hf_rows import draw

        dev = self.device
        B = len(rows)
        prompts = [r.prompt for r in rows]
        L = max(len(p) for p in prompts)
        ids = torch.full((B, L), self.pad_id, dtype=torch.long)
        attn = torch.zeros((B, L), dtype=torch.long)
        for b, p in enumerate(prompts):  # left padding keeps every row's next token at the end
            ids[b, L - len(p) :] = torch.tensor(p)
            attn[b, L - len(p) :] = 1
        ids, attn = ids.to(dev), attn.to(dev)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        past = None
        cur_ids, cur_pos = ids, pos
        cache_kw = self._cache_kw
        with torch.inference_mode():
            while True:
                with self._amp():
                    out = self.model(input_ids=cur_ids, attention_mask=attn, position_ids=cur_pos, use_cache=True,
                                     **self._fwd_extra, **{cache_kw: past})
                past = getattr(out, cache_kw)
                draw(out.logits[:, -1, :], rows)
                if all(r.ended for r in rows):
                    break
                feed = torch.tensor([r.tokens[-1] if r.tokens else self.pad_id for r in rows], dtype=torch.long)
                cur_ids = feed.view(B, 1).to(dev)
                attn = torch.cat([attn, torch.ones((B, 1), dtype=attn.dtype, device=dev)], dim=1)
                cur_pos = cur_pos[:, -1:] + 1


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


def _vocab_size(model: Any) -> int:
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    n = getattr(emb, "num_embeddings", None)
    return int(n) if isinstance(n, int) else int(model.config.vocab_size)
