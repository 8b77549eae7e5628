"""Config of the ``vllm_server`` sampler: what ``rollout.servers`` and ``rollout.partial`` accept, the pipeline
it allows without workers, and the options the trainer builds it with."""

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
])
def test_refusals_say_what_to_write(rollout, says):
    with pytest.raises(ConfigError) as err:
        _cfg(**rollout)
    assert says in str(err.value) and "\n" not in str(err.value)
