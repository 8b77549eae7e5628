"""The RL trainer: rollouts -> rewards -> advantages -> K off-policy mini-batch updates -> weight sync.

One step (docs/algorithms/ctpo.md): pick ``rollout.prompts_per_step`` prompts at the data cursor, sample
``group_size`` episodes per prompt with the RolloutRunner (sandboxed tools), compute group-relative
advantages, recompute the behaviour log-probs with the trainer (no grad, pre-update weights; the
sampler's own log-probs only enter the mismatch weight, on by default when the rollouts are stale; an exactly
on-policy, never stale first mini-batch takes them from the update's own forward instead, detached), then ``mini_batches`` optimizer
steps over consecutive slices of the batch (the first is on-policy, later ones are off-policy: that
is where the ratio and the clip matter). Micro-batches (``grad_accum``, ``max_tokens_per_micro_batch``:
docs/memory.md) accumulate gradients; the token-mean divides by the mini-batch's global policy-token
count. Rows with NaN/inf are skipped and counted.

The trainer only updates. Everything that samples (samplers, sandboxes, runners, rollout workers, weight
sync, evaluation) is the :class:`~toolgym.training.orchestrator.Orchestrator`'s; the loss is the registered
algorithm's :class:`Objective` (:mod:`toolgym.training.algorithms`), which sees the trainer through a
:class:`StepContext`. With ``rollout.max_staleness: K >= 1`` the orchestrator samples step ``s + K`` while this
process updates on step ``s`` (:mod:`toolgym.training.pipeline`).

Determinism: prompts come from the data cursor, sampling seeds from (seed, step, task, episode, turn),
so a run resumed from a checkpoint continues exactly like an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from toolgym._stop import Stopped, held, released
from toolgym.agents.samplers import get_sampler, names_where
from toolgym.agents.trajectory import Trajectory
from toolgym.envs.registry import spec as env_spec
from toolgym.envs.tasks.catalog import is_source_string
from toolgym.errors import ConfigError
from toolgym.training.algorithms import Objective, RolloutBatch, StepContext, get_algorithm
from toolgym.training.config import TrainConfig, config_to_dict, dump_config
from toolgym.training.model.load import load_policy
from toolgym.training.outputs.checkpoint import (
    TrainerState,
    latest_checkpoint,
    load_checkpoint,
    rng_state,
    save_checkpoint,
)
from toolgym.training.outputs.logging import MetricsLogger, read_metrics
from toolgym.training.outputs.rollout_stats import behaviour_gap, trajectory_stats, warn_infra
from toolgym.training.update import data_parallel as D
from toolgym.training.update.batch import TokenBatch, collate
from toolgym.training.update.cuda_precision import fp32_on_cuda
from toolgym.training.update.logprobs import response_logprobs
from toolgym.training.update.step_metrics import MetricSums

# ---------------------------------------------------------------- trainer


class Trainer:
    """Owns the model, optimizer, sampler, sandbox pool and the run folder. ``fit()`` runs the loop."""

    def __init__(self, cfg: TrainConfig, *, console: bool = True) -> None:
        self.cfg = cfg
        self.dist = D.init(cfg.model.device)
        self.out = Path(cfg.output_dir)
        self.algorithm = get_algorithm(cfg.algorithm)
        per = cfg.rollout.prompts_per_step
        if per % self.dist.world:
            raise ConfigError(f"rollout.prompts_per_step: must be divisible by the number of processes ({self.dist.world}); got {per}")
        if (per // self.dist.world) % cfg.mini_batches:
            raise ConfigError(f"mini_batches: must divide the {per // self.dist.world} prompts each process gets per step; "
                              f"got {cfg.mini_batches}")
        self.sampler_spec = get_sampler(cfg.rollout.sampler, "rollout.sampler")
        for env_id in cfg.env_ids():
            env_spec(env_id)  # a typo'd id is one line before output_dir is made or a model loaded
        for entry in cfg.rollout.mixture():  # so is a plug-in task family that fails to load (pkg.mod:FAMILY:PATH)
            is_source_string(entry.env_kwargs.get("dataset"))
        if self.sampler_spec.needs_weight_push and self.dist.world > 1:
            raise ConfigError(f"rollout.sampler={cfg.rollout.sampler} runs one engine beside a single trainer process; "
                              f"with torchrun use sampler: {names_where('in_process')} (or distributed: ray for "
                              "replicated rollouts)")
        if cfg.model.lora is not None and self.dist.world > 1 and D.parallel_strategy() == "fsdp":
            raise ConfigError("model.lora with FSDP (TOOLGYM_PARALLEL=fsdp) is not supported; LoRA trains under DDP "
                              "(the default) or in one process")
        self.console = console
        self.model: Any = None
        self.objective: Objective | None = None
        self.ctx: StepContext | None = None
        self.orchestrator: Any = None  # the rollout side, set up with the rollouts

    # -- setup ------------------------------------------------------------------------------------------

    def _setup(self, resume: bool) -> None:
        cfg = self.cfg
        torch.manual_seed(cfg.seed)
        self.out.mkdir(parents=True, exist_ok=True)
        self.logger = MetricsLogger(self.out, jsonl=cfg.logging.jsonl, tensorboard=cfg.logging.tensorboard,
                                    wandb=cfg.logging.wandb, wandb_project=cfg.logging.wandb_project,
                                    progress=cfg.logging.progress and self.console,
                                    config=config_to_dict(cfg), enabled=self.dist.main)
        demos = None
        if cfg.sft.enabled and not resume:
            self.logger.say(f"SFT warm start: preparing demonstrations ({cfg.sft.data or f'{cfg.sft.demos} generated'})")
            demos = self._demonstrations()
        self.logger.say(f"loading the policy: {cfg.model.name_or_path} on {self.dist.device}")
        self.module, self.tokenizer = load_policy(cfg, self.out, demos)
        if cfg.model.name_or_path.startswith("demo") and self.dist.main and not (self.out / "demo-model").exists():
            self.module.save_pretrained(self.out / "demo-model")
            self.tokenizer.save_pretrained(self.out / "demo-model")
        self.module.float()  # master weights stay fp32; model.dtype bf16 autocasts the forward (self.autocast)
        # (and, with LoRA, stores the frozen base in bf16: below)
        self.module.to(self.dist.device)
        if cfg.model.gradient_checkpointing:
            self.module.gradient_checkpointing_enable()
            self.module.config.use_cache = True  # generation still uses the KV cache
        if cfg.model.lora is not None:
            from toolgym.training.model.lora import apply_lora

            lc = cfg.model.lora
            self.module = apply_lora(self.module, lc.r, lc.alpha, lc.dropout, lc.target_modules)
            if cfg.model.dtype == "bf16":  # the frozen base in the model dtype; the adapters stay fp32 masters
                from toolgym.training.model.lora import frozen_to

                frozen_to(self.module, torch.bfloat16)
            if cfg.model.gradient_checkpointing:
                self.module.enable_input_require_grads()  # checkpointed blocks need an input that requires grad
        from toolgym.agents.chat import ChatTemplate

        self.template = ChatTemplate(self.tokenizer, tool_parser=cfg.rollout.tool_parser)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self._demos = demos
        if self.dist.main:
            dump_config(cfg, self.out / "config.yaml")
        uncorrected = cfg.uncorrected_staleness()
        if uncorrected:
            self.logger.say(f"warning: {uncorrected}")
        slow = fp32_on_cuda(self.dist.device, cfg.model.dtype)
        if slow:
            self.logger.say(slow)
        if cfg.model.update_dropout and cfg.loss.ratio == "cumulative" and cfg.algorithm != "mopd":
            self.logger.say("warning: model.update_dropout is on: the update's log-probs then differ from the old "
                            "ones even on-policy, and CTPO's cumulative ratio adds that noise up along the sequence "
                            "(with LoRA dropout 0.05 it clipped 31% of tokens on-policy, GRPO about 0%)")

    def build(self, *, resume: bool = False, rollouts: bool = False) -> StepContext:
        """Model, tokenizer, optimizer and objective, ready for ``step`` (and with ``rollouts`` the sampler and
        sandbox pool): what ``fit`` sets up, without the SFT warm start, a checkpoint load or the loop."""
        self._setup(resume=resume)
        if rollouts:
            self._build_rollouts()
        self._build_optimizer()
        self.objective = self.algorithm.objective(self.cfg)
        return self.ctx  # type: ignore[return-value]

    def _build_optimizer(self) -> None:
        cfg = self.cfg
        self.model = D.wrap_model(self.module, self.dist)
        self.ctx = StepContext(cfg=cfg, model=self.model, module=self.module, tokenizer=self.tokenizer,
                               pad_id=self.pad_id, device=self.dist.device, out_dir=self.out, dist=self.dist,
                               temperature=self.score_temperature, collate=self.collate,
                               old_logprobs=self.old_logprobs, autocast=self.autocast,
                               separate_sampler=self.orchestrator is not None and self.orchestrator.samples_elsewhere)
        self.ctx.share_prompt = self._share_prompt()
        o = cfg.optimizer
        params = [p for p in self.module.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay,
                                           **adamw_path(params, sharded=D.is_fsdp(self.module)))
        total = cfg.steps * cfg.mini_batches * cfg.update_epochs
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: o.lr_factor(s, total))

    def _share_prompt(self) -> bool:
        """``model.share_prompt``: whether the G completions of a prompt run on one prompt forward (auto: where the
        run allows it, else one line; on: a run that rules it out is refused)."""
        mode = self.cfg.model.share_prompt
        if mode == "off":
            return False
        why = share_prompt_obstacle(self.cfg, self.dist.world, self.module)
        if why and mode == "on":
            raise ConfigError(f"model.share_prompt: on, but {why}; use auto (one forward per row there) or off")
        if why:
            self.logger.say(f"share_prompt: one forward per row, prompt included ({why})")
        return not why

    def _build_rollouts(self) -> None:
        from toolgym.training.orchestrator import Orchestrator

        self.orchestrator = Orchestrator(self.cfg, module=self.module, tokenizer=self.tokenizer,
                                         template=self.template, dist=self.dist, out=self.out,
                                         sampler_spec=self.sampler_spec, say=self.logger.say)
        self.orchestrator.start()

    # -- pieces of a step -------------------------------------------------------------------------------

    @property
    def score_temperature(self) -> float:
        """The temperature the rollouts were sampled at: every trainer log-prob of a sampled token is one of
        ``softmax(logits / T)``, the behaviour policy (top-p < 1 is refused by the config, so nothing is truncated)."""
        return float(self.cfg.rollout.temperature)

    def autocast(self) -> Any:
        """``model.dtype: bf16``: the forward (and the loss) under ``torch.autocast(bfloat16)`` over fp32 master
        weights; fp32: a no-op. Backward and the optimizer step run outside it, on the fp32 parameters."""
        if self.cfg.model.dtype != "bf16":
            return contextlib.nullcontext()
        return torch.autocast(device_type=torch.device(self.dist.device).type, dtype=torch.bfloat16)

    def collate(self, trajs: Sequence[Trajectory]) -> TokenBatch:
        return collate(trajs, self.pad_id).to(self.dist.device)

    @torch.no_grad()
    def old_logprobs(self, trajs: Sequence[Trajectory]) -> list[torch.Tensor]:
        """Trainer log-probs of every response token at the sampling temperature, before any update of this step
        (float32, on CPU)."""
        out: list[torch.Tensor] = [torch.zeros(0)] * len(trajs)
        c = self.cfg  # the update's micro-batch rows (a mini-batch's rows / grad_accum), whatever the subset
        per_mini = c.rollout.prompts_per_step // self.dist.world // c.mini_batches * c.rollout.group_size
        mb = max(1, math.ceil(per_mini / c.grad_accum))
        self.module.eval()
        for rows in self.micro_batches(trajs, list(range(len(trajs))), mb):
            with self.autocast():
                lp, _ = response_logprobs(self.module, self.collate([trajs[i] for i in rows]),
                                          temperature=self.score_temperature, head=self.cfg.model.logprob_head,
                                          share_prompt=self.ctx is not None and self.ctx.share_prompt)
            lp = lp.float().cpu()  # one device-to-host copy per micro-batch
            for j, i in enumerate(rows):
                out[i] = lp[j, : len(trajs[i].response_ids)]
        return out

    def micro_batches(self, trajs: Sequence[Trajectory], rows: list[int], max_rows: int) -> list[list[int]]:
        """``rows`` of ``trajs`` cut into micro-batches of at most ``max_rows`` rows and, with
        ``max_tokens_per_micro_batch``, that many padded tokens (length-bucketed). Data-parallel ranks then
        agree on the count (each runs as many forwards: FSDP gathers weights in every one)."""
        from toolgym.training.update.micro_batches import plan_micro_batches, split_to

        budget = self.cfg.max_tokens_per_micro_batch
        lengths = [len(trajs[i].prompt_ids) + len(trajs[i].response_ids) for i in rows]
        chunks = plan_micro_batches(rows, lengths, max_tokens=budget, max_rows=max(1, max_rows))
        if budget and self.dist.enabled:
            chunks = split_to(chunks, max(D.all_gather_objects(len(chunks), self.dist)))
        return chunks

    def update(self, batch: RolloutBatch, objective: Objective) -> dict[str, float]:
        """K mini-batches (x update_epochs) of optimizer steps; micro-batches accumulate gradients. Metrics stay
        on the device until the end (one host read per update); the grad norm is read once per optimizer step,
        which decides whether the step is taken."""
        cfg = self.cfg
        n_groups = max(batch.group_index) + 1 if batch.group_index else 0
        per_mini = n_groups // cfg.mini_batches
        sums = MetricSums()
        dev = torch.device(self.dist.device)
        mini_losses: list[torch.Tensor] = []
        grad_norms: list[float] = []
        skipped = 0
        self.optimizer.zero_grad(set_to_none=True)
        self.train_mode()
        for _epoch in range(cfg.update_epochs):
            for k in range(cfg.mini_batches):
                groups = set(range(k * per_mini, (k + 1) * per_mini))
                # a row without a prompt (an episode that failed before its first turn) has nothing to train
                rows = [i for i, g in enumerate(batch.group_index) if g in groups and batch.trajectories[i].prompt_ids]
                tok = sum(float(sum(batch.trajectories[i].loss_mask)) for i in rows if batch.keep[i])
                seqs = sum(1.0 for i in rows if batch.keep[i] and sum(batch.trajectories[i].loss_mask) > 0)
                tok, seqs = D.all_reduce_sum([tok, seqs], self.dist)
                chunks = self.micro_batches(batch.trajectories, rows, math.ceil(len(rows) / cfg.grad_accum))
                mini_loss = torch.zeros((), dtype=torch.float64, device=dev)
                for c, chunk in enumerate(chunks):
                    sync = c == len(chunks) - 1
                    ctx = self.model.no_sync() if (self.dist.enabled and not sync and hasattr(self.model, "no_sync")) else contextlib.nullcontext()
                    with ctx:
                        with self.autocast():
                            loss, m = objective.loss(self.ctx, batch, chunk, tok, seqs)
                        if not loss.requires_grad:  # no row has a response token: a zero that still reaches
                            loss = loss + sum(p.sum() * 0.0 for p in self.module.parameters() if p.requires_grad)
                        (loss * self.dist.world).backward()  # every parameter (data-parallel ranks agree)
                    mini_loss = mini_loss + loss.detach().to(torch.float64)
                    sums.total("rows_skipped_nonfinite", m.pop("rows_skipped_nonfinite", 0), dev)
                    for key in ("prompt_tokens", "prompt_tokens_forwarded"):  # the saving of model.share_prompt
                        if key in m:
                            sums.total(key, m.pop(key), dev)
                    sums.add(m, dev)
                if cfg.optimizer.grad_clip:
                    gn = torch.nn.utils.clip_grad_norm_(self.module.parameters(), cfg.optimizer.grad_clip)
                else:
                    gn = torch.sqrt(sum((p.grad.float() ** 2).sum() for p in self.module.parameters() if p.grad is not None))
                gn = float(gn)
                if math.isfinite(gn):
                    self.optimizer.step()
                else:  # a non-finite gradient never reaches the weights
                    skipped += len(rows)
                self.optimizer.zero_grad(set_to_none=True)  # no gradient memory held into the next rollouts
                self.scheduler.step()
                mini_losses.append(mini_loss)
                grad_norms.append(gn)
        self.module.eval()
        self.ctx.grad_norms = grad_norms  # e.g. the EMA teacher skips a step whose norms were all non-finite
        out, series = sums.read({"loss": mini_losses})
        losses = D.all_reduce_sum(series["loss"], self.dist) if series["loss"] else []
        out["rows_skipped_nonfinite"] = int(out.get("rows_skipped_nonfinite", 0)) + skipped
        if self.ctx.share_prompt and out.get("prompt_tokens") and not getattr(self, "_said_sharing", False):
            self._said_sharing = True
            self.logger.say(f"share_prompt: the update forwarded {out['prompt_tokens_forwarded']:.0f} prompt tokens "
                            f"for {out['prompt_tokens']:.0f} per row ({out['prompt_tokens_forwarded'] / out['prompt_tokens']:.0%})")
        out.update(loss=sum(losses) / max(len(losses), 1), loss_first_mini=losses[0] if losses else float("nan"),
                   grad_norm=sum(grad_norms) / max(len(grad_norms), 1),
                   lr=self.scheduler.get_last_lr()[0], optimizer_steps=len(losses))
        return out

    def train_mode(self) -> None:
        """Training mode for the update (gradient checkpointing needs it) with dropout off unless
        ``model.update_dropout``: the old log-probs are computed without dropout, so dropout in the update makes
        the ratio differ from 1 on-policy, and CTPO's cumulative ratio adds that noise up along the sequence."""
        self.module.train()
        if not self.cfg.model.update_dropout:
            from toolgym.training.model.load import dropout_off

            dropout_off(self.module)

    # -- the loop -----------------------------------------------------------------------------------------

    def fit(self, resume: bool = False) -> dict[str, Any]:
        cfg = self.cfg
        ckdir = self.out / "checkpoints"
        ckpt = latest_checkpoint(ckdir) if resume else None
        if resume and ckpt is None and self.dist.main:
            print(f"no checkpoint in {ckdir}; starting from scratch", flush=True)
        if ckpt is None and self.dist.main:  # a fresh run starts a clean folder: no stale metrics or model
            (self.out / "metrics.jsonl").unlink(missing_ok=True)
            for stale in ("demo-model", "checkpoints"):
                shutil.rmtree(self.out / stale, ignore_errors=True)
        D.barrier(self.dist)
        self._setup(resume=ckpt is not None)
        state = TrainerState()
        self._saved_step = -1
        self._rng_at_step: dict[str, Any] | None = None
        try:
            if not cfg.rollout.workers and cfg.distributed != "ray":  # else the workers hold them (they say so)
                self.logger.say(f"starting the {cfg.rollout.sampler} sampler"
                                + (f" and the {cfg.rollout.sandbox} sandbox" if cfg.rollout.sandbox else ""))
            self._build_rollouts()
            if ckpt is not None:
                self._build_optimizer()
                if D.is_fsdp(self.module):  # every rank reads the full state; each keeps its shards
                    state = load_checkpoint(
                        ckpt, self.module, self.optimizer, self.scheduler,
                        set_model=lambda sd: D.load_full_state_dict(self.module, sd),
                        set_optimizer=lambda osd: D.load_full_state_dict(self.module, {}, self.optimizer, osd))
                else:
                    state = load_checkpoint(ckpt, self.module, self.optimizer, self.scheduler,
                                            set_model=self._lora_resume(ckpt))
                self.orchestrator.publish(state.step)  # the engine started from the configured model, not the checkpoint
                self.logger.say(f"resumed from {ckpt} at step {state.step}")
                self._saved_step = state.step
            else:
                if cfg.sft.enabled:
                    self._sft()
                self._build_optimizer()
                self.orchestrator.publish(0)  # after the warm start, before the first rollouts and the "before" eval
                if cfg.eval.at_start:
                    ev = self.orchestrator.evaluate(0)
                    state.extra["before"] = ev
                    self.logger.log("eval", 0, ev)
                    self.logger.say(f"eval before RL: reward {ev['reward_mean']:.3f}, tool use {ev['tool_rate']:.2f}")
            objective = self.objective = self.algorithm.objective(cfg)
            if "objective" in state.extra:  # e.g. the EMA teacher's weights
                objective.load_state_dict(state.extra.pop("objective"))
            last_eval = None
            from toolgym.training.pipeline import restore_pending

            self.orchestrator.start_ahead(state.step, restore_pending(state.extra.pop("rollouts_pending", {})))
            self.logger.start_bar("train", cfg.steps, done=state.step, unit="steps")
            for step in range(state.step, cfg.steps):
                with held():  # a signal cuts the rollouts (self.step releases them), never the update
                    m = self.step(step, state.data_cursor, objective)
                    state.step = step + 1
                    state.data_cursor += cfg.rollout.prompts_per_step
                    self._rng_at_step = rng_state()  # what a checkpoint written on a signal resumes from
                    if state.step % cfg.logging.log_every == 0 or state.step == cfg.steps:
                        self.logger.log("train", state.step, m)
                    self.logger.progress(state.step, m)
                if cfg.eval.every and state.step % cfg.eval.every == 0:
                    last_eval = self.orchestrator.evaluate(state.step)
                    self.logger.log("eval", state.step, last_eval)
                    self.logger.say(f"step {state.step}: eval reward {last_eval['reward_mean']:.3f}, "
                                    f"tool use {last_eval['tool_rate']:.2f}")
                if cfg.checkpoint.every and state.step % cfg.checkpoint.every == 0 and state.step < cfg.steps:
                    self._save(state)
                self._rng_at_step = rng_state()
            if state.step == cfg.steps and (last_eval is None):
                done = [r for r in read_metrics(self.out, "eval") if r["step"] == cfg.steps] if self.dist.main else []
                if not done:
                    last_eval = self.orchestrator.evaluate(cfg.steps)
                    self.logger.log("eval", cfg.steps, last_eval)
            self._save(state)
            return self._summary(state, last_eval)
        except Stopped as stop:
            self._keep_on_stop(state, stop)
            raise
        finally:
            self.logger.close()
            try:
                if self.orchestrator is not None:
                    self.orchestrator.close()
            finally:
                D.shutdown(self.dist)

    def step(self, step: int, cursor: int, objective: Objective) -> dict[str, Any]:
        from toolgym.training.update.peak_memory import peak_memory_gb, reset_peak

        reset_peak(self.dist.device)
        t0 = time.perf_counter()
        with released():  # nothing is updated yet: a signal may cut the sampling
            groups, flow = self.orchestrator.groups(step, cursor)
        t1 = time.perf_counter()
        record = None
        if self.cfg.logging.save_rollouts:  # the policy-gradient loss notes each row's advantage and clipped tokens
            from toolgym.training.outputs.update_record import UpdateRecord

            record = UpdateRecord()
        try:
            batch, prep = objective.prepare(self.ctx, groups)
            if record is not None:
                record.attach(batch.trajectories)
                batch.extra["update_record"] = record
            prep.update(behaviour_gap(batch))
            warn_infra(self.logger.say, f"step {step + 1}", int(prep.get("infra_failures", 0)),
                       len(batch.trajectories), "left out of training")
            self.orchestrator.before_update()
            upd = self.update(batch, objective)
        finally:  # after the update, so the file has what it did; a failed update still leaves the rollouts
            if record is not None:
                from toolgym.training.outputs.step_rollouts import save_step_rollouts

                save_step_rollouts(self.cfg, self.out, step + 1, groups, self.dist, record=record,
                                   tokenizer=self.tokenizer)
        upd.update(objective.after_update(self.ctx))  # e.g. the EMA teacher follows the student once per step
        self.orchestrator.after_update(step + 1)  # the weights are now policy version step + 1
        t2 = time.perf_counter()
        stats = trajectory_stats(batch.trajectories)
        stats["peak_memory_gb"] = peak_memory_gb(self.dist.device)  # CUDA: max allocated; else peak RSS
        allstats = D.all_gather_objects(stats, self.dist)
        n = sum(s["n"] for s in allstats)
        m: dict[str, Any] = {k: sum(s[k] * s["n"] for s in allstats) / max(n, 1)
                             for k in ("reward_mean", "tool_rate", "response_tokens", "answered")}
        model_tokens = sum(s["model_tokens"] for s in allstats)
        m["policy_tokens"] = model_tokens / max(n, 1)  # sampled (trained) tokens per episode, template tokens excluded
        m.update(self.orchestrator.env_metrics(batch.trajectories))  # several environments: each one's numbers
        m.update(prep)
        m.update(upd)
        m.update(flow)  # the pipeline's staleness, dropped groups and idle times (max_staleness >= 1)
        from toolgym.agents.judge import step_metrics as judge_metrics

        m.update(judge_metrics(batch.trajectories))  # a model judge's calls, cache hits, failures, tokens
        m.update(episodes=n, rollout_s=t1 - t0, update_s=t2 - t1, step_s=t2 - t0, weight_pushes=self.orchestrator.pushes,
                 tokens_per_s=model_tokens * self.cfg.update_epochs / max(t2 - t1, 1e-9),
                 errors=sum(s["errors"] for s in allstats), peak_memory_gb=max(s["peak_memory_gb"] for s in allstats))
        return m

    # -- warm start, checkpoints, summary ---------------------------------------------------------------

    def _demonstrations(self) -> list[dict[str, Any]]:
        from toolgym.training.warm_start import demonstrations

        return demonstrations(self.cfg, self.out, self.dist.main)

    def _sft(self) -> None:
        from toolgym.training.warm_start import warm_start

        warm_start(self.cfg, self.module, self.template, self.pad_id, self.dist, self.logger,
                   self._demos if self._demos is not None else self._demonstrations())

    def _keep_on_stop(self, state: TrainerState, stop: Stopped) -> None:
        """On SIGINT/SIGTERM: a checkpoint at the last finished step unless one is there (one process only:
        under torchrun the ranks stop at different points and cannot gather a state together); the step and
        the checkpoint go on ``stop.info`` for the command's one line."""
        if state.step > self._saved_step and self.dist.world == 1 and getattr(self, "optimizer", None) is not None:
            self._save(state, rng=self._rng_at_step)
        ckpt = latest_checkpoint(self.out / "checkpoints")
        stop.info.update(step=state.step, steps=self.cfg.steps, checkpoint=str(ckpt) if ckpt else None)

    def _save(self, state: TrainerState, rng: dict[str, Any] | None = None) -> None:
        """Checkpoint (with an ``hf/`` folder of the policy) on rank 0. Under FSDP every rank first takes part
        in gathering the full weights and optimizer state (rank 0 receives them, on the CPU)."""
        with held():  # a checkpoint is written whole (and a signal during it is raised after)
            self._save_now(state, rng)
            self._saved_step = state.step

    def _save_now(self, state: TrainerState, rng: dict[str, Any] | None) -> None:
        model_state = D.full_state_dict(self.module, rank0_only=True)
        optimizer_state = D.full_optimizer_state_dict(self.module, self.optimizer)
        if not self.dist.main:
            D.barrier(self.dist)
            return
        ckdir = self.out / "checkpoints"
        kept = self.objective.state_dict() if self.objective is not None else None
        if kept is not None:
            state.extra["objective"] = kept
        if getattr(self, "orchestrator", None) is not None and state.step < self.cfg.steps:  # sampled ahead
            state.extra.update({f"rollouts_{k}": v for k, v in self.orchestrator.checkpoint_state(state.step).items()})
        from toolgym.training.model.lora import (
            ADAPTER_DIR,
            base_model,
            is_lora,
            merged_state_dict,
            save_adapter,
        )

        lora = is_lora(self.module)  # hf/ gets the merged policy; adapter/ the adapters a resume continues from
        save_checkpoint(ckdir, base_model(self.module), self.optimizer, self.scheduler, state, rng,
                        tokenizer=self.tokenizer, optimizer_state=optimizer_state,
                        model_state=merged_state_dict(self.module) if lora else model_state,
                        extra_dirs={ADAPTER_DIR: lambda d: save_adapter(self.module, d)} if lora else None)
        state.extra.pop("objective", None)
        state.extra.pop("rollouts_pending", None)
        old = sorted(p for p in ckdir.glob("step-*") if p.is_dir())
        for p in old[: max(0, len(old) - self.cfg.checkpoint.keep_last)]:
            shutil.rmtree(p, ignore_errors=True)
        D.barrier(self.dist)

    def _lora_resume(self, ckpt: Path) -> Callable[[dict[str, torch.Tensor]], None] | None:
        """LoRA: a resume loads the checkpoint's adapters (its hf/ folder holds the merged weights)."""
        from toolgym.training.model.lora import ADAPTER_DIR, is_lora, load_adapter

        if not is_lora(self.module):
            return None
        if not (ckpt / ADAPTER_DIR).is_dir():
            raise ConfigError(f"{ckpt} has no {ADAPTER_DIR}/ folder: it was not written by a model.lora run")
        return lambda _merged: load_adapter(self.module, ckpt / ADAPTER_DIR)

    def _summary(self, state: TrainerState, last_eval: dict[str, float] | None) -> dict[str, Any]:
        from toolgym.training.warm_start import run_summary

        return run_summary(self.cfg, self.out, state.step, main=self.dist.main)


