"""TRL's GRPOTrainer with toolgym's loss and a toolgym environment's reward (SmolLM2-135M, CPU).

One trainer (module fixture) serves all tests: constructing it loads the model once."""

from __future__ import annotations

import json
import os

import pytest
import torch

from tests.requirements import need, need_module

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ENV = "toolgym/Arith-v0"
ENV_KW = {"min_digits": 1, "max_digits": 1, "ops": "+", "system_prompt": "Reply with one line: Answer: <number>"}
# training: four-option science questions, so a group of short answers from a 135M model has reward spread
QA = "toolgym/ScienceQA-v0"
QA_KW = {"dataset": "arc_easy", "system_prompt": "Reply with the letter of the correct option only."}


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory):
    try:
        import trl  # noqa: F401
    except ImportError:
        need(False, "trl is not installed (pip install -e '.[trl]')")
    from toolgym.assets import asset_path
    from toolgym.errors import AssetError

    env, env_kw = QA, QA_KW
    if os.environ.get("TOOLGYM_CHECK_TINY_MODEL"):
        # the device check (scripts/gpu_check.py): a 538 MB asset and the ARC data cannot travel to the GPU
        # machine; a tiny random Qwen2 it built and generated Arith tasks stand in for them
        model_dir, env, env_kw = os.environ["TOOLGYM_CHECK_TINY_MODEL"], ENV, {**ENV_KW, "parser": "none"}
    else:
        try:
            model_dir = asset_path("smollm2-135m-instruct")
        except AssetError:
            need(False, "the smollm2-135m-instruct asset is missing: run `toolgym assets fetch smollm2-135m-instruct`")
    from trl import GRPOConfig

    from toolgym.integrations.trl import ToolgymGRPOTrainer, env_dataset, env_reward

    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("trl")), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=4, max_steps=2, learning_rate=1e-4, logging_steps=1, report_to=[],
                      use_cpu=True, save_strategy="no", seed=0, bf16=False, gradient_checkpointing=False)
    return ToolgymGRPOTrainer(str(model_dir), algorithm="ctpo", args=args, reward_funcs=env_reward(env, **env_kw),
                              train_dataset=env_dataset(env, 8, **env_kw))


def test_env_reward_is_the_environments_verdict() -> None:
    need_module("datasets")
    from toolgym.integrations.trl import env_dataset, env_reward

    ds = env_dataset(ENV, 2, **ENV_KW)
    reward = env_reward(ENV, **ENV_KW)
    tasks = [json.loads(t) for t in ds["task"]]
    a, b = (eval(t["metadata"]["expression"]) for t in tasks)  # one-digit sums, computed here independently
    completions = [[{"role": "assistant", "content": f"Answer: {a}"}], [{"role": "assistant", "content": f"Answer: {b + 1}"}]]
    assert reward(ds["prompt"], completions, task=ds["task"]) == [1.0, 0.0]
    assert reward(ds["prompt"], [f"Answer: {a}", "no idea"], task=ds["task"]) == [1.0, 0.0]  # plain-text completions
    assert ds["prompt"][0][-1]["content"] == tasks[0]["prompt"][-1]["content"]
    with pytest.raises(ValueError, match="no 'task' column"):
        reward(ds["prompt"], completions)


@pytest.mark.slow
def test_two_trl_steps_train_with_the_toolgym_loss(trainer) -> None:
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "layers.0." in n}
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert trainer.state.global_step == 2 and len(logs) == 2
    for h in logs:  # the loss ran through toolgym (its metrics) and the reward came from the env
        assert {"toolgym/clip_frac", "toolgym/ratio_mean", "rewards/toolgym_scienceqa_v0/mean"} <= set(h)
        assert 0.0 <= h["rewards/toolgym_scienceqa_v0/mean"] <= 1.0
    assert any(h["reward_std"] > 0 for h in logs), "no reward spread in either step: nothing to learn from"
    moved = max(float((p.detach() - before[n]).abs().max()) for n, p in trainer.model.named_parameters() if n in before)
    assert moved > 0


def _fixed_batch(trainer):
    tok = trainer.processing_class
    texts = ["What is 2 + 3?", "Hi", "Add four and five please", "7 + 1 = ?"]
    tok.padding_side = "left"
    prompt = tok(texts, return_tensors="pt", padding=True)
    g = torch.Generator().manual_seed(0)
    completion_ids = torch.randint(100, 5000, (4, 7), generator=g)
    completion_mask = torch.ones(4, 7, dtype=torch.long)
    completion_mask[1, 4:] = 0
    completion_mask[3, 2:] = 0
    return {"prompt_ids": prompt["input_ids"], "prompt_mask": prompt["attention_mask"], "completion_ids": completion_ids,
            "completion_mask": completion_mask, "advantages": torch.tensor([1.0, -0.5, 0.25, -1.5]),
            "num_items_in_batch": completion_mask.sum()}


