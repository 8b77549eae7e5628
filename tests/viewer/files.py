"""The rollout files the viewer is tested on: a real training step, a real `toolgym rollout`, and a hostile file
made by editing a real file's episodes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from toolgym.agents.storage import meta_path, read_header, read_jsonl
from toolgym.agents.token_text import token_text_path, write_token_text

from ..signal_env import register_signal_arith
from ..training.trainer_util import tiny_config

TOOLGYM = str(Path(sys.executable).parent / "toolgym")  # the installed console script

# What a model might write to attack a viewer. Each payload, if it ever ran, would set window.__pwned, change the
# title, or request http://127.0.0.1:9/pwned-... (the test watches all three).
PWN = "window.__pwned = 1; document.title = 'pwned'; fetch('http://127.0.0.1:9/pwned-fetch')"
HOSTILE = [
    f"<script>{PWN}</script>",
    f"<img src=\"http://127.0.0.1:9/pwned-img\" onerror=\"{PWN}\">",
    f"<a href=\"javascript:{PWN}\">click</a> javascript:{PWN}",
    f"</script><script>{PWN}</script><!--",
    f"<svg onload=\"{PWN}\"></svg><iframe srcdoc=\"<script>parent.__pwned=1</script>\"></iframe>",
    "<style>body { display: none }</style><meta http-equiv=\"refresh\" content=\"0;url=http://127.0.0.1:9/pwned-meta\">",
    "@@SCRIPT@@ @@BOOT@@ {{7*7}} ${7*7} \\u003cscript\\u003e",  # the page template's markers, and escapes as text
    "right-to-left \u202eevil.exe\u202c, zero\u200bwidth, joiner\u200d, bom\ufeff, line\u2028para\u2029end, "
    "tag\U000e0041, nul\x00, lone \ud800 surrogate",
]


def train_step(out: Path) -> Path:
    """One real CTPO step of the tiny demo model with its rollouts saved; returns the step file.

    The model is warm-started (SFT) on demonstrations that call the Python tool, so episodes call it, and the
    environment is tests/SignalArith-v0, whose reward differs between any two episodes: advantages are
    non-zero, and with two mini-batches at a large learning rate the clip cuts tokens of the second."""
    from toolgym.training.config import load_config
    from toolgym.training.trainer import train

    cfg = tiny_config(out, steps=1, checkpoint={"every": 0}, optimizer={"lr": 5e-2},
                      logging={"progress": False, "plot": False, "save_rollouts": True})
    cfg["model"]["model_kwargs"].update(hidden=64, heads=4, intermediate=128, max_positions=256, vocab_size=320)
    cfg["sft"].update(demos=300, epochs=3, lr=5e-3, batch_size=32, max_seq_len=128, tool_fraction=1.0,
                      direct_correct=0.3)
    cfg["rollout"].update(prompts_per_step=4, group_size=4, max_new_tokens=24, max_response_tokens=96, max_turns=3)
    cfg["rollout"]["env_kwargs"].update(max_turns=3, ops="+")
    cfg["rollout"]["temperature"] = 0.3  # the warm-started model then closes its python blocks often enough to run
    cfg["rollout"]["env"] = register_signal_arith()
    train(load_config(cfg), console=False)
    return out / "rollouts" / "step-0001.jsonl"


def rollout(model: Path, out: Path) -> Path:
    """`toolgym rollout` of a model folder on the real Arith environment (its Python tool in the sandbox)."""
    res = subprocess.run([TOOLGYM, "rollout", "toolgym/Arith-v0", "--model", str(model), "--tasks", "3", "--group",
                          "3", "--max-tokens", "24", "--max-turns", "3", "-k", "min_digits=1", "-k", "max_digits=2",
                          "-k", "ops=+", "--out", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    return out


def _dumps(obj: Any) -> str:
    # ensure_ascii: a lone surrogate can only be stored as an escape
    return json.dumps(obj, ensure_ascii=True)


def hostile(src: Path, out_dir: Path) -> Path:
    """Every text field of `src`'s episodes (turns, tool calls and results, ids, finish reasons, reward names,
    errors, metadata), its run metadata and token texts replaced by or mixed with HOSTILE; the file's own name
    is hostile too. Rewards become 0, 0.5, 1 in turn."""
    out = out_dir / "hostile <img src=x onerror=window.__pwned=1>.jsonl"
    lines = []
    for n, t in enumerate(read_jsonl(src)):
        h = HOSTILE[n % len(HOSTILE)]
        d = t.to_dict()
        d["task_id"] = f"task-{n // 3} {h}"
        d["group_id"] = f"group-{n // 3} {h}"
        d["finish_reason"] = ["answer", h, "max_turns"][n % 3]
        d["reward"] = [0.0, 0.5, 1.0][n % 3]
        d["reward_breakdown"] = {h: d["reward"]}
        d["error"] = h if n % 4 == 0 else None
        d["turns"] = [
            {"role": "system", "content": h},
            {"role": "user", "content": f"What is 2 + 2? {h}"},
            {"role": "assistant", "content": f"Let me compute. {h}",
             "tool_calls": [{"id": h, "type": "function", "function": {"name": h, "arguments": {"code": h, h: h}}}]},
            {"role": "tool", "name": h, "tool_call_id": h, "content": h},
            {"role": h, "content": h, h: h},
            {"role": "assistant", "content": f"Answer: 4 {h}", "finish_reason": "length"},
        ]
        d["metadata"] = {**d["metadata"], "note": h, "tools": [{"type": "function", "function": {"name": h}}],
                         "train": {"advantage": 0.5, "passes": 1, "trained": True,
                                   "clip": {"high": [0, 1, -5, 10**9, h], h: [2]}}}
        lines.append(_dumps(d) + "\n")
    out.write_text("".join(lines), encoding="utf-8")
    header = read_header(src)
    header["meta"] = {**header.get("meta", {}), "model": HOSTILE[0], "env_id": HOSTILE[3], "sampler": HOSTILE[1]}
    meta_path(out).write_text(_dumps(header), encoding="utf-8")
    ids = {i for t in read_jsonl(src) for i in t.response_ids}
    write_token_text(out, {i: HOSTILE[i % len(HOSTILE)] for i in ids}, HOSTILE[2])
    assert token_text_path(out).exists()
    return out
