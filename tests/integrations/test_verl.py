"""toolgym's losses in verl's policy-loss registry and toolgym's judge as verl's reward function (verl 0.9.1, CPU).

The losses are compared on one fixed batch (float32, a padded response mask with an empty row) with
``toolgym.training.policy_gradient.losses.policy_loss`` on the same tensors, and ``toolgym_grpo``/``toolgym_gspo`` also with verl's
own ``vanilla``/``gspo`` losses (an implementation independent of toolgym's). Tolerance: |Δ| ≤ 1e-6 · max(1, |loss|)
for values and 1e-6 (abs) + 1e-5 (rel) per gradient entry.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tests.requirements import need

os.environ.setdefault("HF_HUB_OFFLINE", "1")
B, T = 6, 9
LENGTHS = [9, 5, 9, 1, 7, 0]  # the last row has no response tokens: the seq-mean forms must skip it
ADV = [1.0, -0.5, 0.25, -1.5, 2.0, 0.7]
MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
ALL_MODES = [*MODES, "token-sum", "seq-mean-token-sum-norm"]
PRESETS = {"ctpo": ("cumulative", "ctpo"), "toolgym_grpo": ("token", "grpo"), "toolgym_gspo": ("gspo", "gspo")}
NOISE = {"ctpo": 0.1, "toolgym_grpo": 0.3, "toolgym_gspo": 3e-3}  # old-vs-new log-prob spread: some tokens clipped
# what verl's trainer puts into actor config.global_batch_info on one of 2 data-parallel ranks
GLOBAL = {"dp_size": 2, "batch_num_tokens": 70, "global_batch_size": 11, "loss_scale_factor": None}


@pytest.fixture(scope="module")
def integration():
    try:
        import verl.trainer.ppo.core_algos  # noqa: F401
    except ImportError as e:
        need(False, f"verl is not importable ({e}): run scripts/setup.sh (verl 0.9.1 --no-deps + tensordict, hydra-core)")
    import toolgym.integrations.verl as integration

    return integration


def _config(**kw):
    from verl.workers.config import ActorConfig, PolicyLossConfig

    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=2,
                       policy_loss=PolicyLossConfig(loss_mode="ctpo"), **kw)


def _batch(noise: float, seed: int = 0):
    """verl's shapes: bool response mask, [B, T] advantages (a group score broadcast over the response)."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.arange(T) < torch.tensor(LENGTHS)[:, None]
    logp = (-(torch.rand(B, T, generator=g) * 3 + 0.05)).requires_grad_()
    old = logp.detach() + noise * torch.randn(B, T, generator=g)
    if noise:
        old[3, 0] = logp.detach()[3, 0] - 1.5  # ratio e^1.5 > 3 where A < 0: the dual clip binds
    adv = torch.tensor(ADV)[:, None] * mask
    return old, logp, adv, mask


def _close(got: torch.Tensor, want: torch.Tensor, logp: torch.Tensor) -> None:
    a, b = float(got.detach()), float(want.detach())
    assert abs(a - b) <= 1e-6 * max(1.0, abs(b)), (a, b)
    (g_got,) = torch.autograd.grad(got, logp, retain_graph=True)
    (g_want,) = torch.autograd.grad(want, logp, retain_graph=True)
    assert torch.allclose(g_got, g_want, atol=1e-6, rtol=1e-5)
    assert g_got.abs().sum() > 0


def test_losses_are_in_verls_registry(integration) -> None:
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, get_policy_loss_fn

    for name in PRESETS:
        assert name in POLICY_LOSS_REGISTRY
        assert get_policy_loss_fn(name) is integration.LOSSES[name]
    assert get_policy_loss_fn("gspo") is not integration.LOSSES["toolgym_gspo"]  # verl's own gspo is left alone
    with pytest.raises(ValueError, match="^verl already has a policy loss named 'vanilla'; choose another name$"):
        integration.register_loss("vanilla", "token", None)


