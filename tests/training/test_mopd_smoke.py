"""Recipe G of the MOPD spec: an end-to-end MOPD step on a tiny model with a toy verifier.

Its own small training loop stands in for the trainer (which calls the same helpers).
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.training.mopd_tiny import tiny_lm, tiny_tokenizer
from toolgym.agents.trajectory import Trajectory
from toolgym.training.algorithms.distillation.batch import response_logits, token_logprobs
from toolgym.training.algorithms.distillation.divergences import student_topk, topk_divergence
from toolgym.training.algorithms.distillation.ema import EMATeacher
from toolgym.training.algorithms.distillation.loss import mopd_loss
from toolgym.training.algorithms.distillation.peers import CLOSING_INSTRUCTION
from toolgym.training.algorithms.distillation.step import build_mopd_batch, mopd_forward_loss

SYSTEM = {"role": "system", "content": "Answer briefly."}
GROUPS = {  # prompt -> responses; the toy verifier rewards a response containing the digit 7
    "g_mixed": ("What is 3 plus 4?", ["The answer is 7.", "The answer is 8.", "7", "answer 12"]),
    "g_fail": ("Compute 12 times 2.", ["The answer is 24.", "22", "answer 21", "4"]),
    "g_pass": ("What is 9 minus 2?", ["7", "The answer is 7.", "answer 7", "7."]),
    "g_single": ("What is 1 plus 6?", ["7"]),  # a group of one: no peer, no context
}


def verifier(text: str) -> float:
    return 1.0 if "7" in text else 0.0


def _rollouts(model, tok) -> list[Trajectory]:
    trajs = []
    for uid, (question, answers) in GROUPS.items():
        msgs = [SYSTEM, {"role": "user", "content": question}]
        prompt_ids = tok(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True),
                         add_special_tokens=False)["input_ids"]
        for a in answers:
            resp = tok(a, add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids("<|end|>")]
            ids = torch.tensor([prompt_ids + resp])
            with torch.no_grad():
                lp = torch.log_softmax(model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1], -1)
            behavior = lp[torch.arange(len(resp)), torch.tensor(resp)].tolist()
            mask = [1] * len(resp)
            mask[-1] = 0  # the end-of-turn template token is not trained
            behavior[-1] = 0.0
            trajs.append(Trajectory(task_id=uid, group_id=uid, prompt_ids=prompt_ids, response_ids=resp,
                                    loss_mask=mask, behavior_logprobs=behavior, reward=verifier(a),
                                    turns=msgs + [{"role": "assistant", "content": a}]))
    return trajs


def _expected_fractions(trajs: list[Trajectory]) -> dict[str, float]:
    """Counted directly from the synthetic rewards (2S1F, n = 4, self excluded)."""
    n = len(trajs)
    prim = sec = fail = trained = 0
    for i, t in enumerate(trajs):
        peers = [u for j, u in enumerate(trajs) if u.group_id == t.group_id and j != i]
        s = sum(u.reward >= 0.5 for u in peers)
        f = sum(u.reward < 0.5 for u in peers)
        prim += s >= 1
        sec += s >= 2
        fail += f >= 1
        trained += (s + f) >= 1
    groups = {t.group_id for t in trajs}
    ok = {t.group_id for t in trajs if t.reward >= 0.5}
    return {"mopd/success_group_frac": len(ok) / len(groups), "mopd/primary_frac": prim / n,
            "mopd/second_frac": sec / n, "mopd/failure_frac": fail / n, "mopd/trained_frac": trained / n}


def test_one_mopd_step_end_to_end() -> None:
    tok = tiny_tokenizer()
    student = tiny_lm(seed=0)
    ema = EMATeacher(student, rate=0.05)
    trajs = _rollouts(student, tok)
    assert [t.reward for t in trajs] == [1, 0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    batch = build_mopd_batch(trajs, tok, mode="contrastive", threshold=0.5, seed=1, step=0)
    inp = batch.inputs

    # logged fractions match counts from the rewards
    for key, val in _expected_fractions(trajs).items():
        assert batch.stats[key] == pytest.approx(val), key
    assert batch.stats["mopd/trained_frac"] == pytest.approx(12 / 13)

    # teacher and student inputs differ only in the prompt part
    assert torch.equal(inp.student.response_ids, inp.teacher.response_ids)
    for b, t in enumerate(trajs):
        s_prompt = inp.student.input_ids[b, : inp.student.prompt_len][inp.student.attention_mask[b, : inp.student.prompt_len] == 1]
        t_prompt = inp.teacher.input_ids[b, : inp.teacher.prompt_len][inp.teacher.attention_mask[b, : inp.teacher.prompt_len] == 1]
        assert s_prompt.tolist() == t.prompt_ids
        r = len(t.response_ids)
        assert inp.teacher.input_ids[b, inp.teacher.prompt_len : inp.teacher.prompt_len + r].tolist() == t.response_ids
        if batch.contexts[b].seq_mask:
            assert t_prompt.tolist() != t.prompt_ids
            text = tok.decode(t_prompt.tolist())
            assert text.startswith("<|system|>Answer briefly.<|end|><|user|>" + GROUPS[t.group_id][0])
            assert text.endswith(CLOSING_INSTRUCTION + "<|end|><|assistant|>")
        else:
            assert t_prompt.tolist() == t.prompt_ids

    # one step: loss finite and positive; gradient non-zero exactly for rollouts with context
    student.train()
    logits_holder = {}

    def keep_logits(_module, _args, out):  # read the gradient that reaches the student's logits
        out.logits.retain_grad()
        logits_holder["logits"] = out.logits

    handle = student.register_forward_hook(keep_logits)
    loss, metrics = mopd_forward_loss(student, ema.model, inp, k=20, alpha=0.5)
    handle.remove()
    assert math.isfinite(loss.item()) and loss.item() > 0
    loss.backward()
    g = logits_holder["logits"].grad
    for b, ctx in enumerate(batch.contexts):
        row_norm = g[b].abs().sum().item()
        assert (row_norm > 0) == bool(ctx.seq_mask), (b, row_norm)
    assert not any(p.grad is not None and p.grad.abs().sum() > 0 for p in ema.model.parameters())
    gn = torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
    assert gn.item() > 0
    assert metrics["mopd/trained_frac"] == pytest.approx(12 / 13)
    phi = {n: p.clone() for n, p in ema.model.named_parameters()}
    torch.optim.AdamW(student.parameters(), lr=1e-3).step()
    assert ema.update(student, [gn.item()])
    name, p = next(iter(student.named_parameters()))
    torch.testing.assert_close(dict(ema.model.named_parameters())[name], 0.95 * phi[name] + 0.05 * p.detach(),
                               rtol=1e-6, atol=1e-6)


def test_steps_against_fixed_teacher_targets_decrease_jsd() -> None:
    tok = tiny_tokenizer()
    student = tiny_lm(seed=0)
    teacher = tiny_lm(seed=1)  # a different network: its targets differ clearly from the student
    trajs = _rollouts(student, tok)
    inp = build_mopd_batch(trajs, tok, seed=1).inputs
    with torch.no_grad():
        target = torch.log_softmax(response_logits(teacher, inp.teacher), -1)  # fixed, full vocabulary

    def jsd_now() -> torch.Tensor:
        logits = response_logits(student, inp.student)
        lp, ids = student_topk(logits, 20)
        div = topk_divergence(lp, target.gather(-1, ids), 0.5)
        return mopd_loss(div, inp.loss_mask, inp.seq_mask)[0]

    opt = torch.optim.AdamW(student.parameters(), lr=3e-3, weight_decay=0.0)
    student.train()
    history = []
    for _ in range(8):
        loss = jsd_now()
        history.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        history.append(jsd_now().item())
    assert history[-1] < 0.8 * history[0], history
    assert sum(b < a for a, b in zip(history, history[1:], strict=False)) >= 6


def test_positive_mode_all_fail_group_trains_nothing_and_sampled_rkl_option() -> None:
    tok = tiny_tokenizer()
    student = tiny_lm(seed=0)
    trajs = _rollouts(student, tok)
    batch = build_mopd_batch(trajs, tok, mode="positive")
    fail_rows = [b for b, t in enumerate(trajs) if t.group_id == "g_fail"]
    assert all(batch.contexts[b].seq_mask == 0 for b in fail_rows)
    teacher = tiny_lm(seed=0)
    loss, m = mopd_forward_loss(student, teacher, batch.inputs, divergence="sampled_rkl")
    assert math.isfinite(loss.item())
    # on-policy with the rollout log-probs: the rollout weight is ~1 (same weights, fp32)
    rollout_lp = torch.zeros_like(batch.inputs.loss_mask)
    for b, t in enumerate(trajs):
        rollout_lp[b, : len(t.behavior_logprobs)] = torch.tensor(t.behavior_logprobs)
    with torch.no_grad():
        logp = token_logprobs(response_logits(student, batch.inputs.student), batch.inputs.response_ids)
    _, m2 = mopd_forward_loss(student, teacher, batch.inputs, old_logp=logp, rollout_logp=rollout_lp)
    assert m2["mopd/ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert m2["mopd/token_mismatch_weight_mean"] == pytest.approx(1.0, abs=1e-4)


def test_registered_defaults_and_opd_context() -> None:
    from toolgym.training.config import load_config

    def opts(name: str, **extra):
        return load_config({"algorithm": name, "model": {"name_or_path": "m"}, **extra}).options

    assert opts("mopd").mode == "contrastive" and opts("mopd").k == 100 and opts("mopd").alpha == 0.5
    assert opts("sdpo").mode == "sdpo" and opts("sdpo").divergence == "jsd"
    opd = opts("opd", options={"teacher": "t"})
    assert opd.divergence == "sampled_rkl" and opd.ema_rate == 0.0 and opd.context == "none"
    tok = tiny_tokenizer()
    student = tiny_lm(seed=0)
    trajs = _rollouts(student, tok)
    batch = build_mopd_batch(trajs, tok, context="none")
    assert batch.inputs.seq_mask.tolist() == [1.0] * len(trajs)
    assert torch.equal(batch.inputs.student.input_ids, batch.inputs.teacher.input_ids)
    sdpo = build_mopd_batch(trajs, tok, mode="sdpo")
    assert sdpo.stats["mopd/second_frac"] == 0.0 and sdpo.stats["mopd/failure_frac"] == 0.0
