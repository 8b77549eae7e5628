"""Config of the ``vllm_server`` sampler: what ``rollout.servers``, ``rollout.partial`` and ``rollout.push_on``
accept, the pipeline it allows without workers, when pushes follow the schedule, and the options the trainer
builds it with."""

from __future__ import annotations

import pytest

from toolgym.agents.sampler_factories import vllm_server_train_options
from toolgym.errors import ConfigError
from toolgym.training.config import load_config


def _cfg(**rollout):
    return load_config({"model": {"name_or_path": "smollm2-135m-instruct"}, "mini_batches": 1,
                        "rollout": {"env": "toolgym/Arith-v0", "prompts_per_step": 2, "group_size": 2, **rollout}})


def test_servers_started_here_follow_the_model_and_the_rollout_fields():
    cfg = _cfg(sampler="vllm_server", servers=2, partial=True, max_staleness=1,
               sampler_kwargs={"max_num_seqs": 8, "enforce_eager": False})
    assert cfg.rollout.workers == 0  # the pipeline samples from the trainer's process: no worker needed
    assert vllm_server_train_options(cfg, "cpu") == {"partial": True, "servers": 2, "dtype": "float32",
                                                     "enforce_eager": False, "max_num_seqs": 8}


def test_running_servers_are_given_by_url():
    cfg = _cfg(sampler="vllm_server", servers=["http://127.0.0.1:8000", "http://127.0.0.1:8001"])
    assert vllm_server_train_options(cfg, "cpu") == {
        "partial": False, "urls": ["http://127.0.0.1:8000", "http://127.0.0.1:8001"]}
    one = _cfg(sampler="vllm_server", base_url="http://127.0.0.1:9000/v1")
    assert vllm_server_train_options(one, "cpu")["urls"] == ["http://127.0.0.1:9000/v1"]


@pytest.mark.parametrize(("rollout", "says"), [
    ({"sampler": "vllm_server", "servers": 0}, "rollout.servers: must be an integer >= 1 or a list of server URLs"),
    ({"sampler": "vllm_server", "servers": []}, "rollout.servers: must be an integer >= 1 or a list of server URLs"),
    ({"sampler": "vllm", "max_staleness": 1}, "a sampler that takes weights while it samples ('vllm_server'"),
    ({"sampler": "vllm", "workers": 2}, "an in-process sampler ('hf') or a server sampler ('vllm_server') with "
                                        "rollout.workers"),
    ({"sampler": "openai", "base_url": "http://127.0.0.1:9/v1", "frozen_policy_ok": True, "workers": 1},
     "rollout.sampler: must be an in-process sampler ('hf') or a server sampler"),
    ({"partial": "yes"}, "rollout.partial: must be true or false"),
    ({"servers": 2}, "rollout.servers: must be 1 (left out) unless sampler is a server sampler ('vllm_server')"),
    ({"sampler": "vllm", "partial": True}, "rollout.partial: must be false (left out) unless sampler is a server"),
    ({"sampler": "vllm_server", "push_on": "now"}, "rollout.push_on: must be null, 'schedule' or 'update'"),
    ({"sampler": "vllm_server", "partial": True, "push_on": "schedule"},
     "rollout.push_on: must be 'update' or null with partial: true"),
    ({"push_on": "update"}, "rollout.push_on: must be null (left out) unless sampler is a server sampler"),
])
def test_refusals_say_what_to_write(rollout, says):
    with pytest.raises(ConfigError) as err:
        _cfg(**rollout)
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("rollout", "scheduled"), [
    ({}, True),  # partial false: pushes follow the schedule by default
    ({"push_on": "schedule"}, True),
    ({"push_on": "update"}, False),
    ({"partial": True}, False),  # partial rollouts exist to take a push mid-request: clock-driven
])
def test_server_pushes_follow_the_schedule_unless_partial_or_asked(rollout, scheduled):
    from toolgym.training.orchestrator import pushes_on_schedule

    assert pushes_on_schedule(_cfg(sampler="vllm_server", max_staleness=1, **rollout).rollout) is scheduled