@pytest.mark.slow
def test_importing_verl_registers_ctpo_through_the_plugin_entry_point() -> None:
    """What verl's workers rely on: a bare `import verl` loads toolgym's `verl.plugins` entry point."""
    code = ("import sys, verl\nfrom verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY as R\n"
            "print(sorted(k for k in R if 'ctpo' in k or 'toolgym' in k), 'toolgym.integrations.verl' in sys.modules)")
    try:
        import verl  # noqa: F401
    except ImportError as e:
        need(False, f"verl is not importable ({e})")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "auto"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-2] == "['ctpo', 'toolgym_grpo', 'toolgym_gspo'] True"


@pytest.mark.parametrize("name", list(PRESETS))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dp", [False, True], ids=["local", "global-batch"])
def test_loss_equals_policy_loss(integration, name: str, mode: str, dp: bool) -> None:
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    from toolgym.training.policy_gradient.losses import ClipConfig, policy_loss

    ratio, preset = PRESETS[name]
    clip = getattr(ClipConfig, preset)()
    old, logp, adv, mask = _batch(noise=NOISE[name])
    config = _config()
    counts = {}
    if dp:
        config.global_batch_info.update(GLOBAL)
        key = "global_token_count" if mode == "token-mean" else "global_seq_count"
        counts[key] = GLOBAL["batch_num_tokens" if mode == "token-mean" else "global_batch_size"] / GLOBAL["dp_size"]
    got, metrics = get_policy_loss_fn(name)(old_log_prob=old, log_prob=logp, advantages=adv, response_mask=mask,
                                            loss_agg_mode=mode, config=config, rollout_is_weights=None)
    want, m = policy_loss(logp, old, adv, mask, ratio=ratio, clip=clip, agg=mode, **counts)
    _close(got, want, logp)
    assert metrics["actor/pg_clipfrac_lower"] == m["clip_frac_dual"]
    assert metrics["actor/ppo_kl"] == pytest.approx(m["approx_kl"])
    if name != "toolgym_gspo":  # the clip takes part in the comparison
        assert 0 < metrics["actor/pg_clipfrac"] < 1


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_verls_ppo_loss_runs_ctpo_from_the_config(integration, mode: str) -> None:
    """verl's engine-side ``ppo_loss`` (what its FSDP/Megatron workers call) with ``policy_loss.loss_mode=ctpo``: the
    model's flat (unpadded) log-probs are cut into responses by verl, the counts come from the batch's metadata."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss

    from toolgym.training.policy_gradient.losses import ClipConfig, policy_loss

    old, logp, adv, mask = _batch(noise=NOISE["ctpo"])
    prompt = 3
    pieces = []  # per sequence, prompt + response tokens; the log-prob of response token j sits at prompt - 1 + j
    for i, n in enumerate(LENGTHS):
        pieces += [torch.zeros(prompt - 1), logp[i, :n], torch.zeros(1)]
    attention = torch.cat([torch.ones(B, prompt, dtype=torch.long), mask.long()], 1)
    data = tu.get_tensordict({"prompts": torch.ones(B, prompt, dtype=torch.long), "attention_mask": attention,
                              "responses": torch.ones(B, T, dtype=torch.long), "response_mask": mask.long(),
                              "old_log_probs": old, "advantages": adv},
                             {k: GLOBAL[k] for k in ("dp_size", "batch_num_tokens", "global_batch_size")})
    got, metrics = ppo_loss(_config(loss_agg_mode=mode), {"log_probs": torch.cat(pieces)}, data)
    count = {"global_token_count": 35} if mode == "token-mean" else {"global_seq_count": 5.5}  # per rank of 2
    want, m = policy_loss(logp, old, adv, mask, ratio="cumulative", clip=ClipConfig.ctpo(), agg=mode, **count)
    _close(got, want, logp)
    assert metrics["actor/pg_clipfrac_lower"].values == [m["clip_frac_dual"]] and "toolgym/ratio_mean" in metrics


@pytest.mark.parametrize("dp", [False, True], ids=["local", "global-batch"])
def test_token_sum_modes_scale_the_token_and_sequence_means(integration, dp: bool) -> None:
    """verl's token-sum = Σ u (× dp_size); seq-mean-token-sum-norm = seq-mean-token-sum / loss_scale_factor."""
    fn = integration.LOSSES["ctpo"]
    old, logp, adv, mask = _batch(noise=0.1)
    n_tok = sum(LENGTHS)
    for scale in (None, 4):
        config = _config(loss_scale_factor=scale)
        if dp:
            config.global_batch_info.update({**GLOBAL, "loss_scale_factor": scale})
        d = GLOBAL["dp_size"] if dp else 1
        mean, _ = fn(old, logp, adv, mask, "token-mean", _config())
        total, _ = fn(old, logp, adv, mask, "token-sum", config)
        _close(total, mean * n_tok * d, logp)
        seq_sum, _ = fn(old, logp, adv, mask, "seq-mean-token-sum", config)
        norm, _ = fn(old, logp, adv, mask, "seq-mean-token-sum-norm", config)
        _close(norm, seq_sum / (T if scale is None else scale), logp)


