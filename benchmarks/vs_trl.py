"""One GRPO configuration timed in TRL's ``GRPOTrainer`` and in toolgym's trainer, side by side (target: toolgym >= 1.5x).

Same model (SmolLM2-135M-Instruct, fp32, no gradient checkpointing on either side), same environment and
prompts (``toolgym/ScienceQA-v0`` on ARC-Easy in toolgym's task order, single turn, its verifier as the reward), ``--prompts`` prompts x
``--group`` completions per step, completions of exactly ``--response`` tokens (TRL: ``min_new_tokens``;
toolgym: the HF sampler's stop set holds no token the model emits, so it runs to ``max_new_tokens``), one
AdamW update per batch (TRL ``num_iterations=1``; toolgym ``mini_batches: 1``), lr 1e-6, grad clip 1.0,
no KL term. The two trainers alternate step by step after one warm-up step each; the script prints, per
side, the median seconds of generation (sampling + reward), of the update (everything else in the step:
toolgym recomputes the behaviour log-probs, TRL skips them on-policy) and of the whole step, policy
tokens per second for each part (counted from the actual completions), and the throughput ratio.

``--multi-turn``: ``toolgym/Arith-v0`` with its Python tool (local sandbox on both sides, up to ``--max-turns``
turns, ``--response`` tokens per turn), TRL through its ``environment_factory`` (toolgym's TRL integration:
``env_factory``, ``env_dataset(single_turn=False)``, ``env_reward``; TRL's ChatML tool template, as
SmolLM2's own drops tool calls) against toolgym's own multi-turn rollouts. Completions end where the model ends
them, so the sides sample different numbers of tokens and turns: compare tokens/s, and the tool-call counts
printed beside them. ``--grad-accum N``: N micro-batches per optimizer step on both sides (TRL
``gradient_accumulation_steps``, toolgym ``grad_accum``). ``--share-prompt``: toolgym's ``model.share_prompt``.
The 1-minute load average is printed before and after each step.

    .venv/bin/python benchmarks/vs_trl.py [--prompts 2] [--group 4] [--response 16] [--steps 2] [--threads N]
        [--grad-accum 1] [--share-prompt auto|off] [--multi-turn [--max-turns 3]]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402

# no tools: the prompt is the same token for token on both sides (a tool env renders its schemas into
# toolgym's prompt, which a plain TRL dataset prompt does not carry)
ENV = "toolgym/ScienceQA-v0"
ENV_KW = {"dataset": "arc_easy", "system_prompt": "Reply with the letter of the correct option only."}
# --multi-turn: a tool environment; the local sandbox on both sides (TRL's environments run the tool in-process)
MT_ENV = "toolgym/Arith-v0"
MT_KW = {"min_digits": 2, "max_digits": 3, "ops": "*"}


def trl_side(a: argparse.Namespace, model_dir: str, out: str, indices: list[int]) -> tuple[Any, dict[str, list[float]]]:
    """TRL's stock GRPOTrainer (its own loss), instrumented: generation+scoring vs the rest of each step."""
    from trl import GRPOConfig, GRPOTrainer

    from toolgym.integrations.trl import env_dataset, env_factory, env_reward

    rows = a.prompts * a.group
    if rows % a.grad_accum:
        raise SystemExit(f"--grad-accum must divide prompts x group ({rows}); got {a.grad_accum}")
    common = dict(output_dir=out, per_device_train_batch_size=rows // a.grad_accum, num_generations=a.group,
                  gradient_accumulation_steps=a.grad_accum, num_iterations=1, temperature=1.0, top_p=1.0, beta=0.0,
                  learning_rate=1e-6, weight_decay=0.01, max_grad_norm=1.0, lr_scheduler_type="constant",
                  max_steps=a.steps + 1, bf16=False, gradient_checkpointing=False, use_cpu=True,
                  report_to=[], save_strategy="no", logging_steps=1, seed=0, shuffle_dataset=False,
                  disable_tqdm=True)
    t: dict[str, list[float]] = {"gen": [], "step": [], "tokens": [], "prompt_tokens": [], "tool_calls": []}
    if a.multi_turn:
        import trl
        from transformers import AutoTokenizer

        kw = {**MT_KW, "sandbox": "local", "max_turns": a.max_turns}
        tok = AutoTokenizer.from_pretrained(model_dir)
        # SmolLM2's own template drops tool calls; TRL ships a ChatML one that renders them (same special tokens)
        tok.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
        factory = env_factory(MT_ENV, **kw)
        calls = [0]

        def counted_factory() -> Any:
            env = factory()
            call = env._call

            def _call(name: str, arguments: dict[str, Any]) -> str:
                calls[0] += 1
                return call(name, arguments)

            env._call = _call
            return env

        args = GRPOConfig(**common, max_completion_length=a.response * a.max_turns,
                          max_tool_calling_iterations=a.max_turns - 1)
        tr = GRPOTrainer(model_dir, args=args, processing_class=tok, reward_funcs=env_reward(MT_ENV, **kw),
                         environment_factory=counted_factory,
                         train_dataset=env_dataset(MT_ENV, indices=indices, single_turn=False, **kw))
    else:
        calls = [0]
        args = GRPOConfig(**common, max_completion_length=a.response, generation_kwargs={"min_new_tokens": a.response})
        tr = GRPOTrainer(model_dir, args=args, reward_funcs=env_reward(ENV, **ENV_KW),
                         train_dataset=env_dataset(ENV, indices=indices, **ENV_KW))
    gen_and_score = tr._generate_and_score_completions

    def timed_gen(inputs: Any) -> Any:
        t0 = time.perf_counter()
        before = calls[0]
        res = gen_and_score(inputs)
        t["gen"].append(time.perf_counter() - t0)
        mask = res["completion_mask"] * res["tool_mask"] if "tool_mask" in res else res["completion_mask"]
        t["tokens"].append(float(mask.sum()))  # sampled tokens (tool output left out)
        t["prompt_tokens"].append(float(res["prompt_mask"].sum()))
        t["tool_calls"].append(float(calls[0] - before))
        return res

    tr._generate_and_score_completions = timed_gen
    return tr, t


