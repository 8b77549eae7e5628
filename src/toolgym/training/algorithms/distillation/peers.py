"""MOPD peer selection and teacher context (docs/algorithms/mopd.md, "Peer selection", "Teacher prompt").

For each rollout of a group, pick peers of the same prompt (successes in group order, one
random failure), build the teacher context, and render the teacher's prompt. Pure Python: the
tensor side lives in ``mopd_batch`` and ``mopd_loss``.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Mode = Literal["positive", "contrastive", "sdpo"]

# Section wording (a recorded run parameter; meaning and order: docs/algorithms/mopd.md, "Teacher prompt").
H_SUCCESS = "Here is a correct solution to this problem:"
H_SUCCESS_2 = "Here is another, different correct solution to this problem:"
H_FAILURE = "Here is a solution to this problem that is known to be wrong. Do not repeat its mistake:"
H_FEEDBACK = "Here is feedback on your earlier unsuccessful attempt at this problem:"
H_PEER = "Here is another attempt at this problem:"  # label-free controls (analysis only)
CLOSING_INSTRUCTION = "Now solve the original problem correctly."
TRUNCATION_MARKER = "\n[... truncated ...]\n"

TEMPLATE_STRINGS: dict[str, str] = {
    "H_SUCCESS": H_SUCCESS,
    "H_SUCCESS_2": H_SUCCESS_2,
    "H_FAILURE": H_FAILURE,
    "H_FEEDBACK": H_FEEDBACK,
    "H_PEER": H_PEER,
    "CLOSING_INSTRUCTION": CLOSING_INSTRUCTION,
}


@dataclass
class PeerSelection:
    """Indices into the group: successes in group order (at most 2), failures (at most 1)."""

    successes: list[int] = field(default_factory=list)
    failures: list[int] = field(default_factory=list)


def select_peers(
    rewards: Sequence[float],
    index: int,
    mode: Mode = "contrastive",
    threshold: float = 0.5,
    rng: random.Random | None = None,
    *,
    failure: Literal["random", "first"] = "random",
    failure_when: Literal["always", "no_success"] = "always",
) -> PeerSelection:
    """Select the peers rollout ``index`` may see; never ``index`` itself.

    ``mode``: ``contrastive`` (MOPD 2S1F), ``positive`` (up to 2 successes, no failure) or
    ``sdpo`` (the first success only). ``failure="first"`` takes the first other failure
    (the deterministic analysis setting) instead of a uniform draw with ``rng``.
    ``failure_when="no_success"`` attaches the failure only when no success peer exists.
    """
    if mode not in ("positive", "contrastive", "sdpo"):
        raise ValueError(f"mode must be 'positive', 'contrastive' or 'sdpo', got {mode!r}")
    if not 0 <= index < len(rewards):
        raise IndexError(f"index {index} out of range for a group of {len(rewards)}")
    others_s = [j for j, r in enumerate(rewards) if r >= threshold and j != index]
    others_f = [j for j, r in enumerate(rewards) if r < threshold and j != index]
    successes = others_s[: 1 if mode == "sdpo" else 2]
    failures: list[int] = []
    if mode == "contrastive" and others_f and (failure_when == "always" or not successes):
        if failure == "first":
            failures = [others_f[0]]
        else:
            failures = [(rng or random.Random()).choice(others_f)]
    return PeerSelection(successes=successes, failures=failures)


def peer_rng(seed: int, step: int, uid: str, index: int) -> random.Random:
    """A generator for one rollout's failure draw, derived from (run seed, step, group uid, index)."""
    digest = hashlib.sha256(f"{seed}|{step}|{uid}|{index}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


@dataclass
class Section:
    header: str
    body: str
    kind: str  # "success", "success_2", "failure", "feedback", "peer"


@dataclass
class TeacherContext:
    """The privileged context of one rollout: the problem and its labelled peer sections."""

    problem: str
    sections: list[Section] = field(default_factory=list)
    selection: PeerSelection = field(default_factory=PeerSelection)
    truncated: bool = False

    @property
    def seq_mask(self) -> int:
        """1 if any section is present; an empty context trains nothing (docs/algorithms/mopd.md,
        "Peer selection")."""
        return int(bool(self.sections))

    def has(self, kind: str) -> bool:
        return any(s.kind == kind for s in self.sections)


def seq_mask(contexts: Sequence[TeacherContext]) -> list[int]:
    """Per-rollout sequence mask: 0 exactly when the teacher context has no section."""
    return [c.seq_mask for c in contexts]


def build_context(
    problem: str,
    responses: Sequence[str],
    selection: PeerSelection,
    *,
    feedback: str | None = None,
    use_feedback: bool = True,
) -> TeacherContext:
    """Turn a selection into ordered sections: success, second success, failure, own feedback.

    Own feedback is used only when enabled, non-empty, and there is no success peer.
    """
    sections: list[Section] = []
    if selection.successes:
        sections.append(Section(H_SUCCESS, responses[selection.successes[0]], "success"))
    if len(selection.successes) > 1:
        sections.append(Section(H_SUCCESS_2, responses[selection.successes[1]], "success_2"))
    for j in selection.failures[:1]:
        sections.append(Section(H_FAILURE, responses[j], "failure"))
    if use_feedback and feedback and not selection.successes:
        sections.append(Section(H_FEEDBACK, feedback, "feedback"))
    return TeacherContext(problem=problem, sections=sections, selection=selection)


def group_contexts(
    problem: str,
    responses: Sequence[str],
    rewards: Sequence[float],
    *,
    mode: Mode = "contrastive",
    threshold: float = 0.5,
    feedbacks: Sequence[str | None] | None = None,
    use_feedback: bool = True,
    seed: int = 0,
    step: int = 0,
    uid: str = "",
) -> list[TeacherContext]:
    """Contexts for every rollout of one group (one prompt); groups never mix."""
    if len(responses) != len(rewards):
        raise ValueError(f"{len(responses)} responses but {len(rewards)} rewards")
    out = []
    for i in range(len(rewards)):
        sel = select_peers(rewards, i, mode, threshold, peer_rng(seed, step, uid, i))
        fb = feedbacks[i] if feedbacks is not None else None
        out.append(build_context(problem, responses, sel, feedback=fb, use_feedback=use_feedback))
    return out


def batch_contexts(
    problems: Sequence[str],
    responses: Sequence[str],
    rewards: Sequence[float],
    uids: Sequence[str],
    *,
    mode: Mode = "contrastive",
    threshold: float = 0.5,
    feedbacks: Sequence[str | None] | None = None,
    use_feedback: bool = True,
    seed: int = 0,
    step: int = 0,
) -> list[TeacherContext]:
    """Contexts for a flat batch in batch order; rollouts are grouped by ``uids`` (groups never mix),
    and within a group peers keep batch order."""
    n = len(responses)
    if not (len(problems) == len(rewards) == len(uids) == n):
        raise ValueError("problems, responses, rewards and uids must have the same length")
    members: dict[str, list[int]] = {}
    for b, u in enumerate(uids):
        members.setdefault(u, []).append(b)
    out: list[TeacherContext | None] = [None] * n
    for u, rows in members.items():
        ctxs = group_contexts(
            problems[rows[0]],
            [responses[b] for b in rows],
            [rewards[b] for b in rows],
            mode=mode,
            threshold=threshold,
            feedbacks=[feedbacks[b] for b in rows] if feedbacks is not None else None,
            use_feedback=use_feedback,
            seed=seed,
            step=step,
            uid=u,
        )
        for b, c in zip(rows, ctxs, strict=True):
            # selection indices are translated back to batch rows
            sel = c.selection
            c.selection = PeerSelection([rows[j] for j in sel.successes], [rows[j] for j in sel.failures])
            out[b] = c
    return [c for c in out if c is not None]


def _section_text(header: str, body: str) -> str:
    return "\n" + header + "\n\n" + body + "\n\n"


def render_teacher_text(ctx: TeacherContext) -> str:
    """The teacher's user message: problem, sections in order, closing instruction if any section."""
    if not ctx.sections:
        return ctx.problem
    return ctx.problem + "".join(_section_text(s.header, s.body) for s in ctx.sections) + "\n" + CLOSING_INSTRUCTION


def problem_of(messages: Sequence[dict[str, Any]]) -> str:
    """The problem text x: the content of the last user message."""
    for m in reversed(messages):
        if m.get("role") == "user":
            return str(m.get("content", ""))
    raise ValueError("the prompt has no user message")


def teacher_messages(messages: Sequence[dict[str, Any]], ctx: TeacherContext) -> list[dict[str, Any]]:
    """System messages unchanged, then one user message holding the rendered teacher text."""
    system = [dict(m) for m in messages if m.get("role") == "system"]
    return system + [{"role": "user", "content": render_teacher_text(ctx)}]


def _shorten(tokenizer: Any, ids: list[int], keep: int) -> str:
    """Keep the first and last ``keep // 2`` tokens of a text, joined by the truncation marker."""
    keep = max(keep, 0)
    head = (keep + 1) // 2
    tail = keep - head
    text = tokenizer.decode(ids[:head]) + TRUNCATION_MARKER
    return text + tokenizer.decode(ids[len(ids) - tail:]) if tail else text


def render_teacher_prompt_ids(
    tokenizer: Any,
    messages: Sequence[dict[str, Any]],
    ctx: TeacherContext,
    *,
    max_tokens: int = 10240,
    template_kwargs: dict[str, Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    chat_template: Any = None,
) -> tuple[list[int], TeacherContext]:
    """Chat-templated teacher prompt ids, at most ``max_tokens`` long. ``tools``: the student's tool schemas,
    rendered exactly as the student's prompt rendered them, so the system turn is the student's
    (``chat_template``: the :class:`~toolgym.agents.chat.ChatTemplate` to render them with, made once per batch).

    When too long, the longest section body is middle-truncated first (repeatedly), so the
    problem, the headers, the closing instruction and the generation header always survive.
    Returns the ids and the (possibly truncated) context; ``ctx.truncated`` records it.
    """
    kw = dict(template_kwargs or {})

    if tools and chat_template is None:
        from toolgym.agents.chat import ChatTemplate

        chat_template = ChatTemplate(tokenizer, kw or None)

    def encode_prompt(c: TeacherContext) -> list[int]:
        if tools:
            return chat_template.prompt_ids(teacher_messages(messages, c), tools)
        text = tokenizer.apply_chat_template(
            teacher_messages(messages, c), tokenize=False, add_generation_prompt=True, **kw
        )
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    def enc(s: str) -> list[int]:
        return list(tokenizer(s, add_special_tokens=False)["input_ids"])

    ids = encode_prompt(ctx)
    if len(ids) <= max_tokens:
        return ids, ctx
    sections = [Section(s.header, s.body, s.kind) for s in ctx.sections]
    marker = len(enc(TRUNCATION_MARKER)) + 2  # slack for merges at the cut
    for _ in range(4 * len(sections) + 8):
        over = len(ids) - max_tokens
        if over <= 0 or not sections:
            break
        bodies = [enc(s.body) for s in sections]
        j = max(range(len(sections)), key=lambda i: len(bodies[i]))
        if len(bodies[j]) <= marker:
            break
        sections[j].body = _shorten(tokenizer, bodies[j], len(bodies[j]) - over - marker)
        ctx = TeacherContext(ctx.problem, sections, ctx.selection, truncated=True)
        ids = encode_prompt(ctx)
    if len(ids) > max_tokens:
        # Only the problem itself is left to shorten: middle-truncate it as a last resort.
        p_ids = enc(ctx.problem)
        problem = _shorten(tokenizer, p_ids, len(p_ids) - (len(ids) - max_tokens) - marker)
        ctx = TeacherContext(problem, ctx.sections, ctx.selection, truncated=True)
        ids = encode_prompt(ctx)
    if len(ids) > max_tokens:
        raise ValueError(
            f"teacher prompt cannot fit in {max_tokens} tokens (template and headers alone take "
            f"{len(ids)}); raise max_teacher_prompt_tokens"
        )
    return ids, ctx


def context_stats(contexts: Sequence[TeacherContext], rewards: Sequence[float], group_ids: Sequence[str],
                  threshold: float = 0.5) -> dict[str, float]:
    """Fractions to log per step: success groups, primary/second/failure/feedback attached,
    trained rollouts (seq_mask = 1) and truncated teacher prompts."""
    n = max(len(contexts), 1)
    groups: dict[str, bool] = {}
    for g, r in zip(group_ids, rewards, strict=True):
        groups[g] = groups.get(g, False) or r >= threshold
    return {
        "mopd/success_group_frac": sum(groups.values()) / max(len(groups), 1),
        "mopd/primary_frac": sum(c.has("success") for c in contexts) / n,
        "mopd/second_frac": sum(c.has("success_2") for c in contexts) / n,
        "mopd/failure_frac": sum(c.has("failure") for c in contexts) / n,
        "mopd/feedback_frac": sum(c.has("feedback") for c in contexts) / n,
        "mopd/trained_frac": sum(c.seq_mask for c in contexts) / n,
        "mopd/truncated_frac": sum(c.truncated for c in contexts) / n,
    }
