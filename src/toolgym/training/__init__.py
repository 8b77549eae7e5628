"""toolgym.training: the RL trainer, grouped by what each part does.

- the run: :mod:`.trainer` (the loop), :mod:`.config` / :mod:`.config_schema` (the YAML config),
  :mod:`.orchestrator` and :mod:`.pipeline` (sampling, also ahead of the update), :mod:`.sft` and
  :mod:`.warm_start` (the supervised warm start);
- :mod:`.algorithms`: the registered objectives (policy-gradient family, distillation);
- :mod:`.policy_gradient`: the maths of the policy-gradient loss (ratios, clip, aggregation, advantages);
- :mod:`.update`: the update engine (batches, micro-batches, log-probs, data parallelism, device figures);
- :mod:`.model`: loading the policy, LoRA, the tiny demo model;
- :mod:`.sampling`: what the rollout engines get from the trainer (weight sync, the environment mixture);
- :mod:`.outputs`: what a run writes (checkpoints, metrics, plots, saved rollouts and their summaries).

The modules' old flat paths (``toolgym.training.losses``, ...) still import, as the same module objects.
"""

from toolgym._moved import alias_modules

_OLD = {
    "policy_gradient": "losses fused_loss loss_metrics loss_presets advantages",
    "update": "batch micro_batches logprobs lm_head shared_prompt step_metrics data_parallel cuda_precision peak_memory",
    "sampling": "policy_sync mixture checkpoint_format",
    "outputs": "checkpoint logging plot step_rollouts update_record rollout_stats",
}
alias_modules({f"toolgym.training.{name}": f"toolgym.training.{pkg}.{name}"
               for pkg, names in _OLD.items() for name in names.split()})
alias_modules({"toolgym.training.models": "toolgym.training.model.load",
               "toolgym.training.demo_model": "toolgym.training.model.demo",
               "toolgym.training.lora": "toolgym.training.model.lora"})
