"""The chunked LM head (training/update/lm_head.py) and the log-prob paths of training/update/logprobs.py.

The chunked path must give the plain full-logits path's log-probs, entropies and gradients (every parameter:
a tied head, LoRA adapters, bf16 autocast, a soft-capped head, through DDP), and keep nothing of size V per
token for backward: measured by summing the bytes autograd saves (saved_tensors_hooks), not by timing.
"""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
from transformers import Gemma2Config, Gemma2ForCausalLM, LlamaConfig, LlamaForCausalLM

from tests.training.tiny import tiny_lm
from toolgym.agents.trajectory import Trajectory
from toolgym.training.update.batch import TokenBatch, collate
from toolgym.training.update.lm_head import Head, token_logprobs
from toolgym.training.update.logprobs import chunked_route, response_logprobs


def _traj(prompt: list[int], resp: list[int]) -> Trajectory:
    return Trajectory(task_id="t", group_id="g", prompt_ids=prompt, response_ids=resp, loss_mask=[1] * len(resp),
                      behavior_logprobs=[0.0] * len(resp))


def _batch(vocab: int, seed: int = 0) -> TokenBatch:
    g = torch.Generator().manual_seed(seed)

    def ids(n: int) -> list[int]:
        return torch.randint(1, vocab, (n,), generator=g).tolist()

    return collate([_traj(ids(3), ids(7)), _traj(ids(1), ids(2)), _traj(ids(2), []), _traj(ids(5), ids(4))])


def _tied_lm(vocab: int = 96, hidden: int = 32, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg).eval()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    return model


def _run(model, batch: TokenBatch, head: str, temperature: float = 0.7, entropy: bool = True,
         fallback: bool = False):
    """Log-probs, entropies and every trainable parameter's gradient of one weighted sum of both."""
    model.zero_grad(set_to_none=True)
    lp, ent = response_logprobs(model, batch, temperature=temperature, with_entropy=entropy, head=head)
    if head == "chunked":  # it took the chunked path (or, where expected, fell back)
        assert isinstance(chunked_route(model), str) == fallback
    w = torch.linspace(0.5, 1.5, lp.shape[1], device=lp.device)
    loss = (lp * w).sum() + ((ent * w.flip(0)).sum() if entropy else 0.0)
    loss.backward()
    grads = {k: p.grad.detach().float().cpu() for k, p in model.named_parameters() if p.requires_grad}
    assert all(g is not None for g in grads.values())
    return lp.detach().cpu(), (ent.detach().cpu() if entropy else None), grads


