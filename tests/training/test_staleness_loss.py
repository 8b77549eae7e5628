"""Training on stale rollouts (``rollout.max_staleness: K``, docs/algorithms/ctpo.md and mopd.md, "Training on
stale rollouts"): the trainer's behaviour log-probs are those of the weights the step starts from; the gap between
the policy that sampled and those weights enters only through the truncated sequence-level mismatch weight

    W_i = min(exp(sum_t m_it (log pi_start(a_it) - log pi_sampler(a_it))), loss.mismatch_cap)

which multiplies every token term of response i: CTPO, GRPO, GSPO ``c_i W_i u_it``; MOPD ``c_i rho_it W_i D_it``.

The expected values are written here from those formulas, token by token, in Python floats (float64), never
by calling the code under test. Two entry points are checked:

* the loss functions the objectives call (``policy_loss(..., seq_weight=mismatch_weight(...))`` and
  ``mopd_loss(..., seq_weight=...)``), in float64 to 1e-12: each token's term on its own (the loss is linear in
  the advantage of a token and in its divergence, so an advantage or divergence that is zero except at one
  token isolates that token's term), the gradient per token, and the total;
* the trainer's own path, ``algorithm.objective(cfg)``: ``prepare`` then ``loss`` on a ``RolloutBatch``, with a
  real torch module whose log-probs are set by hand (``LogProbTable``), so the expected terms and the per-token
  gradient are known exactly; the trainer's log-probs are float32, so this path is compared to 2e-6.

K = 0 leaves the weight off (``loss.mismatch_weight: null``): the loss is bit for bit the one with the weight
switched off explicitly, and the existing loss-equality tests are unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from toolgym.agents.trajectory import Trajectory
from toolgym.training.algorithms import get_algorithm
from toolgym.training.algorithms.base import StepContext
from toolgym.training.algorithms.distillation.loss import mopd_loss
from toolgym.training.algorithms.policy_gradient import on_policy_rows
from toolgym.training.config import load_config
from toolgym.training.policy_gradient.loss_presets import CTPO, GRPO, GSPO
from toolgym.training.policy_gradient.losses import ClipConfig, mismatch_weight, policy_loss
from toolgym.training.update.batch import collate
from toolgym.training.update.data_parallel import DistInfo
from toolgym.training.update.logprobs import response_logprobs

F64 = torch.float64
CAP = 5.0  # loss.mismatch_cap's default

# ------------------------------------------------------------------ the documented formulas, token by token


def expected_weight(old: list[float], sampler: list[float], mask: list[int], cap: float = CAP) -> float:
    """W_i = min(exp(sum_t m_t (old_t - sampler_t)), cap)."""
    return min(math.exp(sum(m * (o - s) for o, s, m in zip(old, sampler, mask, strict=True))), cap)


def expected_pg_terms(logp, old, mask, adv, weights, preset, token_count=None, seq_count=None):
    """Per-token loss terms ``c_i W_i u_it`` and their derivatives by ``log pi_theta(a_it)`` (lists of rows).

    ``u_it`` is PPO's pessimistic form with the dual clip (docs/algorithms/ctpo.md, "Clipping";
    baselines.md): ``max(-A w, -A w_bar)``, then ``min(., -A e^{cc})`` (adaptive) or ``min(., -A dual)`` (fixed)
    for A < 0. The ratio's log ``x_t``: cumulative ``sum_{k<=t} Delta_k``, token ``Delta_t``, gspo
    ``sum_k Delta_k / n``; the weight carries gradient through its own token only, so d term / d logp_t is
    ``c W (-A) rho_t`` where the unclipped branch is the one taken, else 0."""
    ratio, mode, agg = preset["ratio"], preset["clip_mode"], preset["agg"]
    eps_low, eps_high, power, dual = preset["eps_low"], preset["eps_high"], preset["power"], preset["dual"]
    n_rows = [sum(1 for m in row if m) for row in mask]
    n_tok = token_count if token_count is not None else sum(n_rows)
    n_seq = seq_count if seq_count is not None else sum(1 for n in n_rows if n)
    values, grads = [], []
    for i, row in enumerate(mask):
        deltas = [max(-20.0, min(20.0, lp - o)) if m else 0.0 for lp, o, m in zip(logp[i], old[i], row, strict=True)]
        total = sum(deltas)
        coef = {"token-mean": 1.0 / n_tok, "seq-mean-token-mean": 1.0 / (n_seq * max(n_rows[i], 1)),
                "seq-mean-token-sum": 1.0 / n_seq}[agg]
        a, w = adv[i], weights[i]
        vals, grs, run, t = [], [], 0.0, 0
        for j, m in enumerate(row):
            if not m:
                vals.append(0.0)
                grs.append(0.0)
                continue
            t += 1
            run += deltas[j]
            x = {"cumulative": run, "token": deltas[j], "gspo": total / n_rows[i]}[ratio]
            log_rho = min(x, 10.0)
            rho = math.exp(log_rho)
            if mode == "adaptive":
                s = t ** power
                rho_bar = math.exp(min(max(log_rho, -eps_low * s), eps_high * s))
                dual_bound = math.exp((dual if dual is not None else 10.0) * s)
            else:
                rho_bar = min(max(rho, 1.0 - eps_low), 1.0 + eps_high)
                dual_bound = dual
            u, live = (-a * rho, True) if -a * rho >= -a * rho_bar else (-a * rho_bar, False)  # PPO's max
            if a < 0 and dual_bound is not None and -a * dual_bound < u:
                u, live = -a * dual_bound, False
            vals.append(coef * w * u)
            grs.append(coef * w * -a * rho if live and a != 0 else 0.0)
        values.append(vals)
        grads.append(grs)
    return values, grads


def expected_mopd_terms(div, mask, seq_mask, logp, old, weights, ratio_cap=2.0, agg="seq-mean-token-mean"):
    """Per-token MOPD terms ``c_i rho_it W_i D_it`` (docs/algorithms/mopd.md): rho_it = min(exp(clamp(logp - old,
    -20, 20)), ratio_cap), m_it = loss_mask * seq_mask, c_i = 1 / (N max(sum_t m_it, 1)) (N: every sequence) or
    1 / sum m (token-mean). Returns (terms, d loss / d D_it)."""
    m = [[lm * seq_mask[i] for lm in row] for i, row in enumerate(mask)]
    n_all = sum(sum(row) for row in m)
    terms, coefs = [], []
    for i, row in enumerate(m):
        c = 1.0 / (len(m) * max(sum(row), 1)) if agg == "seq-mean-token-mean" else 1.0 / max(n_all, 1)
        r_terms, r_coefs = [], []
        for j, mm in enumerate(row):
            rho = min(math.exp(max(-20.0, min(20.0, logp[i][j] - old[i][j]))), ratio_cap)
            k = c * mm * rho * weights[i]
            r_coefs.append(k)
            r_terms.append(k * div[i][j])
        terms.append(r_terms)
        coefs.append(r_coefs)
    return terms, coefs


# ------------------------------------------------------------------ the hand-made case: 3 rows, 6 tokens

MASK = [[1, 1, 0, 1, 1, 1],  # a tool output in the middle
        [1, 0, 0, 1, 1, 0],  # and padding at the end
        [1, 1, 1, 1, 0, 1]]
OLD = [[-0.50, -1.25, -3.00, -0.75, -2.00, -0.40],  # log pi_start: the weights the step starts from
       [-1.00, -2.50, -0.10, -0.60, -1.50, -9.00],
       [-0.30, -0.90, -1.10, -2.20, -0.05, -0.70]]
# log pi_start - log pi_sampler per token; their masked sums: 0.45, -0.65, 2.0 (row 2 over the cap: e^2 > 5)
GAP = [[0.10, 0.20, 7.00, -0.05, 0.10, 0.10],
       [-0.25, 3.00, -4.00, -0.15, -0.25, 8.00],
       [0.50, 0.25, 0.50, 0.50, -1.00, 0.25]]
SAMPLER = [[o - g for o, g in zip(ro, rg, strict=True)] for ro, rg in zip(OLD, GAP, strict=True)]
# log pi_theta - log pi_start per token, scaled per algorithm so that each one's window both clips and passes
# (large at mask-0 tokens, which must not count)
STEP = [[0.030, -0.020, -5.000, 0.045, 0.060, -0.150],
        [-0.040, -2.000, -1.000, -0.030, 0.300, -3.000],
        [0.020, 0.050, -0.010, 0.070, -0.080, 0.110]]
SCALE = {"ctpo": 1.0, "grpo": 4.0, "gspo": 0.03}
ADV = [0.8, -1.1, 0.5]
PRESETS = {"ctpo": CTPO, "grpo": GRPO, "gspo": GSPO}


def _logp(algo: str) -> list[list[float]]:
    return [[o + SCALE[algo] * s for o, s in zip(ro, rs, strict=True)] for ro, rs in zip(OLD, STEP, strict=True)]


def _t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def _regions(values, grads) -> tuple[int, int]:
    """(tokens whose gradient flows, policy tokens whose term is clipped): the case must exercise both."""
    flows = sum(1 for i, row in enumerate(MASK) for j, m in enumerate(row) if m and grads[i][j] != 0)
    clipped = sum(1 for i, row in enumerate(MASK) for j, m in enumerate(row) if m and grads[i][j] == 0)
    return flows, clipped


def test_the_hand_made_case_has_a_row_over_the_cap_and_masked_tokens() -> None:
    w = [math.exp(sum(m * g for m, g in zip(rm, rg, strict=True))) for rm, rg in zip(MASK, GAP, strict=True)]
    assert w[0] < CAP and w[1] < 1 < CAP < w[2]
    assert all(0 in row for row in MASK)


@pytest.mark.parametrize("cap", [CAP, 1.2])
def test_mismatch_weight_is_the_documented_truncated_sequence_weight(cap: float) -> None:
    got = mismatch_weight(_t(OLD), _t(SAMPLER), _t(MASK), cap)
    want = [expected_weight(o, s, m, cap) for o, s, m in zip(OLD, SAMPLER, MASK, strict=True)]
    assert got.dtype == F64
    for g, e in zip(got.tolist(), want, strict=True):
        assert abs(g - e) <= 1e-12
    assert want[2] == cap  # truncated
    assert want[1] < 1  # no lower truncation: a response less likely under the current weights counts less


# ------------------------------------------------------------------ policy_loss, float64, token by token


def _pg_call(algo: str, logp, adv, w, fused: bool, counts: dict[str, float]):
    p = PRESETS[algo]
    return policy_loss(logp, _t(OLD), adv, _t(MASK), ratio=p["ratio"], clip=ClipConfig.from_loss(p), agg=p["agg"],
                       seq_weight=w, fused=fused, metrics_on_device=True, check_finite=False, **counts)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "tensor"])
@pytest.mark.parametrize("algo", ["ctpo", "grpo", "gspo"])
def test_policy_loss_with_the_stale_weight_equals_the_formula_token_by_token(algo: str, fused: bool) -> None:
    preset = PRESETS[algo]
    weights = [expected_weight(o, s, m) for o, s, m in zip(OLD, SAMPLER, MASK, strict=True)]
    values, grads = expected_pg_terms(_logp(algo), OLD, MASK, ADV, weights, preset)
    flows, clipped = _regions(values, grads)
    assert flows >= 3 and clipped >= 2, (flows, clipped)  # the case has power: both regions, for every ratio
    n_tok, n_seq = sum(map(sum, MASK)), len(MASK)
    counts = {"global_token_count": n_tok} if preset["agg"] == "token-mean" else {"global_seq_count": n_seq}
    w = mismatch_weight(_t(OLD), _t(SAMPLER), _t(MASK), CAP)  # what the objective passes (prepare)
    # each token's term alone: an advantage that is 0 except at that token (ratio, clip and normaliser do not
    # depend on the advantage; a token with A = 0 adds exactly 0)
    for i, row in enumerate(MASK):
        for j in range(len(row)):
            one = torch.zeros(len(MASK), len(row), dtype=F64)
            one[i, j] = ADV[i]
            got, _ = _pg_call(algo, _t(_logp(algo)), one, w, fused, counts)
            assert abs(float(got) - values[i][j]) <= 1e-12, (i, j, float(got), values[i][j])
    # the whole loss and its gradient, token by token
    logp = _t(_logp(algo)).requires_grad_(True)
    loss, _ = _pg_call(algo, logp, torch.tensor(ADV, dtype=F64), w, fused, counts)
    loss.backward()
    assert abs(float(loss.detach()) - sum(map(sum, values))) <= 1e-12
    for i, row in enumerate(MASK):
        for j in range(len(row)):
            assert abs(float(logp.grad[i, j]) - grads[i][j]) <= 1e-12, (i, j, float(logp.grad[i, j]), grads[i][j])


# ------------------------------------------------------------------ mopd_loss, float64, token by token

DIV = [[0.30, 0.10, 9.00, 0.25, 0.05, 0.40],  # the divergence at mask-0 tokens must not count
       [0.20, 5.00, 5.00, 0.15, 0.35, 7.00],
       [0.12, 0.22, 0.08, 0.30, 0.50, 0.18]]
MOPD_STEP = [[0.10, -0.20, 0.0, 0.90, 0.05, -0.30],  # row 0, token 3: exp(0.9) > ratio cap 2
             [0.20, 0.0, 0.0, -0.10, 0.30, 0.0],
             [-0.05, 0.15, 0.80, 0.00, 0.10, 0.25]]


@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "token-mean"])
@pytest.mark.parametrize("seq_mask", [[1, 1, 1], [1, 0, 1]], ids=["all", "row1-no-context"])
def test_mopd_loss_with_the_stale_weight_equals_the_formula_token_by_token(agg: str, seq_mask: list[int]) -> None:
    logp = [[o + s for o, s in zip(ro, rs, strict=True)] for ro, rs in zip(OLD, MOPD_STEP, strict=True)]
    weights = [expected_weight(o, s, m) for o, s, m in zip(OLD, SAMPLER, MASK, strict=True)]
    terms, coefs = expected_mopd_terms(DIV, MASK, seq_mask, logp, OLD, weights, agg=agg)
    assert any(min(math.exp(s), 2.0) == 2.0 and m for rs, rm in zip(MOPD_STEP, MASK, strict=True)
               for s, m in zip(rs, rm, strict=True))  # a ratio at its cap
    w = mismatch_weight(_t(OLD), _t(SAMPLER), _t(MASK), CAP)
    kw = dict(logp=_t(logp), old_logp=_t(OLD), ratio_cap=2.0, agg=agg, metrics_on_device=True, seq_weight=w)
    for i, row in enumerate(MASK):
        for j in range(len(row)):
            one = torch.zeros(len(MASK), len(row), dtype=F64)
            one[i, j] = DIV[i][j]
            got, _ = mopd_loss(one, _t(MASK), torch.tensor(seq_mask, dtype=F64), **kw)
            assert abs(float(got) - terms[i][j]) <= 1e-12, (i, j)
    div = _t(DIV).requires_grad_(True)
    loss, _ = mopd_loss(div, _t(MASK), torch.tensor(seq_mask, dtype=F64), **kw)
    loss.backward()
    assert abs(float(loss.detach()) - sum(map(sum, terms))) <= 1e-12
    for i, row in enumerate(MASK):
        for j in range(len(row)):
            assert abs(float(div.grad[i, j]) - coefs[i][j]) <= 1e-12
    # without the weight: today's loss, bit for bit the same call with seq_weight left out
    plain, _ = mopd_loss(_t(DIV), _t(MASK), torch.tensor(seq_mask, dtype=F64), **{**kw, "seq_weight": None})
    unweighted, _ = expected_mopd_terms(DIV, MASK, seq_mask, logp, OLD, [1.0] * 3, agg=agg)
    assert abs(float(plain) - sum(map(sum, unweighted))) <= 1e-12


# ------------------------------------------------------------------ the trainer's path: objective(cfg).prepare/loss


class LogProbTable(torch.nn.Module):
    """A causal LM whose log-prob of token 0 at response position j of row r is the parameter ``lp[r, j]``.

    Row r is named by its one prompt token ``PROMPT + r``; logits ``[lp, log(1 - e^lp)]`` over a 2-token vocabulary
    give ``log_softmax(.)[0] = lp`` exactly and ``d log_softmax(.)[0] / d lp = 1``, so the gradient of a loss by
    ``lp`` is its gradient by the trainer's log-prob of each sampled token."""

    PROMPT = 10

    def __init__(self, lp: list[list[float]]) -> None:
        super().__init__()
        self.lp = torch.nn.Parameter(torch.tensor(lp, dtype=F64))

    def set(self, lp: list[list[float]]) -> None:
        with torch.no_grad():
            self.lp.copy_(torch.tensor(lp, dtype=F64))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, use_cache: bool = False,
                **_: object) -> SimpleNamespace:
        rows = self.lp[input_ids[:, 0] - self.PROMPT]  # [B, T]: position j predicts response token j
        width = input_ids.shape[1]
        if rows.shape[1] < width:
            rows = torch.nn.functional.pad(rows, (0, width - rows.shape[1]), value=-1.0)
        rows = rows[:, :width]
        return SimpleNamespace(logits=torch.stack([rows, torch.log(-torch.expm1(rows))], dim=-1))


