"""Factories of the built-in samplers (registered in :mod:`toolgym.agents.samplers`), and the vLLM engine's
options when the trainer builds it. Each factory imports its backend when called."""

from __future__ import annotations

from typing import Any

#: vLLM's share of a GPU that the trainer also uses, unless rollout.sampler_kwargs says otherwise: the
#: engine sleeps during updates, but during rollouts both hold memory (trainer weights + optimizer state).
SHARED_GPU_MEMORY_SHARE = 0.45


def hf(model: Any, *, max_model_len: int | None = None, **options: Any) -> Any:
    """transformers in this process. ``max_model_len`` is not passed on: the model's own context bounds a
    prompt, the episode limits bound an episode (as before the registry)."""
    from toolgym.agents.hf_sampler import HFSampler

    return HFSampler(model, **options)


def hf_train_options(cfg: Any, device: str) -> dict[str, Any]:
    """The trainer's ``hf`` sampler: ``model.dtype: bf16`` decodes under bf16 autocast, as the trainer's forward
    runs (fp32 master weights), so behaviour and trainer log-probs share their numerics; ``rollout.sampler_kwargs``
    overrides it."""
    kw = dict(cfg.rollout.sampler_kwargs)
    if cfg.model.dtype == "bf16":
        kw.setdefault("autocast", "bf16")
    return kw


def vllm(model: Any, **options: Any) -> Any:
    from toolgym.agents.vllm_sampler import VLLMSampler

    return VLLMSampler(model, **options)


def vllm_server(model: Any, **options: Any) -> Any:
    """vLLM server processes (:mod:`toolgym.agents.server_sampler`): ``servers=N`` started here, or ``urls``."""
    from toolgym.agents.server_sampler import VLLMServerSampler

    return VLLMServerSampler(model, **options)


def vllm_server_train_options(cfg: Any, device: str) -> dict[str, Any]:
    """The trainer's servers: ``rollout.servers`` (a count to start, or URLs; ``rollout.base_url`` is one URL),
    ``rollout.partial``, and the in-process engine's options (dtype from ``model.dtype``; eager on the CPU
    build); ``rollout.sampler_kwargs`` override each."""
    r = cfg.rollout
    kw: dict[str, Any] = {"partial": r.partial}
    if isinstance(r.servers, list):
        kw["urls"] = list(r.servers)
    elif r.base_url:
        kw["urls"] = [r.base_url]
    else:
        kw["servers"] = int(r.servers)
    if "urls" not in kw:
        kw["dtype"] = "bfloat16" if cfg.model.dtype == "bf16" else "float32"
        kw["enforce_eager"] = not on_cuda(device)
        if cfg.model.tokenizer:
            kw["tokenizer"] = cfg.model.tokenizer
    return {**kw, **dict(r.sampler_kwargs)}


def openai(model: Any, *, base_url: str | None = None, **options: Any) -> Any:
    """``model`` is the served model's name; ``base_url`` the server's /v1 URL."""
    from toolgym.agents.openai_sampler import OpenAISampler
    from toolgym.errors import ConfigError

    if not base_url:
        raise ConfigError("--base-url is required with --sampler openai (e.g. http://127.0.0.1:8000/v1)")
    return OpenAISampler(base_url, model, **options)


def on_cuda(device: str) -> bool:
    return str(device).split(":")[0] == "cuda"


def engine_sleeps(cfg: Any, device: str) -> bool:
    """``rollout.vllm_sleep``, or (null) whether the engine shares the trainer's GPU."""
    if cfg.rollout.vllm_sleep is not None:
        return bool(cfg.rollout.vllm_sleep)
    return on_cuda(device)


def vllm_train_options(cfg: Any, device: str) -> dict[str, Any]:
    """``vllm.LLM`` arguments for the trainer's engine; ``rollout.sampler_kwargs`` override each default.

    dtype follows ``model.dtype`` (the trainer scores in fp32 or under bf16 autocast: the engine samples
    in the same precision); CUDA graphs on GPUs (``enforce_eager`` only on the CPU build); sleep mode and a
    bounded memory share when the engine shares the trainer's GPU."""
    kw = dict(cfg.rollout.sampler_kwargs)
    kw.setdefault("dtype", "bfloat16" if cfg.model.dtype == "bf16" else "float32")
    kw.setdefault("enforce_eager", not on_cuda(device))
    if cfg.model.tokenizer:
        kw.setdefault("tokenizer", cfg.model.tokenizer)
    if engine_sleeps(cfg, device):
        kw.setdefault("enable_sleep_mode", True)
        kw.setdefault("gpu_memory_utilization", SHARED_GPU_MEMORY_SHARE)
    return kw
