"""MOPD teacher-scoring cost and top-k storage, measured side by side on a config-built model.

1. Time: per repeat, one student forward (with gradient, as in training: student prompt +
   response, top-k ids and log-probs gathered) and one teacher scoring pass (no gradient: the
   peer-conditioned prompt, which is longer, + the same response ids, gathered at the student's
   top-k ids), interleaved. Prints the median of each and of the per-repeat ratios, and the same
   teacher pass without `logits_to_keep` (LM head over every prompt position) for contrast.
2. Memory: bytes held per step for teacher targets as top-k (values + ids) against full-vocabulary
   log-probs over the response positions, from the tensors actually produced.

    .venv/bin/python benchmarks/mopd.py [--vocab 49152] [--hidden 256] [--layers 4] [--batch 4]
        [--prompt 128] [--response 256] [--peers 3] [--k 100] [--repeats 3] [--threads N]
        [--device cpu|cuda] [--dtype float32|bfloat16] [--json]

The default shape is SmolLM2-like in vocabulary, smaller in width and depth, so it runs on a
CPU in a few minutes (2 shared cores). Pass --device cuda for a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from toolgym.training.algorithms.distillation.batch import (
    PromptResponseBatch,
    build_batch,
    response_logits,
    student_forward,
    teacher_topk_logprobs,
)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _model(args: argparse.Namespace) -> LlamaForCausalLM:
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 4,
                      num_hidden_layers=args.layers, num_attention_heads=max(args.hidden // 64, 1),
                      num_key_value_heads=max(args.hidden // 128, 1), max_position_embeddings=32768)
    torch.manual_seed(0)
    with torch.device(args.device):  # initialise in place (fast for large configs on a GPU)
        model = LlamaForCausalLM(cfg)
    return model.to(getattr(torch, args.dtype)).eval()


def _batches(args: argparse.Namespace) -> tuple[PromptResponseBatch, PromptResponseBatch]:
    g = torch.Generator().manual_seed(1)

    def ids(n: int) -> list[int]:
        return torch.randint(5, args.vocab, (n,), generator=g).tolist()

    headers = 60  # section headers + closing instruction, roughly
    prompts, teacher_prompts, responses = [], [], []
    for i in range(args.batch):
        p = ids(args.prompt - 8 * i)  # ragged lengths: real padding on both sides
        r = ids(args.response - 16 * i)
        prompts.append(p)
        teacher_prompts.append(p + ids(args.peers * args.response + headers))
        responses.append(r)
    return (build_batch(prompts, responses, 0).to(args.device),
            build_batch(teacher_prompts, responses, 0).to(args.device))


def _teacher_full_logits(model: torch.nn.Module, batch: PromptResponseBatch, ids: torch.Tensor) -> torch.Tensor:
    """The naive teacher pass: LM head over every position, then slice and gather."""
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                       position_ids=batch.position_ids, use_cache=False).logits
        p, t = batch.prompt_len, batch.response_len
        return torch.log_softmax(logits[:, p - 1 : p - 1 + t].float(), -1).gather(-1, ids)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--response", type=int, default=256)
    ap.add_argument("--peers", type=int, default=3, help="peer sections in the teacher prompt (2S1F: 3)")
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    model = _model(args)
    student_b, teacher_b = _batches(args)

    def student_step() -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        out = student_forward(model, student_b, k=args.k)
        return out.topk_ids

    ids = student_step()  # warm-up, and the ids the teacher gathers at
    teacher_topk_logprobs(model, teacher_b, ids)
    _teacher_full_logits(model, teacher_b, ids)
    ts, tt, tn, ratios, ratios_naive = [], [], [], [], []
    for _ in range(args.repeats):
        _sync(args.device)
        t0 = time.perf_counter()
        ids = student_step()
        _sync(args.device)
        t1 = time.perf_counter()
        lq, _ = teacher_topk_logprobs(model, teacher_b, ids)
        _sync(args.device)
        t2 = time.perf_counter()
        full = _teacher_full_logits(model, teacher_b, ids)
        _sync(args.device)
        t3 = time.perf_counter()
        ts.append(t1 - t0)
        tt.append(t2 - t1)
        tn.append(t3 - t2)
        ratios.append((t2 - t1) / (t1 - t0))
        ratios_naive.append((t3 - t2) / (t1 - t0))
    tol = 1e-4 if args.dtype == "float32" else 5e-2
    torch.testing.assert_close(lq, full, rtol=tol, atol=tol)  # same numbers either way

    with torch.no_grad():
        full_lp = torch.log_softmax(response_logits(model, teacher_b).float(), -1)  # what top-k avoids keeping
    b, t = student_b.response_ids.shape
    mem = {
        "full_vocab_logprobs_bytes": full_lp.nbytes,
        "topk_values_bytes": lq.nbytes,
        "topk_ids_bytes_int64": ids.nbytes,
        "topk_ids_bytes_int32": ids.to(torch.int32).nbytes,
    }
    mem["topk_total_bytes"] = mem["topk_values_bytes"] + mem["topk_ids_bytes_int64"]
    res = {
        "shape": {"batch": b, "response": t, "student_len": int(student_b.input_ids.shape[1]),
                  "teacher_len": int(teacher_b.input_ids.shape[1]), "vocab": args.vocab, "hidden": args.hidden,
                  "layers": args.layers, "k": args.k, "device": args.device, "dtype": args.dtype, "threads": torch.get_num_threads()},
        "student_forward_s": statistics.median(ts),
        "teacher_scoring_s": statistics.median(tt),
        "teacher_scoring_over_student": statistics.median(ratios),
        "teacher_naive_s": statistics.median(tn),
        "teacher_naive_over_student": statistics.median(ratios_naive),
        "memory": mem,
        "memory_full_over_topk": mem["full_vocab_logprobs_bytes"] / mem["topk_total_bytes"],
    }
    if args.json:
        print(json.dumps(res, indent=2))
        return
    s = res["shape"]
    print(f"batch {s['batch']}, response {s['response']} tokens, student input {s['student_len']}, "
          f"teacher input {s['teacher_len']} (prompt + {args.peers} peers), vocab {s['vocab']}, "
          f"hidden {s['hidden']} x {s['layers']} layers, k={s['k']}, {s['device']}, {s['threads']} threads, "
          f"{args.repeats} repeats (medians)")
    print(f"{'pass':<52}{'seconds':>10}{'x student':>12}")
    print(f"{'student forward (grad, top-k gather)':<52}{res['student_forward_s']:>10.3f}{1.0:>12.2f}")
    print(f"{'teacher scoring (no grad, logits_to_keep, top-k)':<52}{res['teacher_scoring_s']:>10.3f}"
          f"{res['teacher_scoring_over_student']:>12.2f}")
    print(f"{'teacher, LM head over all positions (naive)':<52}{res['teacher_naive_s']:>10.3f}"
          f"{res['teacher_naive_over_student']:>12.2f}")
    mib = 1024 * 1024
    print(f"\n{'teacher targets per step':<52}{'MiB':>10}{'x top-k':>12}")
    print(f"{'full-vocabulary log-probs [B, T, V] fp32':<52}{mem['full_vocab_logprobs_bytes'] / mib:>10.2f}"
          f"{res['memory_full_over_topk']:>12.1f}")
    print(f"{'top-k values fp32 + ids int64 [B, T, K]':<52}{mem['topk_total_bytes'] / mib:>10.2f}{1.0:>12.1f}")
    k32 = mem["topk_values_bytes"] + mem["topk_ids_bytes_int32"]
    print(f"{'top-k values fp32 + ids int32':<52}{k32 / mib:>10.2f}{k32 / mem['topk_total_bytes']:>12.2f}")


if __name__ == "__main__":
    main()