def share_prompt_obstacle(cfg: TrainConfig, world: int, module: torch.nn.Module) -> str:
    """Why this run cannot share a prompt's forward among its completions ('' when it can)."""
    if world > 1:
        return f"data parallelism over {world} processes (DDP's reducer expects one forward per backward)"
    if D.is_fsdp(module):
        return "FSDP shards the weights outside the forward"
    if cfg.model.gradient_checkpointing:
        return "model.gradient_checkpointing turns the KV cache off"
    if cfg.model.update_dropout:
        return "model.update_dropout (the G completions would share one dropout mask over their prompt)"
    if cfg.model.logprob_head != "chunked":
        return "model.logprob_head: full"
    from toolgym.training.update.logprobs import chunked_route

    route = chunked_route(module)
    return route if isinstance(route, str) else ""


def adamw_path(params: Sequence[torch.Tensor], sharded: bool = False) -> dict[str, bool]:
    """AdamW's multi-tensor implementation: ``fused`` (one kernel for every parameter) where all of them are
    floating-point CUDA tensors, else ``foreach`` (a few vectorised ops over the whole list, not a Python loop
    per tensor, which is what torch picks on the CPU by default). FSDP's sharded parameters keep torch's own
    choice."""
    if sharded:
        return {}
    if params and all(p.is_cuda and p.is_floating_point() for p in params):
        return {"fused": True}
    return {"foreach": True}


def train(cfg: TrainConfig, resume: bool = False, console: bool = True) -> dict[str, Any]:
    """Run a whole training job (SFT warm start if configured, RL, evals, checkpoints, plot)."""
    return Trainer(cfg, console=console).fit(resume=resume)
