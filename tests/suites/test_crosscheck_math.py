"""Cross-check: toolgym's math grading (math_equal, and MathTIR-v0's rubric on whole solutions, as
generate mode grades them)
agrees with math-verify on MATH-500 gold answers. Every disagreement is printed.

Pairs: each gold answer against itself in \\boxed{} (should match), each reference solution against
its gold (should match), and each gold against the next problem's gold (mostly should not).
"""

from __future__ import annotations

import pytest

from tests.requirements import need, need_module

need_module("math_verify")  # under CI a missing one fails the run instead of skipping it

from toolgym.errors import AssetError  # noqa: E402

pytestmark = pytest.mark.slow  # measured over 1 s each (the fast tier leaves them out)


@pytest.fixture(scope="module")
def math500() -> list[dict]:
    from toolgym import assets

    try:
        return assets.load_records("math500")
    except AssetError as exc:
        need(False, f"the math500 asset is unavailable: {exc}")
        raise


def _mv(gold: str, pred: str) -> bool:
    from math_verify import parse, verify

    try:
        return bool(verify(parse(f"${gold}$"), parse(pred)))
    except Exception:  # math-verify errors count as "not equal", as in its own evaluation
        return False


def test_math_equal_agrees_with_math_verify_on_math500(math500: list[dict], capsys) -> None:
    import toolgym
    from toolgym.envs.tasks.math_records import math_task
    from toolgym.envs.verifiers import math_equal
    from toolgym.suites.grading import grade_all

    with_solution = [(i, rec) for i, rec in enumerate(math500) if rec.get("solution")]
    tasks = [math_task(rec, i, style="generate") for i, rec in with_solution]
    env = toolgym.make("toolgym/MathTIR-v0", dataset=tasks, sandbox=None)
    verdicts = {t.id: g.correct for t, g in zip(tasks, grade_all(env, "math", [(t, rec["solution"]) for t, (_, rec)
                                                                                in zip(tasks, with_solution, strict=True)]),
                                                    strict=True)}
    env.close()
    rows = []
    for i, rec in enumerate(math500):
        gold = rec["answer"]
        nxt = math500[(i + 1) % len(math500)]["answer"]
        rows.append(("self", rec["id"], gold, f"\\boxed{{{gold}}}", math_equal(f"\\boxed{{{gold}}}", gold)))
        if rec.get("solution"):
            rows.append(("solution", rec["id"], gold, rec["solution"], verdicts[rec["id"]]))
        rows.append(("other", rec["id"], gold, f"\\boxed{{{nxt}}}", math_equal(f"\\boxed{{{nxt}}}", gold)))
    disagreements = []
    for kind, rid, gold, pred, ours in rows:
        theirs = _mv(gold, pred)
        if ours != theirs:
            disagreements.append((kind, rid, gold, pred if kind != "solution" else "<solution>", ours, theirs))
    with capsys.disabled():
        print(f"\nmath-verify cross-check on MATH-500: {len(rows)} pairs, {len(disagreements)} disagreements")
        for kind, rid, gold, pred, ours, theirs in disagreements:
            print(f"  DISAGREE [{kind}] {rid}: gold={gold!r} pred={pred[:60]!r} toolgym={ours} math-verify={theirs}")
    self_ok = [r for r in rows if r[0] == "self"]
    assert all(r[4] for r in self_ok), "math_equal must accept every gold answer against itself"
    assert len(disagreements) <= 0.02 * len(rows)