def _plain_logps(model, inputs) -> torch.Tensor:
    """Completion-token log-probs with a plain forward pass (what the loss should see)."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    t = inputs["completion_ids"].shape[1]
    logits = model(input_ids=ids, attention_mask=attn).logits[:, -t - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("algorithm", ["ctpo", "grpo", "gspo"])
def test_trl_loss_equals_policy_loss_on_a_fixed_batch(trainer, algorithm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from toolgym.integrations.trl import ToolgymLoss
    from toolgym.training.policy_gradient.losses import policy_loss

    model = trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # what the HF training loop sets for one micro-batch per step
    trainer.toolgym_loss = spec = ToolgymLoss.from_algorithm(algorithm)
    inputs = _fixed_batch(trainer)
    with torch.no_grad():
        ref = _plain_logps(model, inputs)
    # behaviour log-probs off by ~30%, so the clip is active for CTPO and GRPO
    g = torch.Generator().manual_seed(1)
    inputs["old_per_token_logps"] = ref + 0.3 * torch.randn(ref.shape, generator=g)
    seen = []  # the policy log-probs TRL computed inside compute_loss
    original = trainer._get_per_token_logps_and_entropies

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        seen.append(out[0])
        return out

    monkeypatch.setattr(trainer, "_get_per_token_logps_and_entropies", spy)
    got = trainer.compute_loss(model, inputs)
    (logp,) = seen
    m = inputs["completion_mask"].bool()
    assert torch.allclose(logp.detach()[m], ref[m], atol=1e-4)  # TRL's log-probs are the policy's
    want, metrics = policy_loss(logp, inputs["old_per_token_logps"], inputs["advantages"], inputs["completion_mask"],
                                ratio=spec.ratio, clip=spec.clip, agg=spec.agg)
    assert abs(float(got) - float(want)) <= 1e-6
    (g_got,) = torch.autograd.grad(got, logp, retain_graph=True)
    (g_want,) = torch.autograd.grad(want, logp)
    assert torch.allclose(g_got, g_want, atol=1e-7, rtol=1e-6)
    if algorithm != "gspo":
        assert metrics["clip_frac"] > 0  # the clip took part in the comparison


def test_on_policy_token_mean_is_minus_the_token_weighted_advantage(trainer) -> None:
    """Ratio 1 everywhere (TRL omits old log-probs on-policy): loss = -Σ A_i n_i / Σ n_i, computed by hand."""
    from toolgym.integrations.trl import ToolgymLoss

    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    trainer.toolgym_loss = ToolgymLoss.from_algorithm("grpo")
    inputs = _fixed_batch(trainer)
    with torch.no_grad():
        got = float(trainer.compute_loss(trainer.model, inputs))
    n = [7, 4, 7, 2]
    adv = [1.0, -0.5, 0.25, -1.5]
    assert got == pytest.approx(-sum(a * k for a, k in zip(adv, n, strict=True)) / sum(n), abs=1e-6)


def test_unknown_algorithm_is_one_clear_line() -> None:
    need_module("trl")
    from toolgym.integrations.trl import ToolgymLoss

    with pytest.raises(ValueError, match=r"^algorithm must be one of 'ctpo', 'grpo', 'gspo' .*got 'ppo'$"):
        ToolgymLoss.from_algorithm("ppo")


def test_env_factory_runs_toolgym_tools_and_scores_the_episode() -> None:
    """Multi-turn adapter: TRL sees each toolgym tool as a typed, documented method; the rubric scores the episode."""
    need_module("trl")
    from transformers.utils import get_json_schema

    from toolgym.integrations.trl import env_dataset, env_factory

    kw = {"min_digits": 2, "max_digits": 3, "ops": "*", "sandbox": "local"}
    env = env_factory(ENV, **kw)()
    schema = get_json_schema(env.python)  # how TRL renders the tool into the prompt
    assert schema["function"]["name"] == "python"
    assert schema["function"]["parameters"]["required"] == ["code"]
    tasks = env_dataset(ENV, 2, single_turn=False, **kw)["task"]
    expr = json.loads(tasks[0])["metadata"]["expression"]
    try:
        env.reset(task=tasks[0])
        out = env.python(code=f"print({expr})")
        value = eval(expr)  # two small integers multiplied, computed here independently
        assert str(value) in out
        assert env._score(f"Answer: {value}") == 1.0
        env.reset(task=tasks[0])
        assert env._score(f"Answer: {value + 1}") == 0.0
    finally:
        env.env.close()


def test_each_env_factory_rollout_is_an_episode_of_its_task() -> None:
    """Round-8 red team: TRL's rollouts called toolgym tools outside any episode, so with one shared sandbox two
    rollouts of a task could share a sandbox lifetime (toolgym.sandbox.tenancy). Each TRL environment is now
    an episode of its row's task: one key per task, one tenant per rollout, for tool calls and scoring."""
    need_module("trl")
    from toolgym.integrations.trl import env_dataset, env_factory
    from toolgym.sandbox import tenancy

    kw = {"min_digits": 1, "max_digits": 1, "ops": "+", "sandbox": "local"}
    factory = env_factory(ENV, **kw)
    tasks = env_dataset(ENV, 2, single_turn=False, **kw)["task"]
    seen = []
    envs = [factory() for _ in range(3)]
    try:
        for env, task in zip(envs, [tasks[0], tasks[0], tasks[1]], strict=True):
            tool = env.env.unwrapped.tools["python"]
            plain = tool.acall

            async def spy(arguments, ctx, plain=plain):
                seen.append(tenancy.current())
                return await plain(arguments, ctx)

            tool.acall = spy
            env.reset(task=task)
            assert "2" in env.python(code="print(1 + 1)")
        assert len(seen) == 3 and all(ep is not None for ep in seen)
        assert seen[0].keys == seen[1].keys != seen[2].keys  # one key per task
        assert len({ep.tenant for ep in seen}) == 3  # one tenant per rollout
        assert tenancy.current() is None
    finally:
        for env in envs:
            env.env.close()


