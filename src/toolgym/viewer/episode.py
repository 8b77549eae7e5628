"""A stored trajectory as the page draws it: turns with tool calls and results apart, and the response's
tokens with their behaviour log-prob, advantage and clip events.

Everything here is data (strings and numbers), never markup: the page puts text into the document with
`textContent` only, so what a model wrote is shown, not run. Numbers that JSON cannot hold (NaN, inf)
become None.
"""

from __future__ import annotations

import json
from typing import Any

from toolgym.viewer.index import finite

_TURN_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id", "finish_reason")
_CLIP_KINDS = ("high", "low", "dual")


def _text(x: Any) -> str:
    if x is None:
        return ""
    return x if isinstance(x, str) else json.dumps(x, ensure_ascii=False, indent=1, default=str)


def _call(call: Any) -> dict[str, Any]:
    """One tool call: its name, and its arguments as text (a `code` argument apart, to read as code)."""
    fn = call.get("function", call) if isinstance(call, dict) else {}
    args = fn.get("arguments") if isinstance(fn, dict) else None
    if isinstance(args, str):  # OpenAI style: the arguments as a JSON string
        try:
            args = json.loads(args)
        except ValueError:
            pass
    code = None
    if isinstance(args, dict) and isinstance(args.get("code"), str):
        code = args["code"]
        args = {k: v for k, v in args.items() if k != "code"} or None
    return {"name": _text(fn.get("name") if isinstance(fn, dict) else call), "id": _text(call.get("id"))
            if isinstance(call, dict) else "", "code": code, "args": None if args is None else _text(args)}


def turn_view(m: Any) -> dict[str, Any]:
    """One message: role, text, the calls it made (assistant) or the call it answers (tool)."""
    if not isinstance(m, dict):
        return {"role": "?", "content": _text(m), "calls": []}
    out: dict[str, Any] = {"role": _text(m.get("role") or "?"), "content": _text(m.get("content")),
                           "calls": [_call(c) for c in m.get("tool_calls") or []]}
    if m.get("name") is not None:
        out["name"] = _text(m["name"])
    if m.get("tool_call_id"):
        out["call_id"] = _text(m["tool_call_id"])
    if m.get("finish_reason") == "length":
        out["cut"] = True
    rest = {k: v for k, v in m.items() if k not in _TURN_KEYS}
    if rest:  # e.g. reasoning_content: shown as it is stored
        out["extra"] = _text(rest)
    return out


def _parser(fmt: Any) -> Any:
    from toolgym.envs.parsing import FORMATS, get_parser

    return get_parser(f"{fmt if fmt in FORMATS else 'hermes'}+python")


def turns_view(turns: list[Any], fmt: Any) -> list[dict[str, Any]]:
    """All messages. The rollout runner stores an assistant turn as text; its calls are read back from that text
    with the model's format (`metadata["tool_parser"]`) or fenced python blocks, and kept only when a tool
    result answers their id (what the environment ran), so nothing is shown as a call that did not run."""
    out = [turn_view(m) for m in turns]
    parser = None
    n_assistant = 0
    for k, (m, v) in enumerate(zip(turns, out, strict=True)):
        if v["role"] != "assistant":
            continue
        n_assistant += 1
        if v["calls"] or not isinstance(m.get("content"), str):
            continue
        answered = set()
        for later in out[k + 1:]:
            if later["role"] != "tool":
                break
            answered.add(later.get("call_id"))
        if not answered - {None}:
            continue
        parser = parser or _parser(fmt)
        parsed = parser.parse(m["content"], n_assistant)
        v["calls"] = [{**_call(c.to_dict()), "parsed": True} for c in parsed.calls if c.id in answered]
    return out


def _train(train: Any, n: int) -> dict[str, Any] | None:
    """What a training step recorded (training/outputs/step_rollouts.py): the advantage (one number, or one per
    token) and the response positions the trust-region clip cut in at least one update pass."""
    if not isinstance(train, dict):
        return None
    adv = train.get("advantage")
    out: dict[str, Any] = {"advantage": [finite(a) for a in adv[:n]] if isinstance(adv, list) else finite(adv),
                           "passes": train.get("passes"), "trained": train.get("trained")}
    clip = train.get("clip") if isinstance(train.get("clip"), dict) else {}
    out["clip"] = {k: sorted({int(p) for p in clip.get(k) or [] if isinstance(p, int) and 0 <= p < n})
                   for k in _CLIP_KINDS}
    return out


def episode_view(obj: dict[str, Any], i: int, with_tokens: bool) -> dict[str, Any]:
    """Episode number `i` of a file (its stored record `obj`), as the page's JSON. `with_tokens`: include the
    response's token ids, mask and log-probs (only when the file has token pieces to show them with)."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    ids = obj.get("response_ids") or []
    view: dict[str, Any] = {
        "i": i, "task": _text(obj.get("task_id")), "group": _text(obj.get("group_id")),
        "env": _text(meta["env"]) if meta.get("env") is not None else None,  # a training run's environment
        "reward": finite(obj.get("reward")), "reward_text": _text(obj.get("reward")),
        "breakdown": [[_text(k), finite(v)] for k, v in (obj.get("reward_breakdown") or {}).items()],
        "finish": _text(obj.get("finish_reason")), "error": _text(obj.get("error")) or None,
        "turns": turns_view(list(obj.get("turns") or []), meta.get("tool_parser")),
        "tools": [_text((t.get("function") or t).get("name")) for t in meta.get("tools") or []
                  if isinstance(t, dict) and isinstance(t.get("function") or t, dict)],
        "meta": _text({k: v for k, v in meta.items() if k not in ("tools", "train")}),
        "timings": [[_text(k), finite(v)] for k, v in (obj.get("timings") or {}).items()],
        "prompt_tokens": len(obj.get("prompt_ids") or []), "train": _train(meta.get("train"), len(ids)),
    }
    if with_tokens and ids:
        lp = obj.get("behavior_logprobs") or []
        view["tokens"] = {"ids": [int(t) for t in ids], "mask": [1 if m else 0 for m in obj.get("loss_mask") or []],
                          "logp": [None if (v := finite(x)) is None else round(v, 4) for x in lp]}
    return view
