"""toolgym.agents: samplers (transformers, vLLM, OpenAI-compatible, and plug-ins through the registry of
:mod:`toolgym.agents.samplers`), chat rendering that appends token ids, the asyncio rollout runner, and
trajectories on disk. Heavy backends load only when used."""

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
    "SamplerSpec": "toolgym.agents.samplers",
    "register_sampler": "toolgym.agents.samplers",
    "get_sampler": "toolgym.agents.samplers",
    "list_samplers": "toolgym.agents.samplers",
    "ChatTemplate": "toolgym.agents.chat",
    "RolloutRunner": "toolgym.agents.runner",
    "RecordingProxy": "toolgym.agents.proxy",
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
    """A sampler by its registered name (:mod:`toolgym.agents.samplers`: hf, vllm, openai, vllm_server and plug-ins) for
    ``toolgym rollout`` and scripts; ``base_url`` goes to a remote sampler only."""
    from toolgym.agents.samplers import get_sampler

    return get_sampler(kind).build_for(model, purpose="rollout", base_url=base_url, max_model_len=max_model_len,
                                       **kwargs)