def test_trl_takes_env_factory_and_offers_only_the_envs_tools(trainer, tmp_path) -> None:
    """TRL probes the environment class and offers its public methods as tools: exactly toolgym's, renderable."""
    from pathlib import Path

    import trl
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    from toolgym.integrations.trl import ToolgymGRPOTrainer, env_dataset, env_factory, env_reward

    tok = AutoTokenizer.from_pretrained(trainer.processing_class.name_or_path)
    # SmolLM2's own template drops tool calls; TRL ships a ChatML one that renders them (same special tokens)
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    kw = {"min_digits": 2, "max_digits": 2, "ops": "*", "sandbox": "local"}
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2, max_steps=1,
                      report_to=[], use_cpu=True, save_strategy="no", bf16=False, gradient_checkpointing=False)
    mt = ToolgymGRPOTrainer(trainer.model, processing_class=tok, algorithm="ctpo", args=args,
                            reward_funcs=env_reward(ENV, **kw), environment_factory=env_factory(ENV, **kw),
                            train_dataset=env_dataset(ENV, 2, single_turn=False, **kw))
    assert [t.__name__ for t in mt.tools] == ["python"]
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tools=mt.tools, tokenize=False)
    assert '"name": "python"' in text and "code" in text


@pytest.mark.slow
@pytest.mark.device_standin
@pytest.mark.parametrize("algorithm", ["ctpo", "gspo"])
def test_trl_compute_loss_on_the_device(trainer, device: str, algorithm: str) -> None:
    """``_compute_loss`` through ``ToolgymGRPOTrainer`` with the model and TRL's batch on the device (CUDA, else the
    stand-in of tests/device_standin.py): it runs, and gives the CPU's loss and gradient."""
    import copy

    from toolgym.integrations.trl import ToolgymLoss

    trainer.model.train()  # the loss reads the trainer's mode (train: metrics under "train")
    trainer.current_gradient_accumulation_steps = 1
    trainer.toolgym_loss = ToolgymLoss.from_algorithm(algorithm)
    inputs = _fixed_batch(trainer)
    with torch.no_grad():
        ref = _plain_logps(trainer.model, inputs)
    g = torch.Generator().manual_seed(2)
    inputs["old_per_token_logps"] = ref + 0.3 * torch.randn(ref.shape, generator=g)
    cpu_model = copy.deepcopy(trainer.model).train()
    want = trainer.compute_loss(cpu_model, inputs)
    want.backward()
    dev_model = copy.deepcopy(trainer.model).to(device).train()
    got = trainer.compute_loss(dev_model, {k: v.to(device) for k, v in inputs.items()})
    got.backward()
    assert got.device.type == torch.device(device).type
    assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-4, abs=1e-6)
    name, p_cpu = next((n, p) for n, p in cpu_model.named_parameters() if "layers.0.self_attn.q_proj.weight" in n)
    p_dev = dict(dev_model.named_parameters())[name]
    assert torch.allclose(p_dev.grad.cpu(), p_cpu.grad, rtol=1e-3, atol=1e-6)
    trainer.log({})  # the device metrics are read once here, as numbers
    assert isinstance(trainer.state.log_history[-1].get("toolgym/clip_frac"), float)