def _cfg(tmp_path: Path, algo: str, staleness: int, **loss):
    return load_config({
        "algorithm": algo, "output_dir": str(tmp_path / "run"), "mini_batches": 1,
        "model": {"name_or_path": "demo", "logprob_head": "full", "share_prompt": "off"},
        "rollout": {"group_size": 3, "prompts_per_step": 1, "max_staleness": staleness, "sandbox": None},
        "loss": loss,
    })


def _ctx(cfg, model: LogProbTable, tmp_path: Path) -> StepContext:
    def old_logprobs(trajs):  # what Trainer.old_logprobs does: the module's no-grad log-probs, before the update
        with torch.no_grad():
            lp, _ = response_logprobs(model, collate(trajs), temperature=1.0, head="full")
        return [lp[i, : len(t.response_ids)].float() for i, t in enumerate(trajs)]

    return StepContext(cfg=cfg, model=model, module=model, tokenizer=None, pad_id=0, device="cpu", out_dir=tmp_path,
                       dist=DistInfo(), temperature=1.0, collate=lambda trajs: collate(trajs, 0),
                       old_logprobs=old_logprobs, autocast=contextlib.nullcontext)


REWARDS = [1.0, 0.0, 0.25]


def _groups() -> list[list[Trajectory]]:
    return [[Trajectory(task_id="t0", group_id="g0", prompt_ids=[LogProbTable.PROMPT + r], response_ids=[0] * 6,
                        loss_mask=list(MASK[r]), behavior_logprobs=[s if m else 0.0 for s, m in
                                                                     zip(SAMPLER[r], MASK[r], strict=True)],
                        reward=REWARDS[r]) for r in range(3)]]


