"""Parity with lm-evaluation-harness 0.4.13: the same requests, log-likelihoods, acc/acc_norm and `results`.

lm-eval's side is its own code throughout: the installed task YAMLs (arc, openbookqa, sciq, mmlu/default)
loaded by its YAML loader into `ConfigurableTask`s, whose `build_all_requests` renders the prompts, and
`lm_eval.evaluator.evaluate` with its `HFLM` model class scoring them and computing `results`. The Hub is not
reachable here, so each task's `custom_dataset` hands it toolgym's local asset records converted back to the
Hugging Face dataset schema the YAML expects (the task's templates, choices and targets are untouched).
toolgym's side is `toolgym bench`'s runner in loglik mode on the same records, writing report.json.

Tolerance: |delta log-likelihood| <= 1e-3 nats per request (measured: 1.3e-05; the packed batch and
lm-eval's padded batch sum float32 logits in a different order), and identical acc/acc_norm per question.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.requirements import need
from toolgym.errors import AssetError

TOL = 1e-3  # nats per request
# Few, short documents per dataset for the scoring test (one CPU forward per lm-eval request).
MMLU_SUBJECTS = ("abstract_algebra", "college_physics")  # both stem: one group with two subjects



def _lm_eval_root() -> Path:
    try:
        import lm_eval.tasks
    except ImportError:
        need(False, "lm-eval is not installed (pip install 'toolgym[eval]')")
    return Path(lm_eval.tasks.__file__).parent


def _records(name: str) -> list[dict[str, Any]]:
    from toolgym.assets import load_records

    try:
        return list(load_records(name))
    except AssetError as exc:
        need(False, f"asset {name} is missing ({exc}): toolgym assets fetch {name}")
    raise AssertionError("unreachable")


def _hf_doc(dataset: str, rec: dict[str, Any]) -> dict[str, Any]:
    """A toolgym asset record in the Hugging Face schema lm-eval's YAML for `dataset` reads."""
    labels, choices = rec["labels"], rec["choices"]
    if dataset == "mmlu":
        return {"question": rec["question"], "subject": rec["subject"], "choices": choices,
                "answer": labels.index(rec["answer"])}
    if dataset == "sciq":  # lm-eval lists the three distractors, then the correct answer (target 3)
        gold = labels.index(rec["answer"])
        wrong = [c for i, c in enumerate(choices) if i != gold]
        return {"question": rec["question"], "support": rec.get("support") or "", "correct_answer": choices[gold],
                **{f"distractor{i + 1}": w for i, w in enumerate(wrong)}}
    key = "question_stem" if dataset == "openbookqa" else "question"
    return {"id": rec["id"], key: rec["question"], "choices": {"text": choices, "label": labels},
            "answerKey": rec["answer"]}


def _yaml(dataset: str, subject: str | None = None) -> Path:
    root = _lm_eval_root()
    return {"arc_easy": root / "arc/arc_easy.yaml", "arc_challenge": root / "arc/arc_challenge.yaml",
            "openbookqa": root / "openbookqa/openbookqa.yaml", "sciq": root / "sciq/sciq.yaml",
            "mmlu": root / f"mmlu/default/mmlu_{subject}.yaml"}[dataset]


def _lm_eval_task(dataset: str, recs: list[dict[str, Any]], subject: str | None = None) -> Any:
    """lm-eval's ConfigurableTask for `dataset` from its installed YAML, reading `recs` as its data."""
    import datasets
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    cfg = dict(load_yaml(_yaml(dataset, subject), resolve_func=True))
    cfg.pop("tag", None)
    data = datasets.Dataset.from_list([_hf_doc(dataset, r) for r in recs])
    splits = {cfg.get(k) for k in ("training_split", "validation_split", "test_split", "fewshot_split")} - {None}
    cfg["custom_dataset"] = lambda **_: datasets.DatasetDict({s: data for s in splits})
    return ConfigurableTask(config=cfg)


def _lm_eval_requests(task: Any) -> dict[int, list[tuple[str, str]]]:
    task.build_all_requests(rank=0, world_size=1)
    out: dict[int, list[tuple[str, str]]] = {}
    for inst in sorted(task.instances, key=lambda i: (i.doc_id, i.idx)):
        out.setdefault(inst.doc_id, []).append(tuple(inst.args))
    return out


