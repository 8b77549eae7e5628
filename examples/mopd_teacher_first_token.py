"""What MOPD's teacher would do first on Arith-v0: open a code block (call the tool) or state the answer?

    .venv/bin/python examples/mopd_teacher_first_token.py runs/mopd_smollm2/sft-seed0

For 20 held-out 2-3 digit tasks, the probability of the first response token being "```" (a tool call) or
"Answer" under the student's prompt and under MOPD's teacher prompt, whose peer sections hold two successes
(code block, tool output, "Answer: N") and one failure (a wrong direct answer), written out by hand in the
layout the demonstrations use. A success peer shows the final number, so a teacher can copy it instead of
computing it: if the teacher prompt moves mass from "```" to "Answer", distilling it teaches the student
(which has no peer to copy from) to skip the tool.
"""

from __future__ import annotations

import statistics
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import toolgym
from toolgym.training.algorithms.distillation.peers import PeerSelection, build_context, teacher_messages


def first_token_probs(model, tok, messages, ids_of: dict[str, int]) -> dict[str, float]:
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        probs = torch.softmax(model(ids).logits[0, -1].float(), -1)
    return {k: float(probs[i]) for k, i in ids_of.items()}


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "runs/mopd_smollm2/sft-seed0"
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    env = toolgym.make("toolgym/Arith-v0", sandbox=None, min_digits=2, max_digits=3, terms=2, ops="+*", max_turns=3,
                       partition="test")
    ids_of = {"```": tok.encode("```", add_special_tokens=False)[0], "Answer": tok.encode("Answer", add_special_tokens=False)[0]}
    rows = {"student prompt": [], "teacher prompt (2 successes + 1 failure)": []}
    for i in range(20):
        obs, info = env.reset(seed=0, options={"index": i})
        expr, truth = info["metadata"]["expression"], env.unwrapped.task.ground_truth
        success = f"```python\nprint({expr})\n```\n{truth}\nAnswer: {truth}"
        ctx = build_context(obs[-1]["content"], [success, success, f"Answer: {int(truth) + 7}"], PeerSelection([0, 1], [2]))
        for name, msgs in zip(rows, (obs, teacher_messages(obs, ctx)), strict=True):
            rows[name].append(first_token_probs(model, tok, msgs, ids_of))
    for name, ps in rows.items():
        print(f"{name}: P(first token '```') = {statistics.mean(p['```'] for p in ps):.3f}, "
              f"P(first token 'Answer') = {statistics.mean(p['Answer'] for p in ps):.3f}  (mean over {len(ps)} tasks)")


if __name__ == "__main__":
    main()