def _grpo_advantages() -> list[float]:
    mean, sd = statistics.fmean(REWARDS), statistics.stdev(REWARDS)  # docs/algorithms/ctpo.md, "Advantages"
    return [(r - mean) / (sd + 1e-6) for r in REWARDS]


def _objective_loss(tmp_path: Path, algo: str, staleness: int, **loss):
    """prepare at the step's starting weights (OLD), then the loss at the weights of a later mini-batch."""
    cfg = _cfg(tmp_path, algo, staleness, **loss)
    model = LogProbTable(OLD)
    ctx = _ctx(cfg, model, tmp_path)
    obj = get_algorithm(algo).objective(cfg)
    batch, prep = obj.prepare(ctx, _groups())
    model.set(_logp(algo))
    n_tok = float(sum(map(sum, MASK)))
    out, _ = obj.loss(ctx, batch, [0, 1, 2], n_tok, 3.0)
    out.backward()
    return out.detach(), model.lp.grad, batch, prep


@pytest.mark.parametrize("algo", ["ctpo", "grpo", "gspo"])
@pytest.mark.parametrize("staleness", [1, 3])
def test_objective_at_staleness_k_equals_the_formula_token_by_token(tmp_path: Path, algo: str, staleness: int) -> None:
    loss, grad, batch, prep = _objective_loss(tmp_path, algo, staleness)
    assert batch.own_old_rows == frozenset()  # stale rows never take the on-policy shortcut
    weights = [expected_weight(o, s, m) for o, s, m in zip(OLD, SAMPLER, MASK, strict=True)]
    values, grads = expected_pg_terms(_logp(algo), OLD, MASK, _grpo_advantages(), weights, PRESETS[algo])
    assert batch.seq_weight is not None
    for g, e in zip(batch.seq_weight.tolist(), weights, strict=True):
        assert g == pytest.approx(e, rel=2e-6)
    assert prep["mismatch_weight_mean"] == pytest.approx(sum(weights) / 3, rel=2e-6)
    assert prep["mismatch_weight_capped_frac"] == pytest.approx(1 / 3)
    assert float(loss) == pytest.approx(sum(map(sum, values)), rel=2e-6, abs=1e-7)
    for i, row in enumerate(MASK):
        for j in range(len(row)):
            assert float(grad[i, j]) == pytest.approx(grads[i][j], rel=2e-6, abs=1e-7), (i, j)