@pytest.mark.parametrize("ours,theirs", [("toolgym_grpo", "vanilla"), ("toolgym_gspo", "gspo")])
@pytest.mark.parametrize("mode", ALL_MODES)
@pytest.mark.parametrize("dp", [False, True], ids=["local", "global-batch"])
def test_grpo_and_gspo_equal_verls_own_losses(integration, ours: str, theirs: str, mode: str, dp: bool) -> None:
    """Same clip settings as toolgym's presets: [0.8, 1.2] with dual clip 3; GSPO [1-3e-4, 1+4e-4]."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    lo, hi = (0.2, 0.2) if ours == "toolgym_grpo" else (3e-4, 4e-4)
    config = _config(clip_ratio=lo, clip_ratio_low=lo, clip_ratio_high=hi, clip_ratio_c=3.0, loss_agg_mode=mode)
    if dp:
        config.global_batch_info.update(GLOBAL)
    old, logp, adv, mask = _batch(noise=NOISE[ours], seed=1)
    args = {"old_log_prob": old, "log_prob": logp, "advantages": adv, "response_mask": mask, "loss_agg_mode": mode,
            "config": config}
    got, ours_m = get_policy_loss_fn(ours)(**args)
    want, theirs_m = get_policy_loss_fn(theirs)(**args)
    _close(got, want, logp)
    assert ours_m["actor/pg_clipfrac"] == pytest.approx(theirs_m["actor/pg_clipfrac"], abs=1e-6)
    assert 0 < ours_m["actor/pg_clipfrac"] < 1
    if ours == "toolgym_grpo":
        assert ours_m["actor/pg_clipfrac_lower"] == pytest.approx(theirs_m["actor/pg_clipfrac_lower"], abs=1e-6)
        assert ours_m["actor/pg_clipfrac_lower"] > 0  # the dual clip takes part too


def test_on_policy_ctpo_is_minus_the_mean_advantage(integration) -> None:
    """Ratio 1 everywhere: token-mean = -Σ A_i n_i / Σ n_i and seq-mean = -mean of A over non-empty rows, by hand."""
    _, logp, adv, mask = _batch(noise=0.0)
    old = logp.detach().clone()
    n = LENGTHS
    got, _ = integration.LOSSES["ctpo"](old, logp, adv, mask, "token-mean", _config())
    assert float(got.detach()) == pytest.approx(-sum(a * k for a, k in zip(ADV, n, strict=True)) / sum(n), abs=1e-6)
    got, _ = integration.LOSSES["ctpo"](old, logp, adv, mask, "seq-mean-token-mean", _config())
    assert float(got.detach()) == pytest.approx(-sum(ADV[:5]) / 5, abs=1e-6)


def test_sequence_rollout_weights_become_the_seq_weight(integration) -> None:
    from toolgym.training.policy_gradient.losses import ClipConfig, policy_loss

    old, logp, adv, mask = _batch(noise=0.1)
    w = torch.tensor([0.5, 1.0, 2.0, 1.5, 0.8, 1.0])
    got, _ = integration.LOSSES["ctpo"](old, logp, adv, mask, "token-mean", _config(),
                                        rollout_is_weights=w[:, None].expand(B, T) * mask)  # verl zeroes padding
    want, _ = policy_loss(logp, old, adv, mask, ratio="cumulative", clip=ClipConfig.ctpo(), seq_weight=w)
    _close(got, want, logp)
    token_level = torch.rand(B, T, generator=torch.Generator().manual_seed(3)) + 0.5
    with pytest.raises(ValueError, match=r"one rollout-correction weight per sequence; set algorithm\.rollout_correction"):
        integration.LOSSES["ctpo"](old, logp, adv, mask, "token-mean", _config(), rollout_is_weights=token_level)


def test_bad_aggregation_is_one_clear_line(integration) -> None:
    old, logp, adv, mask = _batch(noise=0.1)
    with pytest.raises(ValueError, match=r"^loss_agg_mode must be one of 'token-mean', .*; got 'mean'$"):
        integration.LOSSES["ctpo"](old, logp, adv, mask, "mean", _config())
    config = _config()
    config.global_batch_info.update(dp_size=2, batch_num_tokens=None, global_batch_size=None)
    with pytest.raises(ValueError, match="^verl's global_batch_info needs batch_num_tokens when dp_size > 1$"):
        integration.LOSSES["ctpo"](old, logp, adv, mask, "token-mean", config)


# ---------------------------------------------------------------- reward function

ADD = {"inputs": ["1 2\n", "10 -4\n", "0 0\n"], "outputs": ["3\n", "6\n", "0\n"]}


def _reward_fn(integration):
    """compute_score as verl's trainer loads it: reward.custom_reward_function with reward_kwargs."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    cfg = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": "pkg://toolgym.integrations.verl", "name": "compute_score",
        "reward_kwargs": {"sandbox_backend": "docker"}}}})
    return get_custom_reward_fn(cfg)