def toolgym_side(a: argparse.Namespace, out: str) -> tuple[Any, Any, dict[str, list[float]]]:
    from toolgym.training.config import load_config
    from toolgym.training.trainer import Trainer

    if a.multi_turn:  # completions end where the model ends them, as on TRL's side
        rollout = {"env": MT_ENV, "env_kwargs": {**MT_KW, "max_turns": a.max_turns}, "max_turns": a.max_turns,
                   "max_new_tokens": a.response, "max_response_tokens": a.response * a.max_turns, "sampler": "hf",
                   "sandbox": "local", "sandbox_pool": 2}
    else:
        # a stop set of one token SmolLM2 never samples here: completions run to max_new_tokens, like TRL's
        # min_new_tokens
        never = 49151
        rollout = {"env": ENV, "env_kwargs": {**ENV_KW, "parser": "none", "max_turns": 1}, "max_turns": 1,
                   "max_new_tokens": a.response, "sampler": "hf", "sampler_kwargs": {"eos_token_ids": [never]},
                   "sandbox": None}
    cfg = load_config({"algorithm": "grpo", "output_dir": out, "mini_batches": 1, "steps": a.steps + 1, "seed": 0,
                       "grad_accum": a.grad_accum,
                       "model": {"name_or_path": "smollm2-135m-instruct", "share_prompt": a.share_prompt},
                       "rollout": {**rollout, "prompts_per_step": a.prompts, "group_size": a.group,
                                   "temperature": 1.0, "top_p": 1.0},
                       "optimizer": {"lr": 1e-6, "weight_decay": 0.01, "grad_clip": 1.0},
                       "logging": {"progress": False, "jsonl": False}})
    tr = Trainer(cfg, console=False)
    tr.build(rollouts=True)  # what fit() sets up before its first step (fit runs all steps in one call)
    obj = tr.objective
    t: dict[str, list[float]] = {"gen": [], "step": [], "tokens": [], "prompt_tokens": [], "tool_calls": [],
                                 "prompt_forwarded": []}
    rollouts = tr.orchestrator.rollouts

    def counted(*args: Any, **kwargs: Any) -> Any:
        groups = rollouts(*args, **kwargs)
        trajs = [x for g in groups for x in g]
        t["tokens"].append(float(sum(sum(x.loss_mask) for x in trajs)))
        t["prompt_tokens"].append(float(sum(len(x.prompt_ids) for x in trajs)))
        t["tool_calls"].append(float(sum(sum(1 for m in x.turns if m.get("role") == "tool") for x in trajs)))
        return groups

    tr.orchestrator.rollouts = counted
    return tr, obj, t


