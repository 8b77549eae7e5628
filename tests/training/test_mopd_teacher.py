"""Recipe C of the MOPD spec: teacher alignment with left padding and mask-derived positions."""

from __future__ import annotations

import torch

from tests.training.mopd_tiny import tiny_lm
from toolgym.training.algorithms.distillation.batch import (
    build_batch,
    mopd_step_inputs,
    positions_from_mask,
    response_logits,
    student_forward,
    teacher_topk_logprobs,
    token_logprobs,
)

PROMPTS = [[5, 9, 12, 40, 41], [7, 8], [30, 31, 32, 33, 34, 35, 36, 37, 38]]
RESPONSES = [[50, 51, 52, 53], [60, 61, 62, 63, 64, 65], [70]]


def _unpadded_response_logprobs(model, prompt: list[int], response: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
    r = len(response)
    sl = logits[-(r + 1) : -1]  # the spec's slice: positions -(R+1) .. -2
    return torch.log_softmax(sl, -1)[torch.arange(r), torch.tensor(response)]


def test_positions_from_mask() -> None:
    m = torch.tensor([[0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])
    assert positions_from_mask(m).tolist() == [[0, 0, 0, 1, 2, 2], [0, 1, 2, 3, 4, 5]]


def test_left_padded_equals_unpadded() -> None:
    model = tiny_lm(vocab_size=100)
    batch = build_batch(PROMPTS, RESPONSES, pad_id=0)
    assert batch.prompt_len == 9 and batch.response_len == 6
    with torch.no_grad():
        logits = response_logits(model, batch)
    lp = token_logprobs(logits, batch.response_ids)
    for i, (x, y) in enumerate(zip(PROMPTS, RESPONSES, strict=True)):
        ref = _unpadded_response_logprobs(model, x, y)
        torch.testing.assert_close(lp[i, : len(y)], ref, rtol=0, atol=1e-5)
        assert batch.response_mask[i].sum().item() == len(y)


def test_response_slice_matches_direct_gather() -> None:
    model = tiny_lm(vocab_size=100, seed=3)
    x, y = PROMPTS[0], RESPONSES[0]
    batch = build_batch([x], [y], pad_id=0)
    with torch.no_grad():
        full = model(input_ids=torch.tensor([x + y])).logits[0]
        logits = response_logits(model, batch)[0]
    for t, tok in enumerate(y):
        # the logits at absolute position len(x) + t - 1 predict response token t
        direct = torch.log_softmax(full[len(x) + t - 1], -1)[tok]
        torch.testing.assert_close(torch.log_softmax(logits[t], -1)[tok], direct, rtol=0, atol=1e-6)


def test_teacher_gathers_at_student_ids_without_grad() -> None:
    student = tiny_lm(vocab_size=100, seed=1)
    teacher = tiny_lm(vocab_size=100, seed=2)
    teacher_prompts = [p + [90, 91, 92] for p in PROMPTS]  # longer peer-conditioned prompts
    inp = mopd_step_inputs(PROMPTS, teacher_prompts, RESPONSES, [[1] * len(y) for y in RESPONSES], [1, 1, 1], 0)
    # token-in/token-out: identical response ids on both sides, only the prompt part differs
    assert torch.equal(inp.student.response_ids, inp.teacher.response_ids)
    assert inp.teacher.prompt_len == inp.student.prompt_len + 3
    out = student_forward(student, inp.student, k=7)
    lq, lt = teacher_topk_logprobs(teacher, inp.teacher, out.topk_ids, micro_batch=2)
    assert lq.shape == out.lp_topk.shape == (3, 6, 7)
    assert not lq.requires_grad and out.lp_topk.requires_grad
    assert torch.equal(out.topk_ids, out.logits.detach().topk(7, -1).indices)
    for i, (x, y) in enumerate(zip(teacher_prompts, RESPONSES, strict=True)):
        ids = torch.tensor([x + y])
        with torch.no_grad():
            full = torch.log_softmax(teacher(input_ids=ids).logits[0, len(x) - 1 : -1], -1)
        torch.testing.assert_close(lq[i, : len(y)], full.gather(-1, out.topk_ids[i, : len(y)]), rtol=0, atol=1e-5)
        torch.testing.assert_close(lt[i, : len(y)], full[torch.arange(len(y)), torch.tensor(y)], rtol=0, atol=1e-5)