@pytest.fixture(scope="module")
def docker_reward(integration):
    from tests.sandbox.conftest import require_backend

    require_backend("docker")
    pool = os.environ.get("TOOLGYM_POOL_SIZE")
    os.environ["TOOLGYM_POOL_SIZE"] = "1"  # the pool compute_score opens on first use: one container is enough here
    try:
        yield _reward_fn(integration)
    finally:
        os.environ.pop("TOOLGYM_POOL_SIZE") if pool is None else os.environ.update(TOOLGYM_POOL_SIZE=pool)
        sb = integration._SANDBOXES.pop("docker", None)
        if sb is not None:
            sb.close()


@pytest.mark.slow
@pytest.mark.docker
def test_code_reward_judges_in_the_docker_sandbox(integration, docker_reward) -> None:
    import json

    right = "Here you go:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```\n"
    wrong = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"
    assert docker_reward(data_source="toy", solution_str=right, ground_truth=json.dumps(ADD), extra_info={}) == 1.0
    assert docker_reward(data_source="toy", solution_str=wrong, ground_truth=json.dumps(ADD), extra_info={}) == 0.0
    # a - b passes only "0 0": partial credit gives 1/3
    assert docker_reward(data_source="toy", solution_str=wrong, ground_truth=ADD, extra_info=None,
                         partial_credit=True) == pytest.approx(1 / 3)
    fn_tests = {"tests": [{"code": "assert add(2, 3) == 5"}, {"call": "add", "args": [-1, 1], "expected": 0}]}
    good_fn = "```python\ndef add(a, b):\n    return a + b\n```"
    assert docker_reward(data_source="mbpp", solution_str=good_fn, ground_truth=fn_tests, extra_info={}) == 1.0
    assert docker_reward(data_source="mbpp", solution_str=good_fn.replace("a + b", "a * b"), ground_truth=fn_tests,
                         extra_info={}) == 0.0
    assert integration._SANDBOXES["docker"].backend == "docker"  # the judge ran in the Docker sandbox


