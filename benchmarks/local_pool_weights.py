"""Weight push to local rollout worker processes: shared memory (LocalRolloutPool.push_weights) against a
pickled state dict sent through each worker's pipe.

The model has SmolLM2-135M's shape (random weights, fp32, ~540 MB). Both sides end with every worker holding
its own copy of the weights: the pool's workers copy into their sampler's model, the pickle receivers copy
into tensors of the same shapes. Last line: ``pickled/shared push time X.XXx (N workers)``.

    python benchmarks/local_pool_weights.py [--workers 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import time


def _receiver(conn) -> None:
    import torch

    targets = None
    while True:
        blob = conn.recv_bytes()
        if not blob:
            return
        state = pickle.loads(blob)
        if targets is None:
            targets = {k: torch.empty_like(v) for k, v in state.items()}
        for k, v in state.items():
            targets[k].copy_(v)
        del state, blob
        conn.send(True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import multiprocessing

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from toolgym.distributed.local_pool import LocalRolloutPool
    from toolgym.training.model.demo import train_tokenizer

    torch.manual_seed(0)
    tok = train_tokenizer(["a b c 1 2 3 <answer> print"] * 20, vocab_size=280)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = LlamaForCausalLM(cfg)
    state = model.state_dict()
    mb = sum(v.numel() * v.element_size() for v in state.values()) / 2**20
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters, {mb:.0f} MiB fp32; "
          f"{args.workers} workers", flush=True)

    with LocalRolloutPool(model, tok, num_workers=args.workers, sandbox=None) as pool:
        shared = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            pool.push_weights(state)
            shared.append(time.perf_counter() - t)
    print(f"shared memory: {statistics.median(shared):.2f} s per push (runs: "
          f"{', '.join(f'{x:.2f}' for x in shared)})", flush=True)

    ctx = multiprocessing.get_context("spawn")
    pipes, procs = [], []
    for _ in range(args.workers):
        a, b = ctx.Pipe()
        p = ctx.Process(target=_receiver, args=(b,), daemon=True)
        p.start()
        pipes.append(a)
        procs.append(p)
    pickled = []
    for i in range(args.repeats + 1):  # the first round allocates the receivers' tensors: not timed
        t = time.perf_counter()
        blob = pickle.dumps({k: v.detach().cpu() for k, v in state.items()}, protocol=pickle.HIGHEST_PROTOCOL)
        for c in pipes:
            c.send_bytes(blob)
        for c in pipes:
            c.recv()
        del blob
        if i:
            pickled.append(time.perf_counter() - t)
    for c, p in zip(pipes, procs, strict=True):
        c.send_bytes(b"")
        p.join(30)
    print(f"pickled through pipes: {statistics.median(pickled):.2f} s per push (runs: "
          f"{', '.join(f'{x:.2f}' for x in pickled)})")
    print(f"pickled/shared push time {statistics.median(pickled) / statistics.median(shared):.2f}x "
          f"({args.workers} workers)")


if __name__ == "__main__":
    main()