@pytest.mark.parametrize("algo", ["ctpo", "grpo", "gspo"])
def test_objective_at_staleness_0_is_todays_loss(tmp_path: Path, algo: str) -> None:
    """K = 0, mismatch_weight null: no weight; the same loss, bit for bit, as the weight switched off by hand; the
    exactly on-policy first mini-batch keeps its shortcut (old log-probs: the update's own, so rho = 1)."""
    loss0, grad0, batch0, prep0 = _objective_loss(tmp_path, algo, 0)
    off, grad_off, _, _ = _objective_loss(tmp_path, algo, 0, mismatch_weight=False)
    assert batch0.seq_weight is None and "mismatch_weight_mean" not in prep0
    assert batch0.own_old_rows == frozenset({0, 1, 2})
    assert torch.equal(loss0, off) and torch.equal(grad0, grad_off)
    values, grads = expected_pg_terms(_logp(algo), _logp(algo), MASK, _grpo_advantages(), [1.0] * 3, PRESETS[algo])
    assert float(loss0) == pytest.approx(sum(map(sum, values)), rel=2e-6, abs=1e-7)
    # explicit true at K = 0 is still honoured: the weight, and no shortcut
    loss1, grad1, batch1, _ = _objective_loss(tmp_path, algo, 0, mismatch_weight=True)
    weights = [expected_weight(o, s, m) for o, s, m in zip(OLD, SAMPLER, MASK, strict=True)]
    values1, _ = expected_pg_terms(_logp(algo), OLD, MASK, _grpo_advantages(), weights, PRESETS[algo])
    assert batch1.own_old_rows == frozenset()
    assert float(loss1) == pytest.approx(sum(map(sum, values1)), rel=2e-6, abs=1e-7)