def trl_stepper(tr: Any, t: dict[str, list[float]]) -> Any:
    """Run TRL's ``train()`` in a thread that pauses before each optimizer step; each ``next()`` runs one step.

    A step is timed from the step-begin to the step-end callback: generation, loss, backward, clipping and
    the optimizer step (HF's loop does the last two outside ``training_step``)."""
    import threading

    from transformers import TrainerCallback

    go, done = threading.Semaphore(0), threading.Semaphore(0)
    began: list[float] = []

    class Gate(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            go.acquire()
            began.append(time.perf_counter())

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            t["step"].append(time.perf_counter() - began[-1])
            done.release()

    tr.add_callback(Gate())
    threading.Thread(target=tr.train, daemon=True).start()
    while True:
        go.release()
        done.acquire()
        yield


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--response", type=int, default=16)
    ap.add_argument("--steps", type=int, default=2, help="measured steps per side (after one warm-up step)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--share-prompt", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--multi-turn", action="store_true")
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    from toolgym.assets import asset_path

    model_dir = str(asset_path("smollm2-135m-instruct"))
    tmp = tempfile.mkdtemp()
    tg_tr, tg_obj, tg_t = toolgym_side(a, str(Path(tmp, "toolgym")))
    # TRL gets toolgym's task order (its data cursor draws a permutation), so both sides see the same prompts
    order = [i for k in range(a.steps + 1) for i in tg_tr.orchestrator.task_indices(k * a.prompts, a.prompts)]
    trl_tr, trl_t = trl_side(a, model_dir, str(Path(tmp, "trl")), order)
    trl_steps = trl_stepper(trl_tr, trl_t)

    def toolgym_step(i: int) -> None:
        m = tg_tr.step(i, i * a.prompts, tg_obj)
        tg_t["gen"].append(m["rollout_s"])
        tg_t["step"].append(m["step_s"])
        tg_t["prompt_forwarded"].append(m.get("prompt_tokens_forwarded", float("nan")))

    loads = [os.getloadavg()[0]]

    for i in range(a.steps + 1):
        if i % 2 == 0:  # alternate which side goes first (allocator state, caches, other load on the machine)
            next(trl_steps)
            toolgym_step(i)
        else:
            toolgym_step(i)
            next(trl_steps)
        loads.append(os.getloadavg()[0])
        for name, t in (("trl", trl_t), ("toolgym", tg_t)):  # as it goes: a run cut short still says something
            print(f"step {i}{' (warm-up)' if i == 0 else ''} {name}: gen {t['gen'][-1]:.2f} s, step {t['step'][-1]:.2f} s, "
                  f"{t['tokens'][-1]:.0f} sampled tokens, {t['tool_calls'][-1]:.0f} tool calls; load {loads[-1]:.1f}",
                  flush=True)

    res: dict[str, Any] = {"prompts": a.prompts, "group": a.group, "response": a.response, "steps": a.steps,
                           "threads": torch.get_num_threads(), "multi_turn": a.multi_turn, "grad_accum": a.grad_accum,
                           "share_prompt": a.share_prompt, "load_avg_1m": loads,
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    for name, t in (("trl", trl_t), ("toolgym", tg_t)):
        gen, step, tok = t["gen"][1:], t["step"][1:], t["tokens"][1:]  # drop the warm-up step
        prompt_tok = statistics.median(t["prompt_tokens"][1:])
        upd = [s - g for s, g in zip(step, gen, strict=True)]
        tokens = statistics.median(tok)
        res[name] = {"tokens_per_step": tokens, "prompt_tokens_per_step": prompt_tok, "gen_s": statistics.median(gen), "update_s": statistics.median(upd),
                     "step_s": statistics.median(step), "gen_tok_s": tokens / statistics.median(gen),
                     "update_tok_s": tokens / statistics.median(upd), "step_tok_s": tokens / statistics.median(step),
                     "per_step_s": step, "tool_calls_per_step": statistics.median(t["tool_calls"][1:])}
    fwd = [x for x in tg_t["prompt_forwarded"][1:] if x == x]
    res["toolgym"]["prompt_tokens_forwarded"] = statistics.median(fwd) if fwd else None
    res["ratio"] = res["toolgym"]["step_tok_s"] / res["trl"]["step_tok_s"]
    res["ratio_gen"] = res["toolgym"]["gen_tok_s"] / res["trl"]["gen_tok_s"]
    res["ratio_update"] = res["toolgym"]["update_tok_s"] / res["trl"]["update_tok_s"]
    if a.json:
        print(json.dumps(res))
        return
    what = (f"multi-turn {MT_ENV} (Python tool, up to {a.max_turns} turns of <= {a.response} tokens)" if a.multi_turn
            else f"{a.response} tokens")
    print(f"GRPO, SmolLM2-135M fp32, {a.prompts} prompts x {a.group} completions x {what}, num_iterations=1, "
          f"grad_accum {a.grad_accum}, share_prompt {a.share_prompt}, {torch.get_num_threads()} threads; median of "
          f"{a.steps} steps after a warm-up; {res['date']}; 1-min load average {[round(x, 1) for x in loads]}")
    print(f"{'':10s} {'prompt':>7s} {'tokens':>7s} {'gen s':>7s} {'update s':>9s} {'step s':>7s} {'gen tok/s':>10s} "
          f"{'upd tok/s':>10s} {'step tok/s':>11s}")
    for name in ("trl", "toolgym"):
        r = res[name]
        print(f"{name:10s} {r['prompt_tokens_per_step']:7.0f} {r['tokens_per_step']:7.0f} {r['gen_s']:7.2f} {r['update_s']:9.2f} {r['step_s']:7.2f} "
              f"{r['gen_tok_s']:10.1f} {r['update_tok_s']:10.1f} {r['step_tok_s']:11.1f}")
    fw = res["toolgym"]["prompt_tokens_forwarded"]
    print(f"tool calls per step: trl {res['trl']['tool_calls_per_step']:.0f}, toolgym "
          f"{res['toolgym']['tool_calls_per_step']:.0f}; toolgym's update forwarded "
          f"{'-' if fw is None else f'{fw:.0f}'} of {res['toolgym']['prompt_tokens_per_step']:.0f} prompt tokens")
    print(f"throughput ratio toolgym/TRL: step {res['ratio']:.2f}x (target >= 1.5), generation {res['ratio_gen']:.2f}x, "
          f"update {res['ratio_update']:.2f}x; per-step seconds trl {[round(s, 2) for s in res['trl']['per_step_s']]} "
          f"toolgym {[round(s, 2) for s in res['toolgym']['per_step_s']]}")
    os._exit(0)  # TRL's training thread is parked at its next step gate


if __name__ == "__main__":
    main()
