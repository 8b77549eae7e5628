"""Where a Ray rollout worker samples: on the GPU share it asked Ray for, else on the CPU."""

from __future__ import annotations

import torch

from toolgym.distributed.driver import gpu_share
from toolgym.distributed.worker import RolloutWorker
from toolgym.training.model.demo import build_demo


def test_each_worker_asks_for_an_equal_share_of_the_cluster_gpus_at_most_one():
    assert gpu_share(0, 4) == 0.0  # a CPU-only cluster: no GPU request, or the actors would never be placed
    assert gpu_share(1, 4) == 0.25
    assert gpu_share(2, 2) == 1.0
    assert gpu_share(8, 2) == 1.0


def test_a_worker_samples_on_the_device_its_node_offers_unless_told_otherwise():
    corpus = ["Call the work tool.", "Job 3: run the workload 2 times."] * 20
    model, tok = build_demo(corpus, None, vocab_size=300, layers=1, hidden=32, heads=2, intermediate=64,
                            max_positions=64, seed=0)
    weights = model.state_dict()
    here = "cuda" if torch.cuda.is_available() else "cpu"
    w = RolloutWorker(0, model.config, tok, weights, 0, sandbox=None)
    assert str(w.sampler.device).split(":")[0] == here
    assert str(next(w.sampler.model.parameters()).device).split(":")[0] == here
    told = RolloutWorker(0, model.config, tok, weights, 0, sandbox=None,
                         sampler_kwargs={"device": "cpu", "autocast": "bf16"})
    assert told.sampler.device == "cpu" and told.sampler.autocast == "bf16"
