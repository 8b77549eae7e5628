"""End-to-end runs on small local data: generate mode from a completions file (math, multiple choice),
loglik mode with a tiny saved model, resume, reports, plots and compare."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolgym.errors import ConfigError
from toolgym.suites.compare import compare_reports, format_comparison
from toolgym.suites.registry import suite_from_dict
from toolgym.suites.runner import BenchConfig, run_benchmark

MATH = [
    {"id": "m1", "question": "1+1?", "answer": "2", "solution": ""},
    {"id": "m2", "question": "Half of one?", "answer": "\\frac{1}{2}", "solution": ""},
    {"id": "m3", "question": "3*3?", "answer": "9", "solution": ""},
]
MC = [
    {"id": "c1", "question": "Which gas do plants absorb from the air?", "choices": ["oxygen", "carbon dioxide"],
     "labels": ["A", "B"], "answer": "B"},
    {"id": "c2", "question": "What is the boiling point of water at sea level?",
     "choices": ["100 degrees Celsius", "0 degrees"], "labels": ["A", "B"], "answer": "A"},
    {"id": "c3", "question": "Energy?", "choices": ["fox", "is conserved", "nothing"], "labels": ["A", "B", "C"],
     "answer": "B"},
]


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _suite(tmp_path: Path):
    return suite_from_dict({"name": "mini", "entries": [
        {"name": "math", "env": "toolgym/MathTIR-v0", "source": "asset:" + _jsonl(tmp_path / "math.jsonl", MATH),
         "metric": "pass@1", "options": {"dataset": "math500"}},
        {"name": "sci", "env": "toolgym/ScienceQA-v0", "source": "asset:" + _jsonl(tmp_path / "mc.jsonl", MC),
         "metric": "acc_norm", "options": {"dataset": "arc_easy"}},
        {"name": "gpqa", "env": "toolgym/ScienceQA-v0", "source": "gpqa:$TOOLGYM_TEST_UNSET_VAR", "metric": "acc",
         "optional": True},
    ]})


def test_generate_mode_grades_resumes_and_reports(tmp_path: Path) -> None:
    comp = _jsonl(tmp_path / "a.jsonl", [
        {"entry": "math", "id": "m1", "completions": ["so \\boxed{2}", "\\boxed{3}", "\\boxed{2}", "none"]},
        {"entry": "math", "id": "m2", "completions": ["\\boxed{0.5}", "\\boxed{0.5}", "\\boxed{1}", "\\boxed{1}"]},
        {"entry": "math", "id": "m3", "completions": ["\\boxed{8}"] * 4},
        {"entry": "sci", "id": "c1", "completions": ["The answer is (B)."] * 4},
        {"entry": "sci", "id": "c2", "completions": ["The answer is (B)."] * 3 + ["The answer is (A)."]},
        {"entry": "sci", "id": "c3", "completions": ["The answer is (B)."] * 4},
    ])
    out = tmp_path / "run"
    cfg = BenchConfig(suite="mini", model="file", mode="generate", samples=4, temperature=1.0, completions=comp)
    logs: list[str] = []
    rep = run_benchmark(cfg, out, log=logs.append, suite=_suite(tmp_path))
    math = rep["entries"]["math"]
    # m1: 2 of 4 right, m2: 2 of 4 (0.5 == 1/2), m3: 0 of 4
    assert math["metrics"]["pass@1"]["mean"] == pytest.approx((0.5 + 0.5 + 0) / 3)
    assert math["metrics"]["pass@2"]["mean"] == pytest.approx((5 / 6 + 5 / 6 + 0) / 3)  # 1 - C(2,2)/C(4,2)
    assert math["metrics"]["maj@4"]["mean"] == pytest.approx(2 / 3)  # m1: "2" wins; m2: 0.5/1 tie -> 0.5 (first); m3: 8
    assert math["task_scores"] == {"m1": 0.5, "m2": 0.5, "m3": 0.0}
    sci = rep["entries"]["sci"]
    assert sci["headline"] == "avg@4" and sci["metrics"]["avg@4"]["mean"] == pytest.approx((1 + 0.25 + 1) / 3)
    assert "gpqa" in rep["skipped"]
    for f in ("report.json", "report.md", "bars.png", "passk.png", "records.jsonl", "config.json"):
        assert (out / f).is_file(), f
    assert (out / "bars.png").read_bytes()[:4] == b"\x89PNG"
    md = (out / "report.md").read_text()
    assert "| math | 3/3 | pass@1 |" in md and "gpqa" in md
    env = rep["environment"]
    assert env["versions"]["toolgym"] and "commit" in env["git"] and rep["config"]["seed"] == 0

    # resume: nothing is redone, the report is the same
    logs.clear()
    rep2 = run_benchmark(cfg, out, log=logs.append, suite=_suite(tmp_path))
    assert any("3 already done" in m for m in logs)
    assert rep2["entries"]["math"]["metrics"] == math["metrics"]
    assert len((out / "records.jsonl").read_text().splitlines()) == 6
    # a different config in the same folder is refused
    with pytest.raises(ConfigError, match="different"):
        run_benchmark(BenchConfig(suite="mini", model="other", mode="generate", samples=4, temperature=1.0,
                                  completions=comp), out, log=logs.append, suite=_suite(tmp_path))


def test_partial_run_resumes_only_missing_tasks(tmp_path: Path) -> None:
    comp = _jsonl(tmp_path / "c.jsonl", [{"id": r["id"], "completion": "\\boxed{2}"} for r in MATH])
    out = tmp_path / "run"
    cfg = BenchConfig(suite="mini", model="f", subset="math", completions=comp)
    # Simulate an interrupted run: one finished record, then a torn half-written line.
    out.mkdir()
    (out / "config.json").write_text(json.dumps(cfg.to_dict()))
    (out / "records.jsonl").write_text(json.dumps({"entry": "math", "id": "m1", "kind": "math", "correct": [True],
                                                   "answers": ["2"], "samples": [{"text": "old"}]}) + '\n{"entry": "ma')
    logs: list[str] = []
    rep = run_benchmark(cfg, out, log=logs.append, suite=_suite(tmp_path))
    assert any("1 already done" in m for m in logs)
    assert rep["entries"]["math"]["task_scores"] == {"m1": 1.0, "m2": 0.0, "m3": 0.0}
    lines = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines() if x.startswith('{"entry": "math", "id"')]
    assert [r["id"] for r in lines] == ["m1", "m2", "m3"] and lines[0]["samples"][0]["text"] == "old"


def test_compare_reports_flags_a_real_difference(tmp_path: Path) -> None:
    rows = [{"id": f"m{i}", "question": "q", "answer": str(i)} for i in range(60)]
    src = _jsonl(tmp_path / "many.jsonl", rows)
    suite = suite_from_dict({"name": "m", "entries": [
        {"name": "math", "env": "toolgym/MathTIR-v0", "source": "asset:" + src, "metric": "pass@1",
         "options": {"dataset": "gsm8k"}}]})
    good = _jsonl(tmp_path / "good.jsonl", [{"id": f"m{i}", "completion": f"\\boxed{{{i}}}"} for i in range(60)])
    weak = _jsonl(tmp_path / "weak.jsonl", [{"id": f"m{i}", "completion": f"\\boxed{{{i if i < 20 else -1}}}"}
                                            for i in range(60)])
    ra = run_benchmark(BenchConfig(suite="m", model="weak", completions=weak), tmp_path / "a", log=lambda m: None,
                       suite=suite)
    rb = run_benchmark(BenchConfig(suite="m", model="good", completions=good), tmp_path / "b", log=lambda m: None,
                       suite=suite)
    cmp = compare_reports(ra, rb)
    (row,) = cmp["entries"]
    assert row["n"] == 60 and row["delta"] == pytest.approx(40 / 60)
    assert row["discordant"] == (0, 40) and row["significant"] and row["p_mcnemar"] < 1e-6
    same = compare_reports(ra, ra)["entries"][0]
    assert not same["significant"] and same["delta"] == 0
    assert "McNemar" in format_comparison(cmp)


def test_loglik_mode_with_a_tiny_saved_model(tmp_path: Path, tiny_lm) -> None:
    from toolgym.envs.tasks.multiple_choice import mc_task
    from toolgym.suites.loglik import score_naive
    from toolgym.suites.loglik_mode import mc_items

    model, tok = tiny_lm
    tok.chat_template = None
    model.save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    rep = run_benchmark(BenchConfig(suite="mini", model=str(tmp_path / "tiny"), mode="loglik"), tmp_path / "out",
                        log=lambda m: None, suite=_suite(tmp_path))
    assert "math" in rep["skipped"] and "sci" in rep["entries"]
    ref = score_naive(model, tok, mc_items([mc_task(r, i, style="loglik", dataset="arc_easy") for i, r in enumerate(MC)]))
    sci = rep["entries"]["sci"]
    assert sci["headline"] == "acc_norm"
    assert sci["metrics"]["acc"]["mean"] == pytest.approx(sum(r.acc for r in ref) / 3)
    assert sci["metrics"]["acc_norm"]["mean"] == pytest.approx(sum(r.acc_norm for r in ref) / 3)
    recs = {(r := json.loads(x))["id"]: r for x in (tmp_path / "out" / "records.jsonl").read_text().splitlines()}
    assert sorted(recs) == sorted(w.id for w in ref)  # written in length order, keyed by id
    for want in ref:
        r = recs[want.id]
        assert max(abs(a - b) for a, b in zip(r["logliks"], want.logliks, strict=True)) < 1e-4


def test_bad_config_values() -> None:
    with pytest.raises(ConfigError, match="--mode"):
        BenchConfig(suite="x", model="m", mode="chat")
    with pytest.raises(ConfigError, match="temperature"):
        BenchConfig(suite="x", model="m", samples=4)


def test_the_callers_sigint_handler_is_left_alone(tmp_path: Path) -> None:
    """A library call keeps the caller's SIGINT handler: a SIGINT mid-run goes to it, and the run finishes."""
    import signal

    comp = _jsonl(tmp_path / "a.jsonl",
                  [{"entry": "math", "id": f"m{i}", "completion": "\\boxed{2}"} for i in (1, 2, 3)]
                  + [{"entry": "sci", "id": f"c{i}", "completion": "The answer is (B)."} for i in (1, 2, 3)])
    cfg = BenchConfig(suite="mini", model="file", mode="generate", completions=comp)
    calls: list[int] = []

    def callers_handler(signum, frame) -> None:
        calls.append(signum)

    def press_ctrl_c_after_math(msg: str) -> None:
        if msg.startswith("  math: 3/3"):
            signal.raise_signal(signal.SIGINT)

    previous = signal.signal(signal.SIGINT, callers_handler)
    try:
        rep = run_benchmark(cfg, tmp_path / "run", log=press_ctrl_c_after_math, suite=_suite(tmp_path))
        assert signal.getsignal(signal.SIGINT) is callers_handler
    finally:
        signal.signal(signal.SIGINT, previous or signal.default_int_handler)
    assert calls == [signal.SIGINT]
    assert "partial" not in rep and set(rep["entries"]) == {"math", "sci"}


