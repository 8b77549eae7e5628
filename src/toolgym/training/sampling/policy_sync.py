"""One policy for sampling and training: the rollout engine gets the trainer's weights whenever they change.

Which samplers get weights is their registry entry's ``needs_weight_push`` (:mod:`toolgym.agents.samplers`).
An in-process sampler (hf) runs the trainer's own module, so there is nothing to copy. A sampler with its own
copy (vLLM) gets the full weights (FSDP shards gathered, LoRA adapters merged, in the checkpoint layout that
``save_pretrained`` writes when it asks for ``weight_names = "checkpoint"``) after the SFT warm start or a
resume, before the first rollouts and evaluation, and after every update. On a GPU shared with the trainer
the engine sleeps through the update (its weights and KV cache freed: sleep level 2, since new weights
follow anyway) and wakes before the push, after PyTorch's CUDA cache is emptied; CUDA graphs are on there,
the CPU build runs eagerly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from toolgym.agents import sampler_factories
from toolgym.agents.sampler_factories import SHARED_GPU_MEMORY_SHARE
from toolgym.agents.sampler_factories import vllm_train_options as vllm_engine_kwargs
from toolgym.agents.samplers import get_sampler
from toolgym.errors import ConfigError
from toolgym.training.model.lora import base_model, merged_state_dict
from toolgym.training.sampling.checkpoint_format import checkpoint_weights
from toolgym.training.update import data_parallel as D

__all__ = ["SHARED_GPU_MEMORY_SHARE", "PolicySync", "engine_sleeps", "on_cuda", "policy_weights",
           "vllm_engine_kwargs"]


def on_cuda(device: str) -> bool:
    return torch.device(device).type == "cuda"


def engine_sleeps(cfg: Any, device: str) -> bool:
    """Whether the rollout engine sleeps through updates: only a sampler with its own copy of the weights
    has memory to free; then ``rollout.vllm_sleep``, or (null) whether it shares the trainer's GPU."""
    if not get_sampler(cfg.rollout.sampler, "rollout.sampler").needs_weight_push:
        return False
    return sampler_factories.engine_sleeps(cfg, device)


def policy_weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The full policy under Hugging Face names: FSDP shards gathered on every rank, LoRA merged."""
    if D.is_fsdp(module):
        return D.full_state_dict(module, rank0_only=False)
    return merged_state_dict(module)


class PolicySync:
    """Keeps ``sampler`` (and Ray rollout workers) on the trainer's current weights."""

    def __init__(self, sampler: Any, module: torch.nn.Module, *, sleep: bool, ray_rollouts: Any = None,
                 device: str = "cpu", say: Callable[[str], None] | None = None,
                 needs_weight_push: bool | None = None) -> None:
        """``needs_weight_push``: the sampler's registry flag (the trainer passes it); None, for a sampler
        built by hand: it takes pushes when it has ``update_weights`` and does not run ``module`` itself."""
        self.sampler = sampler
        self.module = module
        self.device = device
        self.say = say  # where the weight transport's one line goes (the run's log)
        self._route: tuple[str, str] | None = None
        self.sleep = sleep and hasattr(sampler, "sleep")
        self.ray_rollouts = ray_rollouts
        self.pushes = 0
        if needs_weight_push and not hasattr(sampler, "update_weights"):
            raise ConfigError(f"sampler {getattr(sampler, 'name', type(sampler).__name__)!r} is registered with "
                              "needs_weight_push but has no update_weights(state_dict) method")
        self._push = needs_weight_push

    @property
    def _sampler_runs_module(self) -> bool:
        return getattr(self.sampler, "model", None) is self.module

    @property
    def samples_elsewhere(self) -> bool:
        """Rollouts come from weights other than the trainer's module itself (an engine's copy, a server,
        Ray workers): the behaviour gap is then worth measuring."""
        return not self._sampler_runs_module or self.ray_rollouts is not None

    @property
    def copies_weights(self) -> bool:
        """The sampler holds its own copy of the weights, so pushes go to it (never to one that runs the
        trainer's module itself, such as hf)."""
        if self._push is not None:
            return self._push
        return hasattr(self.sampler, "update_weights") and not self._sampler_runs_module

    def push(self) -> None:
        """Send the current weights to every rollout engine."""
        if not self.copies_weights and self.ray_rollouts is None:
            return
        weights = {k: v.detach() for k, v in policy_weights(self.module).items()}
        if self.copies_weights:
            self.sampler.update_weights(self.engine_names(weights))
            self.pushes += 1
            self._announce_route()
        if self.ray_rollouts is not None:  # the workers rebuild a plain transformers model: the same weights
            self.ray_rollouts.sync(weights)

    def engine_names(self, weights: dict[str, Any]) -> dict[str, Any]:
        """``weights`` (the policy's plain names) under the names the engine loads: vLLM reads checkpoint names
        (MoE experts unfused, ...); a transformers replica takes the model's own."""
        if getattr(self.sampler, "weight_names", "model") == "checkpoint":
            return checkpoint_weights(base_model(self.module), weights)
        return weights

    def _announce_route(self) -> None:
        """One line when the engine's weight transport is first chosen or changes (e.g. /dev/shm filled up)."""
        route = getattr(self.sampler, "weight_route", None)
        if route is None or self.say is None or (route.kind, route.folder) == self._route:
            return
        self._route = (route.kind, route.folder)
        self.say(route.note)

    def before_update(self) -> None:
        if self.sleep:
            self.sampler.sleep(level=2)

    def after_update(self) -> None:
        """Wake the weights' memory, load the new weights into it, then the KV cache: never both copies at once.

        On CUDA the trainer's cached free blocks go back to the driver first: the waking engine allocates
        outside PyTorch's caching allocator, so memory the update freed but PyTorch still caches would be
        missing (TRL empties the cache here "to avoid OOM")."""
        if not self.sleep:
            self.push()
            return
        if on_cuda(self.device):
            torch.cuda.empty_cache()
        self.sampler.wake_up(["weights"])
        self.push()
        self.sampler.wake_up(["kv_cache"])
        self.sampler.reset_prefix_cache()
