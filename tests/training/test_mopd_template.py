"""Recipe B of the MOPD spec: teacher prompt rendering and truncation (golden strings)."""

from __future__ import annotations

import random

import pytest

from tests.training.mopd_tiny import tiny_tokenizer
from toolgym.training.algorithms.distillation.peers import (
    CLOSING_INSTRUCTION,
    H_FAILURE,
    H_FEEDBACK,
    H_SUCCESS,
    H_SUCCESS_2,
    TRUNCATION_MARKER,
    PeerSelection,
    build_context,
    context_stats,
    problem_of,
    render_teacher_prompt_ids,
    render_teacher_text,
    select_peers,
    teacher_messages,
)

TEXTS = ["r0 wrong", "r1 right", "r2 right too", "r3 wrong too"]


def test_section_order_golden() -> None:
    ctx = build_context("PROBLEM", TEXTS, PeerSelection(successes=[1, 2], failures=[3]), feedback="fb")
    expected = (
        "PROBLEM"
        f"\n{H_SUCCESS}\n\nr1 right\n\n"
        f"\n{H_SUCCESS_2}\n\nr2 right too\n\n"
        f"\n{H_FAILURE}\n\nr3 wrong too\n\n"
        f"\n{CLOSING_INSTRUCTION}"
    )
    assert render_teacher_text(ctx) == expected  # feedback dropped: a success peer exists


def test_failure_then_feedback_golden() -> None:
    ctx = build_context("PROBLEM", TEXTS, PeerSelection(successes=[], failures=[0]), feedback="tests 3, 5 fail")
    assert render_teacher_text(ctx) == (
        "PROBLEM"
        f"\n{H_FAILURE}\n\nr0 wrong\n\n"
        f"\n{H_FEEDBACK}\n\ntests 3, 5 fail\n\n"
        f"\n{CLOSING_INSTRUCTION}"
    )


def test_empty_context_is_the_raw_problem() -> None:
    problem = "  Raw problem\nwith spacing  "
    ctx = build_context(problem, TEXTS, PeerSelection())
    assert render_teacher_text(ctx) == problem
    assert ctx.seq_mask == 0
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": problem}]
    assert teacher_messages(msgs, ctx) == msgs  # identical to the student prompt


def test_messages_keep_system_and_make_one_user_turn() -> None:
    msgs = [
        {"role": "system", "content": "You are careful."},
        {"role": "user", "content": "example question"},
        {"role": "assistant", "content": "example answer"},
        {"role": "user", "content": "What is 3 plus 4?"},
    ]
    assert problem_of(msgs) == "What is 3 plus 4?"
    ctx = build_context(problem_of(msgs), TEXTS, PeerSelection(successes=[1]))
    tm = teacher_messages(msgs, ctx)
    assert tm == [
        {"role": "system", "content": "You are careful."},
        {"role": "user", "content": render_teacher_text(ctx)},
    ]
    tok = tiny_tokenizer()
    ids, out_ctx = render_teacher_prompt_ids(tok, msgs, ctx)
    assert not out_ctx.truncated
    text = tok.decode(ids)
    assert text == (
        "<|system|>You are careful.<|end|><|user|>What is 3 plus 4?"
        f"\n{H_SUCCESS}\n\nr1 right\n\n\n{CLOSING_INSTRUCTION}<|end|><|assistant|>"
    )
    with pytest.raises(ValueError):
        problem_of([{"role": "system", "content": "x"}])


def _long(tag: str, n: int) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def test_truncation_keeps_instruction_and_header() -> None:
    tok = tiny_tokenizer()
    texts = [_long("a", 400), _long("b", 60), _long("c", 300), "short failure"]
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "What is 3 plus 4?"}]
    ctx = build_context("What is 3 plus 4?", texts, PeerSelection(successes=[0, 1], failures=[3]))
    full_ids, _ = render_teacher_prompt_ids(tok, msgs, ctx, max_tokens=100_000)
    limit = len(full_ids) // 3
    ids, tctx = render_teacher_prompt_ids(tok, msgs, ctx, max_tokens=limit)
    assert len(ids) <= limit
    assert tctx.truncated and not ctx.truncated
    text = tok.decode(ids)
    assert text.startswith("<|system|>sys<|end|><|user|>What is 3 plus 4?\n")
    assert text.endswith(f"\n{CLOSING_INSTRUCTION}<|end|><|assistant|>")
    for h in (H_SUCCESS, H_SUCCESS_2, H_FAILURE):
        assert h in text
    assert "short failure" in text  # the short peer is untouched
    assert TRUNCATION_MARKER in tctx.sections[0].body  # the longest peer was cut first
    body = tctx.sections[0].body
    assert body.startswith("a0 a1") and body.endswith("a399")  # middle truncation keeps both ends
    stats = context_stats([tctx, ctx], [0, 0], ["g", "g"])
    assert stats["mopd/truncated_frac"] == 0.5


