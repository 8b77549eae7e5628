"""lm-eval-shaped `results` from toolgym's loglik records: means, lm-eval's stderrs, MMLU groups, report.json."""

from __future__ import annotations

import math

import pytest

from toolgym.suites.lmeval import lmeval_results, lmeval_task_name, mmlu_description


def _rec(task: str | None, i: int, acc: float, acc_norm: float | None = None) -> dict:
    return {"entry": "e", "id": f"{task}-{i}", "lmeval_task": task, "acc": acc,
            "acc_norm": acc if acc_norm is None else acc_norm}


def test_task_means_and_sample_stderr() -> None:
    recs = [_rec("arc_easy", i, a, n) for i, (a, n) in enumerate([(1, 1), (0, 1), (1, 0), (1, 1)])]
    res = lmeval_results(recs + [_rec(None, 9, 1.0)])  # a record without an lm-eval task is left out
    assert list(res) == ["arc_easy"]
    arc = res["arc_easy"]
    assert arc["alias"] == "arc_easy" and arc["sample_len"] == 4
    # mean 3/4; sample variance (3 * 0.25^2 + 0.75^2) / 3 = 0.25; stderr sqrt(0.25) / sqrt(4) = 0.25
    assert arc["acc,none"] == pytest.approx(0.75) and arc["acc_stderr,none"] == pytest.approx(0.25)
    assert arc["acc_norm,none"] == pytest.approx(0.75) and arc["acc_norm_stderr,none"] == pytest.approx(0.25)


def test_single_question_has_no_stderr_and_mmlu_reports_acc_only() -> None:
    res = lmeval_results([_rec("mmlu_anatomy", 0, 1.0)])
    assert res["mmlu_anatomy"] == {"alias": "anatomy", "sample_len": 1, "acc,none": 1.0, "acc_stderr,none": "N/A"}
    assert res["mmlu_stem"]["acc_stderr,none"] == "N/A"


def test_mmlu_groups_pool_their_subjects() -> None:
    recs = ([_rec("mmlu_anatomy", i, a) for i, a in enumerate([1, 0])]
            + [_rec("mmlu_astronomy", i, a) for i, a in enumerate([1, 1, 1, 0])]
            + [_rec("mmlu_virology", i, a) for i, a in enumerate([0, 1])])
    res = lmeval_results(recs)
    assert set(res) == {"mmlu_anatomy", "mmlu_astronomy", "mmlu_virology", "mmlu_stem", "mmlu_other"}
    stem = res["mmlu_stem"]
    assert stem["alias"] == "stem" and stem["sample_len"] == 6
    assert stem["acc,none"] == pytest.approx(4 / 6)  # size-weighted: (0.5 * 2 + 0.75 * 4) / 6
    se_a, se_b = res["mmlu_anatomy"]["acc_stderr,none"], res["mmlu_astronomy"]["acc_stderr,none"]
    pooled = math.sqrt(((2 - 1) * se_a**2 * 2 + (4 - 1) * se_b**2 * 4) / (6 - 2) / 6)
    assert stem["acc_stderr,none"] == pytest.approx(pooled)
    assert "mmlu" not in res  # only when all four categories ran


def test_names_and_description() -> None:
    assert lmeval_task_name("mmlu", "high_school_biology") == "mmlu_high_school_biology"
    assert lmeval_task_name("arc_challenge") == "arc_challenge"
    assert lmeval_task_name("gpqa_diamond") is None and lmeval_task_name("mmlu") is None
    assert mmlu_description("high_school_biology") == (
        "The following are multiple choice questions (with answers) about high school biology.\n\n")