def _toolgym_requests(dataset: str, recs: list[dict[str, Any]]) -> list[list[tuple[str, str]]]:
    from toolgym.envs.tasks.multiple_choice import mc_task
    from toolgym.suites.loglik import TARGET_DELIMITER

    reqs = [mc_task(r, i, style="loglik", dataset=dataset).metadata["loglik"] for i, r in enumerate(recs)]
    return [[(q["context"], TARGET_DELIMITER + c) for c in q["continuations"]] for q in reqs]


@pytest.fixture(scope="module")
def hf_offline():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        yield


@pytest.mark.parametrize("dataset,n", [("arc_easy", 200), ("arc_challenge", 200), ("openbookqa", 200),
                                       pytest.param("sciq", 1000, marks=pytest.mark.slow)])
def test_contexts_and_continuations_equal_lm_evals_requests(hf_offline, dataset: str, n: int) -> None:
    recs = _records(dataset)[:n]
    if dataset == "sciq":  # the empty-support case keeps lm-eval's leading newline
        assert any(not r.get("support") for r in recs)
    want = _lm_eval_requests(_lm_eval_task(dataset, recs))
    got = _toolgym_requests(dataset, recs)
    assert len(want) == len(got) == len(recs)
    for i, rec in enumerate(recs):
        if dataset == "sciq":  # the asset shuffles SciQ's choices; lm-eval puts the correct one last
            assert sorted(got[i]) == sorted(want[i]), rec["id"]
            assert want[i][-1][1] == " " + rec["choices"][rec["labels"].index(rec["answer"])]
        else:
            assert got[i] == want[i], rec["id"]


@pytest.mark.slow
def test_mmlu_prompts_carry_lm_evals_subject_description(hf_offline) -> None:
    from toolgym.suites.lmeval import lmeval_task_name

    by_subject: dict[str, list[dict[str, Any]]] = {}
    for r in _records("mmlu"):
        by_subject.setdefault(r["subject"], []).append(r)
    assert len(by_subject) == 57
    for subject, recs in sorted(by_subject.items()):
        want = _lm_eval_requests(_lm_eval_task("mmlu", recs[:3], subject))
        got = _toolgym_requests("mmlu", recs[:3])
        assert [want[i] for i in range(len(got))] == got, subject
        words = subject.replace("_", " ")
        assert got[0][0][0].startswith(f"The following are multiple choice questions (with answers) about {words}.\n\n")
        assert [c for _, c in got[0]] == [" A", " B", " C", " D"]
    assert lmeval_task_name("mmlu", recs[0]["subject"]) == f"mmlu_{subject}"


def test_mmlu_categories_match_lm_evals_tags(hf_offline) -> None:
    from lm_eval.tasks._yaml_loader import load_yaml

    from toolgym.envs.tasks.multiple_choice import MMLU_STEM
    from toolgym.suites.lmeval import MMLU_CATEGORIES

    tags: dict[str, set[str]] = {}
    for path in sorted((_lm_eval_root() / "mmlu/default").glob("mmlu_*.yaml")):
        cfg = load_yaml(path, resolve_func=False)
        tags.setdefault(cfg["tag"].removeprefix("mmlu_").removesuffix("_tasks"), set()).add(cfg["dataset_name"])
    assert {k: set(v) for k, v in MMLU_CATEGORIES.items()} == tags
    assert set(MMLU_STEM) == tags["stem"]