def test_ctrl_c_writes_a_partial_report_and_the_same_command_resumes(tmp_path: Path) -> None:
    import signal

    from toolgym.suites.runner import Interrupted

    comp = _jsonl(tmp_path / "a.jsonl", [
        {"entry": "math", "id": "m1", "completion": "\\boxed{2}"},
        {"entry": "math", "id": "m2", "completion": "\\boxed{1}"},
        {"entry": "math", "id": "m3", "completion": "\\boxed{9}"},
        {"entry": "sci", "id": "c1", "completion": "The answer is (B)."},
        {"entry": "sci", "id": "c2", "completion": "The answer is (A)."},
        {"entry": "sci", "id": "c3", "completion": "The answer is (A)."},
    ])
    cfg = BenchConfig(suite="mini", model="file", mode="generate", completions=comp)
    out = tmp_path / "run"

    def press_ctrl_c_after_math(msg: str) -> None:  # a real SIGINT, delivered to this process
        if msg.startswith("  math: 3/3"):
            signal.raise_signal(signal.SIGINT)

    # The handler `python` installs at start, as the `toolgym bench` process has it: Ctrl-C raises
    # KeyboardInterrupt. Set here so the test does not depend on what earlier tests left behind.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(Interrupted, match="run the same command again"):
            run_benchmark(cfg, out, log=press_ctrl_c_after_math, suite=_suite(tmp_path))
    finally:
        signal.signal(signal.SIGINT, previous or signal.default_int_handler)
    part = json.loads((out / "report.json").read_text())
    assert part["partial"] is True and list(part["entries"]) == ["math"]
    assert part["entries"]["math"]["metrics"]["pass@1"]["mean"] == pytest.approx(2 / 3)
    assert "Partial run" in (out / "report.md").read_text()

    logs: list[str] = []
    rep = run_benchmark(cfg, out, log=logs.append, suite=_suite(tmp_path))
    assert "partial" not in rep and "- math: 3 tasks, 3 already done" in logs
    assert rep["entries"]["math"]["metrics"]["pass@1"]["mean"] == pytest.approx(2 / 3)
    assert rep["entries"]["sci"]["metrics"]["avg@1"]["mean"] == pytest.approx(2 / 3)
