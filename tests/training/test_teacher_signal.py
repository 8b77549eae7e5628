"""Recipe F of the MOPD spec (alignment-metric goldens) and the teacher-scoring pipeline."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from tests.training.mopd_tiny import tiny_lm, tiny_tokenizer
from toolgym.analysis.teacher_signal import (
    CONDITIONS,
    PromptGroup,
    Score,
    aggregate,
    analyze,
    bootstrap_ci,
    condition_context,
    goodman_kruskal_gamma,
    kendall_tau_b,
    markdown_table,
    pairwise_accuracy,
    prompt_metrics,
    sample_prompts,
    score_responses,
    spearman,
    success_auc,
    write_reports,
)
from toolgym.training.algorithms.distillation.peers import (
    CLOSING_INSTRUCTION,
    H_FAILURE,
    H_PEER,
    H_SUCCESS,
    H_SUCCESS_2,
)

S = [-0.3, -0.5, -0.2, -0.9, -0.4, -0.6, -0.25, -0.8]
R = [1, 0, 1, 0, 0, 1, 1, 0]


def test_alignment_goldens() -> None:
    m = prompt_metrics(S, R)
    assert m is not None
    assert m["success_auc"] == pytest.approx(0.875)
    assert m["pairwise_acc"] == pytest.approx(0.875)
    assert m["gk_gamma"] == pytest.approx(0.75)
    assert m["kendall_tau_b"] == pytest.approx(0.566947, abs=1e-6)
    assert m["spearman"] == pytest.approx(0.654654, abs=1e-6)
    assert m["point_biserial"] == pytest.approx(0.650064, abs=1e-6)
    assert m["brier_sigmoid"] == pytest.approx(0.231059, abs=1e-6)
    assert m["brier_minmax"] == pytest.approx(0.151148, abs=1e-6)
    assert m["top1_hit"] == 1.0


def test_tie_variant_goldens() -> None:
    s = list(S)
    s[1] = -0.3
    m = prompt_metrics(s, R)
    assert m is not None
    assert m["success_auc"] == pytest.approx(0.84375)
    assert m["pairwise_acc"] == pytest.approx(0.8125)
    assert m["gk_gamma"] == pytest.approx(0.733333, abs=1e-6)
    assert m["kendall_tau_b"] == pytest.approx(0.529238, abs=1e-6)


def test_gamma_is_not_tau_b_and_matches_scipy() -> None:
    g = np.random.default_rng(0)
    for _ in range(20):
        s = np.round(g.normal(size=9), 1)  # rounding creates score ties
        r = g.integers(0, 3, size=9).astype(float)
        if np.ptp(r) == 0:
            continue
        assert kendall_tau_b(s, r) == pytest.approx(stats.kendalltau(s, r).statistic, abs=1e-12)
        assert spearman(s, r) == pytest.approx(stats.spearmanr(s, r).statistic, abs=1e-12)
    # binary r without score ties: gamma = 2 AUC - 1, and tau-b is smaller in magnitude
    assert goodman_kruskal_gamma(S, R) == pytest.approx(2 * success_auc(S, R) - 1)
    assert abs(kendall_tau_b(S, R)) < abs(goodman_kruskal_gamma(S, R))


def test_degenerate_prompts() -> None:
    assert prompt_metrics([0.1], [1]) is None  # fewer than 2 responses: skipped
    single = prompt_metrics([-0.1, -0.2, -0.3], [1, 1, 1])
    assert single is not None
    assert single["success_auc"] is None  # excluded (the reference code would say 0.0)
    assert single["pairwise_acc"] is None and single["spearman"] == 0.0
    assert spearman([1.0, 1.0], [0, 1]) == 0.0
    assert pairwise_accuracy([0.5, 0.5], [0, 1]) == 0.0  # a score tie counts as wrong
    # the aggregate excludes the single-class prompt from AUC but keeps the others' values
    agg = aggregate([prompt_metrics(S, R), single], n_boot=200)
    assert agg["success_auc"]["n"] == 1 and agg["success_auc"]["mean"] == pytest.approx(0.875)
    assert agg["spearman"]["n"] == 2


def test_bootstrap_resamples_prompts() -> None:
    vals = [0.1, 0.5, 0.9, 0.3]
    lo, hi = bootstrap_ci(vals, n_boot=2000, seed=12345)
    rng = np.random.default_rng(12345)
    means = np.asarray(vals)[rng.integers(0, 4, size=(2000, 4))].mean(1)
    assert (lo, hi) == (np.percentile(means, 2.5), np.percentile(means, 97.5))
    assert lo < np.mean(vals) < hi
    assert bootstrap_ci([0.4] * 5) == (pytest.approx(0.4), pytest.approx(0.4))
    assert all(math.isnan(x) for x in bootstrap_ci([]))


def test_condition_contexts() -> None:
    texts = ["t0", "t1", "t2", "t3", "t4"]
    rewards = [0, 1, 0, 1, 1]
    ctx = condition_context("2S1F", "P", texts, rewards, 0)
    assert [(s.header, s.body) for s in ctx.sections] == [(H_SUCCESS, "t1"), (H_SUCCESS_2, "t3"), (H_FAILURE, "t2")]
    ctx = condition_context("1S1F", "P", texts, rewards, 2)
    assert [s.body for s in ctx.sections] == ["t1", "t0"]  # first other failure: deterministic
    assert [s.body for s in condition_context("S2", "P", texts, rewards, 1).sections] == ["t4"]
    assert condition_context("none", "P", texts, rewards, 1).sections == []
    assert condition_context("F", "P", texts, [1, 1, 0, 1, 1], 2) is None  # the only failure is itself
    assert condition_context("2S", "P", texts, [1, 0, 0, 0, 1], 0) is None
    top = condition_context("score_top3", "P", texts, rewards, 1)
    assert [s.body for s in top.sections] == ["t3", "t4", "t0"] and top.sections[0].header == H_PEER
    rnd = condition_context("random", "P", texts, rewards, 1, seed=3)
    assert rnd.sections[0].body in {"t0", "t2", "t3", "t4"}
    assert rnd.sections[0].body == condition_context("random", "P", texts, rewards, 1, seed=3).sections[0].body
    with pytest.raises(ValueError):
        condition_context("3S", "P", texts, rewards, 0)


def test_score_responses_matches_direct_and_left_truncates() -> None:
    tok = tiny_tokenizer()
    model = tiny_lm()
    pairs = [("What is 3 plus 4?", " The answer is 7."), ("Compute 12 times 2.", " 24"),
             ("x " * 300, " The answer is 7.")]
    scores = score_responses(model, tok, pairs, max_len=64, batch_size=2)
    for (ctx, resp), sc in zip(pairs, scores, strict=True):
        c = tok(ctx, add_special_tokens=False)["input_ids"]
        y = tok(resp, add_special_tokens=False)["input_ids"]
        c = c[-(64 - 1 - len(y)) :] if 1 + len(c) + len(y) > 64 else c
        ids = torch.tensor([[tok.bos_token_id] + c + y])
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=ids).logits[0, -(len(y) + 1) : -1], -1)
        direct = lp[torch.arange(len(y)), torch.tensor(y)]
        assert sc.n_tokens == len(y)
        assert sc.sum_logprob == pytest.approx(direct.sum().item(), abs=1e-4)
        assert sc.mean_logprob == pytest.approx(direct.mean().item(), abs=1e-5)
    assert [s.context_truncated for s in scores] == [False, False, True]


def _groups() -> list[PromptGroup]:
    return [
        PromptGroup("p1", "What is 3 plus 4?", [" 7", " 8", " 7.", " 12"], [1, 0, 1, 0]),
        PromptGroup("p2", "Compute 12 times 2.", [" 24", " 22", " 21"], [1, 0, 0]),
        PromptGroup("p3", "What is 1 plus 1?", [" 2", " 2"], [1, 1]),
        PromptGroup("p4", "What is 9 minus 9?", [" 1"], [0]),
    ]


def test_sample_prompts_balances_buckets() -> None:
    gs = [PromptGroup(f"e{i}", "q", ["a"] * 8, [1] * 8) for i in range(10)]
    gs += [PromptGroup(f"m{i}", "q", ["a"] * 8, [1] + [0] * 7) for i in range(10)]
    gs += [PromptGroup(f"h{i}", "q", ["a"] * 9, [0] * 9) for i in range(3)]
    gs += [PromptGroup("tiny", "q", ["a"], [1])]
    out = sample_prompts(gs, max_prompts=9)
    kinds = [g.task_id[0] for g in out]
    assert sorted(kinds) == ["e", "e", "e", "h", "h", "h", "m", "m", "m"]
    assert all(len(g.texts) <= 8 for g in out)
    assert len(sample_prompts(gs, max_prompts=300)) == 23  # the 1-response prompt is dropped


def test_analyze_with_synthetic_scores(tmp_path) -> None:
    # a scorer that knows the answer under a success context: alignment must be perfect there
    def score_fn(pairs: list[tuple[str, str]]) -> list[Score]:
        out = []
        for ctx, resp in pairs:
            good = resp.strip().rstrip(".") in {"7", "24"}
            s = (-0.1 if good else -2.0) if H_SUCCESS in ctx else -1.0
            out.append(Score(s, s * 2, 2, False))
        return out

    res = analyze(_groups(), score_fn, n_boot=300)
    assert res.counts["prompts"] == 4 and res.counts["prompts_both_outcomes"] == 2
    assert res.table["S1"]["success_auc"]["mean"] == 1.0
    # p2 has one success, which has no other success to see: only its failures keep S1 -> dropped
    assert res.table["S1"]["prompts"]["n"] == 1
    assert res.table["none"]["success_auc"]["mean"] == 0.5  # all tied
    # 2S1F exists only for p1's two failures: a single-outcome subset, so no prompt enters
    assert res.table["2S1F"]["prompts"]["n"] == 0
    assert sum(r["condition"] == "2S1F" for r in res.rows) == 2
    assert res.table["F"]["prompts"]["n"] == 2
    assert set(res.table) == set(CONDITIONS)
    md = markdown_table(res)
    assert "Goodman–Kruskal γ" in md and "Kendall τ-b" in md and "| F (failure only) | 2 |" in md
    paths = write_reports(res, tmp_path / "out")
    assert (tmp_path / "out" / "teacher_signal.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "teacher_signal" in paths["json"]
    assert CLOSING_INSTRUCTION  # the rendered contexts used the training builder's wording
