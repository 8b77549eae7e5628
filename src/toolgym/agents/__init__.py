"""toolgym.agents: samplers (transformers, vLLM, OpenAI-compatible), chat rendering that appends token
ids, the asyncio rollout runner, and trajectories on disk. Heavy backends load only when used."""

from __future__ import annotations

from typing import Any

from toolgym.agents.trajectory import SCHEMA_VERSION, Trajectory

_LAZY = {
    "Sample": "toolgym.agents.sampling",
    "Sampler": "toolgym.agents.sampling",
    "SamplingParams": "toolgym.agents.sampling",
    "SamplerError": "toolgym.agents.sampling",
    "ContextOverflow": "toolgym.agents.sampling",
    "HFSampler": "toolgym.agents.hf_sampler",
    "VLLMSampler": "toolgym.agents.vllm_sampler",
    "OpenAISampler": "toolgym.agents.openai_sampler",
    "ChatTemplate": "toolgym.agents.chat",
    "RolloutRunner": "toolgym.agents.runner",
    "EpisodeLimits": "toolgym.agents.runner",
    "TaskSpec": "toolgym.agents.runner",
    "write_jsonl": "toolgym.agents.storage",
    "read_jsonl": "toolgym.agents.storage",
    "group_by": "toolgym.agents.storage",
    "RolloutWriter": "toolgym.agents.storage",
    "read_header": "toolgym.agents.storage",
    "write_parquet": "toolgym.agents.parquet",
    "read_parquet": "toolgym.agents.parquet",
}

__all__ = ["SCHEMA_VERSION", "Trajectory", "build_sampler", *_LAZY]

def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'toolgym.agents' has no attribute {name!r}")


def build_sampler(kind: str, model: str, *, base_url: str | None = None, max_model_len: int | None = None,
                  **kwargs: Any) -> Any:
    """A sampler by name: "hf" (transformers, CPU default), "vllm" (in-process engine), "openai" (HTTP)."""
    from toolgym.errors import ConfigError

    if kind == "hf":
        from toolgym.agents.hf_sampler import HFSampler

        return HFSampler(model, **kwargs)
    if kind == "vllm":
        from toolgym.agents.vllm_sampler import VLLMSampler

        kwargs.setdefault("enforce_eager", True)
        return VLLMSampler(model, max_model_len=max_model_len, **kwargs)
    if kind == "openai":
        from toolgym.agents.openai_sampler import OpenAISampler

        if not base_url:
            raise ConfigError("--base-url is required with --sampler openai (e.g. http://127.0.0.1:8000/v1)")
        return OpenAISampler(base_url, model, max_model_len=max_model_len, **kwargs)
    raise ConfigError(f"unknown sampler {kind!r}; use hf, vllm or openai")
