"""Config rules of episodes in rollout workers (processes or Ray actors) that sample from ``vllm_server``
servers: what runs, and what is refused with one line saying what to write."""

from __future__ import annotations

import pytest

from toolgym.errors import ConfigError
from toolgym.training.config import load_config


def _cfg(top=None, **rollout):
    return load_config({"model": {"name_or_path": "smollm2-135m-instruct"}, "mini_batches": 1, **(top or {}),
                        "rollout": {"env": "toolgym/Arith-v0", "prompts_per_step": 2, "group_size": 2, **rollout}})


@pytest.mark.parametrize("rollout", [
    {"sampler": "vllm_server", "workers": 2},
    {"sampler": "vllm_server", "workers": 2, "max_staleness": 1, "servers": 2},
    {"sampler": "vllm_server", "workers": 1, "servers": ["http://127.0.0.1:8000"]},
])
def test_server_sampler_with_worker_processes_is_accepted(rollout):
    cfg = _cfg(**rollout)
    assert cfg.rollout.workers == rollout["workers"] and cfg.rollout.sampler == "vllm_server"


@pytest.mark.parametrize("ahead", [{}, {"max_staleness": 2}, {"max_staleness": 1, "push_on": "update"}])
def test_server_sampler_on_ray_is_accepted_with_a_count_of_servers(ahead):
    cfg = _cfg({"distributed": "ray", "ray": {"num_workers": 2}}, sampler="vllm_server", servers=2, **ahead)
    assert cfg.distributed == "ray" and cfg.rollout.servers == 2
    assert cfg.rollout.max_staleness == ahead.get("max_staleness", 0)


@pytest.mark.parametrize(("top", "rollout", "says"), [
    ({"distributed": "ray"}, {"sampler": "vllm_server", "servers": ["http://127.0.0.1:8000"]},
     "rollout.servers: must be a count with distributed: ray (each server is started by a Ray actor on its node)"),
    ({"distributed": "ray"}, {"sampler": "hf", "max_staleness": 1},
     "distributed: must be 'none' with rollout.max_staleness and Ray workers that hold a model (with distributed: "
     "ray only a server sampler, 'vllm_server', samples ahead of the update)"),
    ({"distributed": "ray"}, {"sampler": "vllm_server", "workers": 2},
     "distributed: must be 'none' with rollout.workers (with distributed: ray the rollout workers are "
     "ray.num_workers)"),
    ({"distributed": "ray"}, {"sampler": "vllm"},
     "rollout.sampler: must be an in-process sampler ('hf') or a server sampler ('vllm_server') with "
     "distributed: ray"),
    ({}, {"sampler": "vllm", "workers": 1},
     "rollout.sampler: must be an in-process sampler ('hf') or a server sampler ('vllm_server') with "
     "rollout.workers"),
])
def test_refusals_say_what_to_write(top, rollout, says):
    with pytest.raises(ConfigError) as err:
        _cfg(top, **rollout)
    assert says in str(err.value) and "\n" not in str(err.value)
