"""Rollouts for `toolgym analyze teacher-signal`: SmolLM2-135M-Instruct answers small arithmetic questions.

    .venv/bin/python examples/teacher_signal_arith.py --prompts 40 --group 8 --out runs/teacher_signal/rollouts.jsonl
    .venv/bin/toolgym analyze teacher-signal runs/teacher_signal/rollouts.jsonl --model smollm2-135m-instruct

Single-turn, no tool: the model answers directly, and a response succeeds when the right number appears
in it (not as part of a longer number). With the defaults 13% of 320 responses succeed and 16 of the 40
prompts have both outcomes, the only ones the analysis can use. Token ids are the sampled ones (token-in/token-out), as in a training run.
"""

from __future__ import annotations

import argparse
import random
import re
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from toolgym.agents.storage import write_jsonl
from toolgym.agents.trajectory import Trajectory
from toolgym.assets import asset_path


def questions(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b, op = rng.randint(2, 20), rng.randint(2, 20), rng.choice("+-*")
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        out.append((f"What is {a} {op} {b}? Give the final answer as a number.", str(value)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--prompts", type=int, default=40)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("runs/teacher_signal/rollouts.jsonl"))
    args = ap.parse_args()
    path = asset_path(args.model)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    torch.manual_seed(args.seed)
    eos = tok.eos_token_id
    trajs: list[Trajectory] = []
    for k, (q, answer) in enumerate(questions(args.prompts, args.seed)):
        msgs = [{"role": "user", "content": q}]
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        prompt = tok(text, add_special_tokens=False, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(prompt.repeat(args.group, 1), do_sample=True, temperature=1.0, top_p=1.0,
                                 max_new_tokens=args.max_new_tokens, pad_token_id=tok.pad_token_id or eos)
        for row in out[:, prompt.shape[1]:].tolist():
            row = row[: row.index(eos) + 1] if eos in row else row
            reply = tok.decode(row, skip_special_tokens=True)
            reward = 1.0 if re.search(rf"(?<![\d.]){re.escape(answer)}(?!\d)", reply) else 0.0
            trajs.append(Trajectory(task_id=f"q{k}", group_id=f"q{k}", prompt_ids=prompt[0].tolist(), response_ids=row,
                                    loss_mask=[1] * len(row), behavior_logprobs=[0.0] * len(row), reward=reward,
                                    turns=msgs + [{"role": "assistant", "content": reply}]))
        print(f"{k:3d} {q} -> {answer}: {[t.reward for t in trajs[-args.group:]]}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.out, trajs)
    both = sum(1 for k in range(args.prompts) if 0 < sum(t.reward for t in trajs[k * args.group:(k + 1) * args.group]) < args.group)
    print(f"wrote {len(trajs)} trajectories to {args.out}; {both} of {args.prompts} prompts have both outcomes")


if __name__ == "__main__":
    main()
