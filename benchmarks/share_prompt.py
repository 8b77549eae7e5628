"""The update of one GRPO batch with and without ``model.share_prompt``, paired in one run.

    .venv/bin/python benchmarks/share_prompt.py [--prompts 4] [--group 8] [--response 128] [--rounds 3]
        [--threads 1] [--grad-accum 1] [--json]

The batch is what ``benchmarks/vs_trl.py`` trains on (SmolLM2-135M-Instruct fp32, ARC-Easy prompts of
``toolgym/ScienceQA-v0``, ``--group`` completions of exactly ``--response`` tokens, sampled once by the ``hf``
sampler, or with ``--synthetic`` random token ids: the update's cost does not depend on them). Each round runs the same update (prepare + optimizer step, one mini-batch) once with the prompt
forwarded once per group (``share_prompt`` on) and once per row (off), the order alternating between rounds,
after one warm-up of each. Prints each run, the medians, the ratio off/on of the update time (median of the
per-round ratios), the prompt tokens each side forwarded, and the 1-minute load average around every run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402


def synthetic_groups(tr: Any, a: argparse.Namespace) -> list[list[Any]]:
    """The step's prompts as the sampler would get them, each with ``--group`` responses of ``--response``
    random token ids (log-probs and rewards made up: only the update's cost is measured)."""
    import toolgym
    from toolgym.agents.trajectory import Trajectory

    g = torch.Generator().manual_seed(0)
    vocab = len(tr.tokenizer)
    out = []
    env = toolgym.make(tr.cfg.rollout.env, **tr.cfg.rollout.env_kwargs)
    for k, i in enumerate(tr.orchestrator.task_indices(0, a.prompts)):
        obs, _ = env.reset(seed=i, options={"index": i})
        prompt = tr.template.prompt_ids(obs, tools=list(env.unwrapped.tool_schemas) or None)
        out.append([Trajectory(task_id=str(i), group_id=f"g{k}", prompt_ids=prompt,
                               response_ids=torch.randint(0, vocab, (a.response,), generator=g).tolist(),
                               loss_mask=[1] * a.response, behavior_logprobs=[-1.0] * a.response,
                               reward=float(j % 2), turns=list(obs)) for j in range(a.group)])
    env.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--response", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--synthetic", action="store_true",
                    help="responses of random token ids instead of sampled ones (the update's cost does not depend "
                         "on their values; skips the sampling)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    sys.path.insert(0, str(Path(__file__).parent))
    from vs_trl import toolgym_side

    ns = argparse.Namespace(prompts=a.prompts, group=a.group, response=a.response, steps=1, multi_turn=False,
                            max_turns=1, grad_accum=a.grad_accum, share_prompt="auto")
    tr, obj, _ = toolgym_side(ns, str(Path(tempfile.mkdtemp(), "toolgym")))
    if not tr.ctx.share_prompt:
        raise SystemExit("model.share_prompt is not available for this run (see the line above)")
    t0 = time.perf_counter()
    groups = synthetic_groups(tr, a) if a.synthetic else tr.orchestrator.rollouts(0, 0)
    sample_s = time.perf_counter() - t0
    trajs = [x for g in groups for x in g]
    prompt = sum(len(x.prompt_ids) for x in trajs)
    sampled = sum(sum(x.loss_mask) for x in trajs)

    def update(share: bool) -> dict:
        tr.ctx.share_prompt = share
        load = os.getloadavg()[0]
        t = time.perf_counter()
        batch, _ = obj.prepare(tr.ctx, groups)
        m = tr.update(batch, obj)
        return {"share": share, "update_s": time.perf_counter() - t, "load": load,
                "prompt_tokens_forwarded": m.get("prompt_tokens_forwarded"), "loss": m["loss"]}

    runs = []
    for r in range(a.rounds + 1):  # round 0 warms both up
        order = (True, False) if r % 2 == 0 else (False, True)
        pair = {share: update(share) for share in order}
        runs.append({"round": r, "on": pair[True], "off": pair[False]})
        if not a.json:
            print(f"round {r}{' (warm-up)' if r == 0 else ''}: shared {pair[True]['update_s']:.2f} s, per row "
                  f"{pair[False]['update_s']:.2f} s (load {pair[order[0]]['load']:.1f}, {pair[order[1]]['load']:.1f})",
                  flush=True)
    measured = runs[1:]
    on = statistics.median(x["on"]["update_s"] for x in measured)
    off = statistics.median(x["off"]["update_s"] for x in measured)
    ratio = statistics.median(x["off"]["update_s"] / x["on"]["update_s"] for x in measured)
    res = {"config": vars(a), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "torch_threads": torch.get_num_threads(), "rows": len(trajs), "prompt_tokens": prompt,
           "sampled_tokens": sampled, "sample_s": sample_s, "on_s": on, "off_s": off, "ratio_off_over_on": ratio,
           "forwarded_on": measured[0]["on"]["prompt_tokens_forwarded"],
           "forwarded_off": measured[0]["off"]["prompt_tokens_forwarded"], "runs": runs}
    if a.json:
        print(json.dumps(res))
        return
    print(f"GRPO update, SmolLM2-135M fp32, {a.prompts} prompts x {a.group} "
          f"{'synthetic ' if a.synthetic else ''}completions x {a.response} tokens "
          f"({prompt} prompt + {sampled} sampled tokens), grad_accum {a.grad_accum}, {torch.get_num_threads()} "
          f"thread(s); median of {a.rounds} paired rounds after a warm-up; {res['date']}")
    print(f"{'':22s} {'update s':>9s} {'prompt tokens forwarded':>24s}")
    print(f"{'share_prompt on':22s} {on:9.2f} {res['forwarded_on']:24.0f}")
    print(f"{'share_prompt off':22s} {off:9.2f} {res['forwarded_off']:24.0f}")
    print(f"speed-up of the update (per row / shared): {ratio:.2f}x; 1-min load averages "
          f"{[round(x[s]['load'], 1) for x in runs for s in ('on', 'off')]}")


if __name__ == "__main__":
    main()