def _shortest(recs: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    def size(r: dict[str, Any]) -> int:
        return len(r["question"]) + len(r.get("support") or "") + sum(len(c) for c in r["choices"])

    return sorted(recs, key=lambda r: (size(r), r["id"]))[:k]


@pytest.mark.slow
def test_loglikelihoods_acc_and_results_equal_lm_evals_hflm(hf_offline, tmp_path: Path) -> None:
    from toolgym.assets import asset_path

    try:
        model_dir = asset_path("smollm2-135m-instruct")
    except AssetError:
        need(False, "the smollm2-135m-instruct asset is missing: toolgym assets fetch smollm2-135m-instruct")
    _lm_eval_root()
    from lm_eval.api.metrics import aggregate_subtask_metrics, pooled_sample_stderr
    from lm_eval.evaluator import evaluate
    from lm_eval.models.huggingface import HFLM

    from toolgym.suites.registry import suite_from_dict
    from toolgym.suites.runner import BenchConfig, run_benchmark

    picked: dict[str, list[dict[str, Any]]] = {
        "arc_easy": _shortest(_records("arc_easy"), 3), "arc_challenge": _shortest(_records("arc_challenge"), 2),
        "openbookqa": _shortest(_records("openbookqa"), 2), "sciq": _shortest(_records("sciq"), 2)}
    mmlu = _records("mmlu")
    for s in MMLU_SUBJECTS:
        picked[f"mmlu_{s}"] = _shortest([r for r in mmlu if r["subject"] == s], 2)

    # lm-eval: its tasks, its HF model class, its evaluator.
    tasks = {}
    for name, recs in picked.items():
        subject = name.removeprefix("mmlu_") if name.startswith("mmlu_") else None
        tasks[name] = _lm_eval_task("mmlu" if subject else name, recs, subject)
    lm = HFLM(pretrained=str(model_dir), device="cpu", batch_size=8)
    ref = evaluate(lm=lm, task_dict={"tasks": tasks, "groups": {}, "group_map": {}}, log_samples=True,
                   bootstrap_iters=1000, verbosity="WARNING")
    del lm

    # toolgym: the bench runner in loglik mode on the same records.
    entries = []
    for name, recs in picked.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
        entries.append({"name": name, "env": "toolgym/ScienceQA-v0", "source": f"asset:{path}", "metric": "acc",
                        "options": {"dataset": "mmlu" if name.startswith("mmlu_") else name}})
    suite = suite_from_dict({"name": "lmeval-parity", "entries": entries})
    cfg = BenchConfig(suite="lmeval-parity", model=str(model_dir), mode="loglik", device="cpu", batch=8)
    report = run_benchmark(cfg, tmp_path / "out", log=lambda _: None, suite=suite)
    records = {(r["entry"], r["id"]): r for r in map(json.loads, (tmp_path / "out/records.jsonl").open())}
    assert json.loads((tmp_path / "out/report.json").read_text())["results"] == report["results"]

    worst = 0.0
    for name, recs in picked.items():
        samples = {s["doc_id"]: s for s in ref["samples"][name]}
        assert len(samples) == len(recs)
        for i, rec in enumerate(recs):
            s, mine = samples[i], records[(name, rec["id"])]
            assert mine["lmeval_task"] == name
            theirs = {cont: ll for (_, cont), (ll, _) in zip(s["arguments"], s["filtered_resps"], strict=True)}
            ours = {" " + c: ll for c, ll in zip(_toolgym_choices(name, rec), mine["logliks"], strict=True)}
            assert theirs.keys() == ours.keys()
            for cont, ll in theirs.items():
                worst = max(worst, abs(ll - ours[cont]))
            assert mine["acc"] == s["acc"], (name, rec["id"])
            if "acc_norm" in s:
                assert mine["acc_norm"] == s["acc_norm"], (name, rec["id"])
    print(f"max |delta loglik| = {worst:.2e} nats over {sum(len(v) for v in picked.values())} questions")
    assert worst <= TOL

    ours, theirs = report["results"], ref["results"]
    for name in picked:
        assert ours[name]["alias"] == theirs[name]["alias"]
        assert ours[name]["sample_len"] == theirs[name]["sample_len"]
        metric_keys = {k for k in theirs[name] if "," in k}
        assert metric_keys == {k for k in ours[name] if "," in k}, name
        for k in metric_keys:
            assert ours[name][k] == pytest.approx(theirs[name][k], abs=1e-12), (name, k)
    leaves = [theirs[f"mmlu_{s}"] for s in MMLU_SUBJECTS]  # lm-eval's group arithmetic on its own leaves
    sizes = [leaf["sample_len"] for leaf in leaves]
    acc = aggregate_subtask_metrics([leaf["acc,none"] for leaf in leaves], sizes, True)
    assert ours["mmlu_stem"]["acc,none"] == pytest.approx(acc, abs=1e-12)
    stderrs = [leaf["acc_stderr,none"] for leaf in leaves]
    assert ours["mmlu_stem"]["acc_stderr,none"] == pytest.approx(pooled_sample_stderr(stderrs, sizes), abs=1e-12)
    assert "mmlu_other" not in ours and "mmlu" not in ours  # only the stem category ran
    assert all(math.isfinite(v) for e in ours.values() for k, v in e.items() if k.endswith(",none")
               and not isinstance(v, str))


def _toolgym_choices(name: str, rec: dict[str, Any]) -> list[str]:
    """The choice strings toolgym scored for a record, in its order (MMLU: the letters)."""
    return list(rec["labels"]) if name.startswith("mmlu_") else list(rec["choices"])