@pytest.mark.parametrize("algo", ["ctpo", "grpo"])
def test_explicit_false_at_staleness_k_trains_uncorrected_with_a_warning_and_no_shortcut(tmp_path: Path,
                                                                                        algo: str) -> None:
    with pytest.warns(UserWarning, match=r"loss\.mismatch_weight: false with rollout\.max_staleness 2"):
        loss, grad, batch, _ = _objective_loss(tmp_path, algo, 2, mismatch_weight=False)
    assert batch.seq_weight is None and batch.own_old_rows == frozenset()
    # the ratio is against the step's starting weights (OLD), not 1 as the shortcut would make it
    values, grads = expected_pg_terms(_logp(algo), OLD, MASK, _grpo_advantages(), [1.0] * 3, PRESETS[algo])
    assert float(loss) == pytest.approx(sum(map(sum, values)), rel=2e-6, abs=1e-7)
    for i, row in enumerate(MASK):
        for j in range(len(row)):
            assert float(grad[i, j]) == pytest.approx(grads[i][j], rel=2e-6, abs=1e-7)


def test_on_policy_shortcut_never_applies_at_staleness_k(tmp_path: Path) -> None:
    model = LogProbTable(OLD)
    for k, loss, want in [(0, {}, {0, 1, 2}), (1, {}, set()), (2, {"mismatch_weight": False}, set()),
                          (0, {"mismatch_weight": True}, set())]:
        cfg = _cfg(tmp_path, "ctpo", k, **loss)
        assert on_policy_rows(_ctx(cfg, model, tmp_path), _groups()) == want, (k, loss)
    # a config changed with dataclasses.replace resolves null the same way (no stale resolution at load)
    cfg = _cfg(tmp_path, "ctpo", 0)
    cfg = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, max_staleness=2))
    assert cfg.mismatch_weight_on and on_policy_rows(_ctx(cfg, model, tmp_path), _groups()) == frozenset()