def test_trl_nan_sampling_logprob_gets_no_correction_and_training_goes_on(trainer, monkeypatch) -> None:
    """vLLM gives no log-prob for a token now and then (NaN). TRL's rule: no correction for that token. The
    weight the loss uses is the one TRL computed (``importance_sampling_ratio``), so one NaN no longer raises.
    The expected loss is ``policy_loss`` on the very log-probs TRL computed inside the call (no second forward)."""
    from toolgym.integrations.trl import ToolgymLoss
    from toolgym.training.policy_gradient.losses import policy_loss

    trainer.current_gradient_accumulation_steps = 1
    trainer.toolgym_loss = spec = ToolgymLoss.from_algorithm("ctpo")
    monkeypatch.setattr(trainer, "use_vllm", True)
    monkeypatch.setattr(trainer, "vllm_importance_sampling_correction", True)
    inputs = _fixed_batch(trainer)
    with torch.no_grad():
        ref = _plain_logps(trainer.model, inputs)
    sampling = ref.clone() - 0.05
    sampling[0, 3] = float("nan")
    inputs["old_per_token_logps"] = ref
    inputs["sampling_per_token_logps"] = sampling
    # TRL's sequence_truncate weight, written out here: NaN differences count as 0, then exp(sum), clipped at 3
    m = inputs["completion_mask"].float()
    diff = torch.where(torch.isnan(sampling), 0.0, (ref - sampling) * m)
    weight = diff.sum(-1, keepdim=True).exp().clamp(max=3.0)
    seen = []
    original = trainer._get_per_token_logps_and_entropies

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        seen.append(out[0].detach())
        return out

    monkeypatch.setattr(trainer, "_get_per_token_logps_and_entropies", spy)
    inputs["importance_sampling_ratio"] = weight
    got = trainer.compute_loss(trainer.model.train(), inputs)
    assert torch.isfinite(got)
    logp = seen[-1]
    want, _ = policy_loss(logp, ref, inputs["advantages"], inputs["completion_mask"], ratio=spec.ratio, clip=spec.clip,
                          agg=spec.agg, seq_weight=weight[:, 0])
    assert float(got) == pytest.approx(float(want), rel=1e-6, abs=1e-7)
    # token modes: the per-token weight scales each token's term
    tok_w = diff.exp().clamp(max=3.0)
    inputs["importance_sampling_ratio"] = tok_w
    got_tok = trainer.compute_loss(trainer.model, inputs)
    want_tok, _ = policy_loss(seen[-1], ref, inputs["advantages"].unsqueeze(-1) * tok_w, inputs["completion_mask"],
                              ratio=spec.ratio, clip=spec.clip, agg=spec.agg)
    assert float(got_tok) == pytest.approx(float(want_tok), rel=1e-6, abs=1e-7)


def test_trl_settings_the_loss_cannot_honour_are_refused_and_ratio_one_is_said(trainer, tmp_path, caplog) -> None:
    from trl import GRPOConfig

    from toolgym.integrations.trl import ToolgymGRPOTrainer, env_dataset, env_reward, ratio_is_one

    assert ratio_is_one(1, 1, 1) and ratio_is_one(4, 2, 2) and not ratio_is_one(1, 1, 2) and not ratio_is_one(2, 4, 1)
    base = dict(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2, max_completion_length=4,
                max_steps=1, report_to=[], use_cpu=True, save_strategy="no", bf16=False)
    data = {"reward_funcs": env_reward(QA, **QA_KW), "train_dataset": env_dataset(QA, 2, **QA_KW)}
    with pytest.raises(ValueError, match=r"^GRPOConfig.importance_sampling_level='sequence' chooses TRL's ratio"):
        ToolgymGRPOTrainer(trainer.model, algorithm="ctpo", args=GRPOConfig(**base, importance_sampling_level="sequence"),
                           processing_class=trainer.processing_class, **data)
    caplog.clear()
    with caplog.at_level("WARNING", logger="toolgym.integrations.trl"):
        ToolgymGRPOTrainer(trainer.model, algorithm="ctpo", args=GRPOConfig(**base),
                           processing_class=trainer.processing_class, **data)
    assert any("the ratio is exactly 1" in r.message for r in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING", logger="toolgym.integrations.trl"):
        ToolgymGRPOTrainer(trainer.model, algorithm="ctpo", args=GRPOConfig(**base, num_iterations=2),
                           processing_class=trainer.processing_class, **data)
    assert not any("the ratio is exactly 1" in r.message for r in caplog.records)