def test_truncation_of_several_peers_and_problem_fallback() -> None:
    tok = tiny_tokenizer()
    texts = [_long("a", 200), _long("b", 200), _long("c", 200)]
    msgs = [{"role": "user", "content": _long("p", 30)}]
    ctx = build_context(msgs[0]["content"], texts, PeerSelection(successes=[0, 1], failures=[2]))
    # the frame: every peer reduced to the marker, the problem intact
    bare = build_context(msgs[0]["content"], [TRUNCATION_MARKER.strip()] * 3, ctx.selection)
    frame = len(render_teacher_prompt_ids(tok, msgs, bare, max_tokens=100_000)[0])
    limit = frame + 60  # room for about one peer's worth in total
    ids, tctx = render_teacher_prompt_ids(tok, msgs, ctx, max_tokens=limit)
    assert len(ids) <= limit
    assert sum(TRUNCATION_MARKER.strip() in s.body for s in tctx.sections) >= 2
    assert tctx.problem == ctx.problem
    assert tok.decode(ids).endswith(f"{CLOSING_INSTRUCTION}<|end|><|assistant|>")
    # a limit below problem + headers: the problem is shortened last, the frame still survives
    ids, tctx = render_teacher_prompt_ids(tok, msgs, ctx, max_tokens=frame - 20)
    assert len(ids) <= frame - 20
    assert tctx.problem != ctx.problem and tctx.problem.startswith("p0 p1")
    text = tok.decode(ids)
    assert text.endswith(f"{CLOSING_INSTRUCTION}<|end|><|assistant|>")
    assert all(h in text for h in (H_SUCCESS, H_SUCCESS_2, H_FAILURE))
    with pytest.raises(ValueError, match="cannot fit"):
        render_teacher_prompt_ids(tok, msgs, ctx, max_tokens=20)


def test_context_stats_counts() -> None:
    rewards = [1, 0, 0, 0, 0, 0]
    uids = ["a", "a", "a", "b", "b", "b"]
    ctxs = []
    for lo in (0, 3):
        group = rewards[lo : lo + 3]
        for i in range(3):
            sel = select_peers(group, i, "positive", 0.5, random.Random(0))
            ctxs.append(build_context("P", TEXTS[:3], sel, feedback=None))
    st = context_stats(ctxs, rewards, uids)
    assert st["mopd/success_group_frac"] == 0.5
    assert st["mopd/primary_frac"] == pytest.approx(2 / 6)  # a's two failures see a0
    assert st["mopd/second_frac"] == 0.0
    assert st["mopd/failure_frac"] == 0.0
    assert st["mopd/trained_frac"] == pytest.approx(2 / 6)


@pytest.mark.parametrize("asset", ["smollm2-135m-instruct", "qwen3-tokenizer"])
def test_teacher_system_turn_keeps_the_students_tool_schemas(asset) -> None:
    """The method keeps the system message unchanged: with tools, the teacher's prompt must render them as
    the student's did (SmolLM2's template has no tool support: they go into the system turn; Qwen3's
    renders them itself)."""
    from transformers import AutoTokenizer

    from tests.agents.conftest import asset_dir
    from tests.requirements import need
    from toolgym.agents.chat import ChatTemplate
    from toolgym.agents.trajectory import Trajectory
    from toolgym.training.algorithms.distillation.step import build_mopd_batch

    path = asset_dir(asset)
    need(path is not None, f"the {asset} asset is missing: run `toolgym assets fetch {asset}`")
    tok = AutoTokenizer.from_pretrained(path)
    tools = [{"type": "function", "function": {"name": "python", "description": "Run Python code in a sandbox.",
                                               "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                                                              "required": ["code"]}}}]
    msgs = [{"role": "system", "content": "Solve it with the python tool."}, {"role": "user", "content": "What is 2 + 3?"}]
    student = ChatTemplate(tok).prompt_ids(msgs, tools)
    trajs = [Trajectory(task_id="t", group_id="g", prompt_ids=student, response_ids=tok.encode(text)[:8],
                        loss_mask=[1] * len(tok.encode(text)[:8]), behavior_logprobs=[0.0] * len(tok.encode(text)[:8]),
                        reward=r, turns=list(msgs), metadata={"tools": tools})
             for text, r in (("The answer is 5", 1.0), ("The answer is 6", 0.0))]
    mb = build_mopd_batch(trajs, tok, mode="contrastive")
    teacher = tok.decode(mb.teacher_prompts[1])  # the failed rollout sees the successful peer
    head = tok.decode(student).split("What is 2 + 3?")[0]
    assert "python" in head and "Run Python code in a sandbox." in head
    assert teacher.startswith(head), (head[-200:], teacher[: len(head) + 50][-250:])
    assert "The answer is 5" in teacher
    without = build_mopd_batch([Trajectory(**{**t.__dict__, "metadata": {}}) for t in trajs], tok, mode="contrastive")
    assert not tok.decode(without.teacher_prompts[1]).startswith(head)  # what the teacher saw before the fix