# ------------------------------------------------------------------ MOPD through the trainer's objective

MOPD_GAP = [0.4, -0.7, 2.5, 0.1, 1.9, -0.2]  # per row, spread over its policy tokens; rows 2 and 4 over the cap


def _mopd_trainer(tmp_path: Path):
    from toolgym.training.trainer import Trainer

    from .trainer_util import tiny_config

    data = tiny_config(tmp_path / "run", algorithm="mopd", sft__enabled=False, rollout__sandbox=None,
                       model={"name_or_path": "demo", "model_kwargs": {"layers": 1, "hidden": 32, "heads": 2,
                              "intermediate": 64, "max_positions": 1024, "vocab_size": 300}},
                       options={"k": 20, "max_teacher_tokens": 512})
    data.pop("mini_batches")  # the algorithm's: one on-policy mini-batch
    tr = Trainer(load_config(data), console=False)
    tr.build()
    return tr


def _mopd_groups(tr) -> list[list[Trajectory]]:
    g = torch.Generator().manual_seed(0)
    out = []
    for gi, rewards in enumerate([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]):
        msgs = [{"role": "user", "content": f"What is {gi} + 1?"}]
        prompt = tr.template.prompt_ids(msgs)
        out.append([Trajectory(task_id=f"t{gi}", group_id=f"g{gi}", prompt_ids=prompt,
                               response_ids=torch.randint(3, 300, (6,), generator=g).tolist(),
                               loss_mask=[1, 1, 0, 0, 1, 1], behavior_logprobs=[0.0] * 6, reward=r,
                               turns=msgs + [{"role": "assistant", "content": "x"}]) for r in rewards])
    trajs = [t for grp in out for t in grp]
    # the sampler's log-probs: the trainer's at the step's starting weights minus a known gap per row
    for t, old, gap in zip(trajs, tr.old_logprobs(trajs), MOPD_GAP, strict=True):
        n = sum(t.loss_mask)
        t.behavior_logprobs = [float(o) - gap / n if m else 0.0 for o, m in zip(old.tolist(), t.loss_mask, strict=True)]
    return out