def test_math_reward_uses_math_equal(integration) -> None:
    reward = _reward_fn(integration)
    assert reward(data_source="gsm8k", solution_str="Half of it: \\boxed{\\frac{1}{2}}", ground_truth="0.5") == 1.0
    assert reward(data_source="gsm8k", solution_str="The answer is 72.", ground_truth="72", extra_info={}) == 1.0
    assert reward(data_source="gsm8k", solution_str="\\boxed{71}", ground_truth="72", extra_info={}) == 0.0


@pytest.mark.device_standin
@pytest.mark.parametrize("mode", ALL_MODES)
def test_loss_on_the_device_the_way_verl_calls_it(integration, device: str, mode: str) -> None:
    """The registry call verl's workers make, with the batch on the device (CUDA, else the stand-in of
    tests/device_standin.py) and verl's global counts as Python ints: before the fix the int count became a CPU
    coefficient vector multiplied into device tensors, and the metrics called ``.numpy()`` on a device tensor."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    old, logp, adv, mask = _batch(noise=NOISE["ctpo"])
    config = _config()
    config.global_batch_info.update(GLOBAL)
    want, m_cpu = get_policy_loss_fn("ctpo")(old_log_prob=old, log_prob=logp, advantages=adv, response_mask=mask,
                                              loss_agg_mode=mode, config=config, rollout_is_weights=None)
    x = logp.detach().to(device).requires_grad_(True)
    got, m_dev = get_policy_loss_fn("ctpo")(old_log_prob=old.to(device), log_prob=x, advantages=adv.to(device),
                                             response_mask=mask.to(device), loss_agg_mode=mode, config=config,
                                             rollout_is_weights=None)
    got.backward()
    (g_cpu,) = torch.autograd.grad(want, logp)
    assert got.device.type == torch.device(device).type
    assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-6, abs=1e-7)
    assert torch.allclose(x.grad.cpu(), g_cpu, atol=1e-6, rtol=1e-5)
    assert m_dev == pytest.approx(m_cpu) and all(isinstance(v, float) for v in m_dev.values())


@pytest.mark.device_standin
def test_verls_ppo_loss_on_the_device(integration, device: str) -> None:
    """verl's engine-side ``ppo_loss`` with its tensordict on the device (what the FSDP workers call)."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss

    old, logp, adv, mask = _batch(noise=NOISE["ctpo"])
    prompt = 3
    pieces = []
    for i, n in enumerate(LENGTHS):
        pieces += [torch.zeros(prompt - 1), logp[i, :n], torch.zeros(1)]
    attention = torch.cat([torch.ones(B, prompt, dtype=torch.long), mask.long()], 1)
    fields = {"prompts": torch.ones(B, prompt, dtype=torch.long), "attention_mask": attention,
              "responses": torch.ones(B, T, dtype=torch.long), "response_mask": mask.long(), "old_log_probs": old,
              "advantages": adv}
    meta = {k: GLOBAL[k] for k in ("dp_size", "batch_num_tokens", "global_batch_size")}
    flat = torch.cat(pieces).detach()
    want, _ = ppo_loss(_config(), {"log_probs": flat}, tu.get_tensordict(fields, meta))
    x = flat.to(device).requires_grad_(True)
    data = tu.get_tensordict({k: v.to(device) for k, v in fields.items()}, meta)
    got, metrics = ppo_loss(_config(), {"log_probs": x}, data)
    assert got.device.type == torch.device(device).type
    assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-6, abs=1e-7)
    assert "toolgym/ratio_mean" in metrics