def _assert_same(a, b, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    torch.testing.assert_close(a[0], b[0], rtol=rtol, atol=atol)
    if a[1] is not None:
        torch.testing.assert_close(a[1], b[1], rtol=rtol, atol=atol)
    assert set(a[2]) == set(b[2])
    for k in a[2]:
        torch.testing.assert_close(a[2][k], b[2][k], rtol=rtol, atol=atol, msg=k)


# ---------------------------------------------------------------- the head alone


@pytest.mark.parametrize("live", [False, True], ids=["every-token", "live-tokens"])
@pytest.mark.parametrize("frozen", [False, True], ids=["trained-head", "frozen-head"])
@pytest.mark.parametrize("softcap", [None, 0.7])
@pytest.mark.parametrize("chunk", [1, 3, 100])
def test_token_logprobs_equal_a_full_log_softmax_with_gradients(softcap, chunk, frozen, live) -> None:
    """A trained head recomputes each chunk in backward; a frozen one forms its hidden-state factors in the
    forward. Both give the full log-softmax's values and gradients, whether backward recomputes every token or
    only the ``live`` ones the caller names on the host (the loss mask's: no device read to find them)."""
    g = torch.Generator().manual_seed(0)
    n, h, v = 10, 8, 37
    hidden = torch.randn(n, h, generator=g, dtype=torch.float32).requires_grad_(True)
    weight = torch.randn(v, h, generator=g, dtype=torch.float32).requires_grad_(not frozen)
    bias = torch.randn(v, generator=g, dtype=torch.float32).requires_grad_(not frozen)
    targets = torch.randint(0, v, (n,), generator=g)
    gl, ge = torch.randn(n, generator=g), torch.randn(n, generator=g)
    gl[::3] = ge[::3] = 0.0  # tokens without upstream gradient (masked out): skipped in backward, gradient 0
    t, scale = 0.6, 1.3

    head = Head(weight, bias, scale, softcap)
    lp, ent = token_logprobs(hidden, head, targets, temperature=t, with_entropy=True, chunk=chunk,
                             live=[i for i in range(n) if i % 3] if live else None)
    ((lp * gl).sum() + (ent * ge).sum()).backward()
    trained = (hidden,) if frozen else (hidden, weight, bias)
    ours = [lp.detach(), ent.detach()] + [x.grad.clone() for x in trained]

    for x in trained:
        x.grad = None
    y = (hidden @ weight.t() + bias) * scale
    if softcap is not None:
        y = softcap * torch.tanh(y / softcap)
    lsm = torch.log_softmax(y / t, -1)
    ref_lp = lsm.gather(-1, targets[:, None]).squeeze(-1)
    ref_ent = -(lsm.exp() * lsm).sum(-1)
    ((ref_lp * gl).sum() + (ref_ent * ge).sum()).backward()
    ref = [ref_lp.detach(), ref_ent.detach()] + [x.grad.clone() for x in trained]
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- through a model


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_path_equals_full_logits_untied(temperature) -> None:
    model = tiny_lm(vocab=64)
    batch = _batch(64)
    _assert_same(_run(model, batch, "chunked", temperature), _run(model, batch, "full", temperature))


def test_chunked_path_equals_full_logits_with_a_tied_head() -> None:
    """The shared embedding/head weight gets the sum of both uses' gradients, as on the full path."""
    model = _tied_lm()
    batch = _batch(96)
    a, b = _run(model, batch, "chunked"), _run(model, batch, "full")
    _assert_same(a, b)
    assert "lm_head.weight" not in a[2] and a[2]["model.embed_tokens.weight"].abs().sum() > 0


def test_chunked_path_equals_full_logits_with_lora() -> None:
    from toolgym.training.model.lora import apply_lora

    model = apply_lora(_tied_lm(), r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj", "down_proj"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3, generator=torch.Generator().manual_seed(len(name)))
    batch = _batch(96)
    a, b = _run(model, batch, "chunked"), _run(model, batch, "full")
    assert a[2] and all("lora_" in k for k in a[2])
    _assert_same(a, b)


def test_chunked_path_equals_full_logits_with_gradient_checkpointing() -> None:
    model = _tied_lm()
    model.gradient_checkpointing_enable()
    model.train()
    batch = _batch(96)
    _assert_same(_run(model, batch, "chunked"), _run(model, batch, "full"))


def test_chunked_path_under_bf16_autocast_matches_full_logits() -> None:
    model = tiny_lm(vocab=64)
    batch = _batch(64)
    runs = {}
    for head in ("chunked", "full"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model.zero_grad(set_to_none=True)
            lp, _ = response_logprobs(model, batch, temperature=0.7, head=head)
        assert lp.dtype == torch.float32
        lp.sum().backward()
        runs[head] = (lp.detach(), {k: p.grad.clone() for k, p in model.named_parameters()})
    torch.testing.assert_close(runs["chunked"][0], runs["full"][0], rtol=0, atol=2e-2)
    for k, g in runs["full"][1].items():
        assert torch.nn.functional.cosine_similarity(runs["chunked"][1][k].flatten(), g.flatten(), dim=0) > 0.999, k


def test_soft_capped_head_is_handled_and_equals_full_logits() -> None:
    torch.manual_seed(0)
    cfg = Gemma2Config(vocab_size=80, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=1, head_dim=16, max_position_embeddings=64, final_logit_softcapping=0.5)
    model = Gemma2ForCausalLM(cfg).eval()
    batch = _batch(80)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fall-back warning: the cap is applied by the chunked head
        a = _run(model, batch, "chunked")
    b = _run(model, batch, "full")
    assert float(b[0][b[0] != 0].max()) < -math.log(80) + 1.0 + 1e-3  # the cap (0.5) flattens the distribution
    _assert_same(a, b)


class _ScaledLogits(LlamaForCausalLM):
    """A model that transforms its head's output in a way no config attribute tells."""

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.logits = out.logits * 3.0
        return out


def test_an_unknown_transform_of_the_logits_falls_back_with_one_warning() -> None:
    torch.manual_seed(0)
    model = _ScaledLogits(copy.deepcopy(tiny_lm(vocab=64).config)).eval()
    batch = _batch(64)
    with pytest.warns(UserWarning, match="unknown transform"):
        a = _run(model, batch, "chunked", fallback=True)
    _assert_same(a, _run(model, batch, "full"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        _run(model, batch, "chunked", fallback=True)


def test_the_forward_goes_through_the_ddp_wrapper(tmp_path) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = _tied_lm()
        ref = _run(copy.deepcopy(model), _batch(96), "full")
        ddp = DDP(model)
        calls = []
        ddp.register_forward_pre_hook(lambda *_: calls.append(1))
        lp, ent = response_logprobs(ddp, _batch(96), temperature=0.7, with_entropy=True)
        w = torch.linspace(0.5, 1.5, lp.shape[1])
        ((lp * w).sum() + (ent * w.flip(0)).sum()).backward()
        assert calls == [1]
        torch.testing.assert_close(lp.detach(), ref[0], rtol=1e-5, atol=1e-6)
        for k, p in model.named_parameters():
            torch.testing.assert_close(p.grad, ref[2][k], rtol=1e-5, atol=1e-6, msg=k)
    finally:
        dist.destroy_process_group()


def test_a_row_without_prompt_tokens_is_refused() -> None:
    batch = collate([_traj([], [3, 4])])
    with pytest.raises(ValueError, match="at least one prompt token"):
        response_logprobs(tiny_lm(vocab=64), batch)


# ---------------------------------------------------------------- memory kept for backward


def _saved_bytes(model: torch.nn.Module, batch: TokenBatch, head: str) -> int:
    """Bytes of the distinct storages autograd keeps for backward, parameters left out."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = max(seen.get(s.data_ptr(), 0), s.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        lp, _ = response_logprobs(model, batch, head=head)
    assert lp.requires_grad
    return sum(seen.values())


@pytest.mark.parametrize("frozen_head", [False, True])
def test_memory_saved_for_backward_does_not_grow_with_the_vocabulary(frozen_head) -> None:
    g = torch.Generator().manual_seed(0)
    trajs = [_traj(torch.randint(1, 200, (4,), generator=g).tolist(), torch.randint(1, 200, (60,), generator=g).tolist())
             for _ in range(4)]
    batch = collate(trajs)
    small, big = tiny_lm(vocab=256), tiny_lm(vocab=4096)
    for m in (small, big):
        m.lm_head.weight.requires_grad_(not frozen_head)
    tokens = 4 * 60
    full = {v: _saved_bytes(m, batch, "full") for v, m in ((256, small), (4096, big))}
    chunked = {v: _saved_bytes(m, batch, "chunked") for v, m in ((256, small), (4096, big))}
    # the full path keeps every response token's float32 log-softmax: it grows with V
    assert full[4096] - full[256] >= tokens * (4096 - 256) * 4
    # the chunked head keeps [N, H] hidden states and [N] floats: the same bytes at 16x the vocabulary
    assert chunked[4096] == chunked[256]
    assert chunked[256] < full[256]