def _mopd_row_losses(tr, cfg, groups) -> tuple[list[float], object]:
    obj = get_algorithm("mopd").objective(cfg)
    batch, _ = obj.prepare(tr.ctx, groups)
    g = torch.Generator().manual_seed(1)  # a teacher away from the student: divergences well above float32 noise
    with torch.no_grad():
        for p in obj.teacher.model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))
    return [float(obj.loss(tr.ctx, batch, [i], 4.0, 1.0)[0].detach()) for i in range(6)], batch


def test_mopd_objective_at_staleness_k_weighs_each_sequence(tmp_path: Path) -> None:
    """K >= 1: each sequence's distillation loss is W_i times its loss without the weight (rho = 1: one mini-batch
    at the step's starting weights); K = 0 is today's loss bit for bit."""
    tr = _mopd_trainer(tmp_path)
    groups = _mopd_groups(tr)
    base = tr.cfg
    assert base.rollout.max_staleness == 0 and base.loss.mismatch_weight is None
    today, batch0 = _mopd_row_losses(tr, base, groups)
    off, _ = _mopd_row_losses(tr, dataclasses.replace(base, loss=dataclasses.replace(base.loss, mismatch_weight=False)),
                              groups)
    assert batch0.seq_weight is None and today == off
    assert all(v > 1e-4 for v in today), today
    stale = dataclasses.replace(base, rollout=dataclasses.replace(base.rollout, max_staleness=2))
    weighted, batch2 = _mopd_row_losses(tr, stale, groups)
    want = [min(math.exp(g), CAP) for g in MOPD_GAP]
    assert want[2] == want[4] == CAP
    assert batch2.seq_weight is not None
    for i in range(6):
        assert float(batch2.seq_weight[i]) == pytest.approx(want[i], rel=1e-5)
        assert weighted[i] == pytest.approx(want[i] * today[i], rel=1e-5), i
