"""How the trainer drives a separate rollout engine: engine arguments per device, and the order of sleep,
wake and weight pushes around an update (GPU sleep mode cannot run on this CPU: the engine below is a
recording stand-in for that fault-free GPU path, named as such; the real engine is exercised in
test_vllm_training.py)."""

from __future__ import annotations

import torch

from tests.training.tiny import tiny_lm
from toolgym.training.config import load_config
from toolgym.training.model.lora import apply_lora
from toolgym.training.sampling.policy_sync import (
    PolicySync,
    engine_sleeps,
    policy_weights,
    vllm_engine_kwargs,
)


def _cfg(**rollout):
    return load_config({"model": {"name_or_path": "demo", "device": "cpu"},
                        "rollout": {"sampler": "vllm", **rollout}})


def test_engine_arguments_per_device_and_overrides():
    cpu = vllm_engine_kwargs(_cfg(), "cpu")
    assert cpu["enforce_eager"] is True and cpu["dtype"] == "float32"
    assert "enable_sleep_mode" not in cpu and "gpu_memory_utilization" not in cpu
    gpu = vllm_engine_kwargs(_cfg(), "cuda:0")
    assert gpu["enforce_eager"] is False  # CUDA graphs on
    assert gpu["enable_sleep_mode"] is True and 0 < gpu["gpu_memory_utilization"] < 0.9
    bf16 = load_config({"model": {"name_or_path": "demo", "dtype": "bf16"}, "rollout": {"sampler": "vllm"}})
    assert vllm_engine_kwargs(bf16, "cuda")["dtype"] == "bfloat16"
    mine = vllm_engine_kwargs(_cfg(sampler_kwargs={"gpu_memory_utilization": 0.3, "enforce_eager": True}), "cuda")
    assert mine["gpu_memory_utilization"] == 0.3 and mine["enforce_eager"] is True
    assert not engine_sleeps(_cfg(), "cpu") and engine_sleeps(_cfg(), "cuda:1")
    assert not engine_sleeps(_cfg(vllm_sleep=False), "cuda") and engine_sleeps(_cfg(vllm_sleep=True), "cpu")
    assert not engine_sleeps(load_config({"model": {"name_or_path": "demo"}}), "cuda")  # hf: nothing to sleep


class RecordingEngine:
    """Stand-in for a vLLM engine in sleep mode on a GPU: records the calls the trainer makes."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.weights: dict[str, torch.Tensor] = {}

    def update_weights(self, sd):
        self.calls.append("update_weights")
        self.weights = {k: v.clone() for k, v in sd.items()}

    def sleep(self, level=1):
        self.calls.append(f"sleep({level})")

    def wake_up(self, tags=None):
        self.calls.append(f"wake_up({','.join(tags) if tags else 'all'})")

    def reset_prefix_cache(self):
        self.calls.append("reset_prefix_cache")


def test_sleep_wake_push_order_around_an_update():
    engine = RecordingEngine()
    sync = PolicySync(engine, tiny_lm(), sleep=True)
    sync.push()
    sync.before_update()
    sync.after_update()
    assert engine.calls == ["update_weights", "sleep(2)", "wake_up(weights)", "update_weights",
                            "wake_up(kv_cache)", "reset_prefix_cache"]
    assert sync.pushes == 2
    plain = RecordingEngine()
    s2 = PolicySync(plain, tiny_lm(), sleep=False)
    s2.before_update()
    s2.after_update()
    assert plain.calls == ["update_weights"]


def test_cuda_cache_is_emptied_before_a_sleeping_engine_wakes(monkeypatch):
    # No GPU here: torch.cuda.empty_cache is replaced by a recorder into the same call log as the recording
    # engine (a stand-in for the CUDA path), so the test sees the order of the trainer's calls, not memory.
    engine = RecordingEngine()
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: engine.calls.append("empty_cache"))
    sync = PolicySync(engine, tiny_lm(), sleep=True, device="cuda:0")
    sync.before_update()
    sync.after_update()
    assert engine.calls == ["sleep(2)", "empty_cache", "wake_up(weights)", "update_weights", "wake_up(kv_cache)",
                            "reset_prefix_cache"]
    cpu = RecordingEngine()
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: cpu.calls.append("empty_cache"))
    on_cpu = PolicySync(cpu, tiny_lm(), sleep=True, device="cpu")  # the CPU build: no CUDA cache to empty
    on_cpu.before_update()
    on_cpu.after_update()
    assert "empty_cache" not in cpu.calls


def test_pushed_weights_are_the_merged_lora_policy_under_hf_names():
    model = apply_lora(tiny_lm(seed=0), r=4, alpha=8, dropout=0.0, target_modules=["q_proj"])
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.fill_(0.1)
    engine = RecordingEngine()
    PolicySync(engine, model, sleep=False).push()
    plain = tiny_lm(seed=0)
    assert set(engine.weights) == set(plain.state_dict())
    assert set(policy_weights(model)) == set(plain.state_dict())
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(engine.weights[q], plain.state_dict()[q])  # the adapters' delta is in
    k = "model.layers.0.self_attn.k_proj.weight"
    assert torch.equal(engine.weights[k], plain.state_dict()[k])


def test_only_a_sampler_on_the_trainers_own_module_samples_in_place():
    # decides whether MOPD computes the trainer's log-probs for the behaviour gap (StepContext.separate_sampler)
    import copy

    from toolgym.agents.hf_sampler import HFSampler

    module = tiny_lm()
    own = PolicySync(HFSampler(module), module, sleep=False)
    assert not own.samples_elsewhere and not own.copies_weights
    copy_ = PolicySync(HFSampler(copy.deepcopy(module)), module, sleep=False)  # e.g. a Ray worker's replica
    assert copy_.samples_elsewhere and copy_.copies_weights
    assert PolicySync(RecordingEngine(), module, sleep=False).samples_elsewhere  # a separate engine
    ray = PolicySync(HFSampler(module), module, sleep=False, ray_rollouts=object())  # workers sample, hf evaluates
    assert ray.samples_elsewhere and not ray.copies_weights


def test_the_weight_transport_is_said_once_per_route():
    from toolgym.agents.weight_transport import decide

    class RoutedEngine(RecordingEngine):
        """Records pushes like RecordingEngine and reports a route per push, as VLLMSampler does."""

        routes = iter([decide(10, shm_free=None, disk_free=1 << 30), decide(10, shm_free=None, disk_free=1 << 30),
                       decide(10, shm_free=1 << 30, disk_free=1 << 30)])

        def update_weights(self, sd):
            super().update_weights(sd)
            self.weight_route = next(self.routes)

    said: list[str] = []
    sync = PolicySync(RoutedEngine(), tiny_lm(), sleep=False, say=said.append)
    for _ in range(3):
        sync.push()
    assert len(said) == 2 and "on disk" in said[0] and "/dev/shm" in said[1]  # disk, (disk again: quiet), shm
