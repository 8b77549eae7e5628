"""Every documented command runs as written: the shell and Python blocks of README.md and docs/ are executed.

One test per page: its blocks run in order in a fresh folder (with `examples/`, `benchmarks/`, `scripts/` and the
virtual environments linked in), Python blocks in one namespace, as a reader would run the page top to bottom.
Long commands run in a short form (SHORT_FORMS below: the same command with fewer steps or tasks). A block can
be left out only by a visible line right above it in the page, `<!-- docs-test: skip: REASON -->`; a block
marked `<!-- docs-test: slow -->` makes its page's test slow. No hand-set environment variable is passed on:
the commands get this process's environment without VLLM_CPU_KVCACHE_SPACE (the vLLM CPU sampler sizes its
cache itself), so a page that needs one fails.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from ..requirements import need

ROOT = Path(__file__).resolve().parents[2]
RUN_LANGS = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python", "py": "python"}
DIRECTIVE = re.compile(r"^<!--\s*docs-test:\s*(skip|slow)\s*(?::\s*(.*?))?\s*-->$")

# A demo-sized training run: one step of 4 prompts, a short warm start, a small evaluation.
TINY_TRAIN = ("-s steps=1 -s sft.demos=300 -s sft.epochs=1 -s eval.tasks=8 -s rollout.prompts_per_step=4 "
              "-s mini_batches=2")
# long form (as the page shows it) -> the form the test runs; each must match some block (checked below)
SHORT_FORMS = {
    "--tasks 4 --group 4 --out arith.jsonl": "--tasks 1 --group 2 --max-tokens 32 --out arith.jsonl",
    "toolgym train examples/arith_ctpo.yaml": f"toolgym train examples/arith_ctpo.yaml {TINY_TRAIN}",
    "toolgym sft examples/arith_ctpo.yaml": "toolgym sft examples/arith_ctpo.yaml -s sft.demos=300 -s sft.epochs=1",
    "-s steps=50": "-s steps=2",
    "--mode loglik   # writes": "--mode loglik --subset arc_easy --limit 4   # writes",
    "--limit 20": "--subset humaneval --limit 1 --max-tokens 32",
    "toolgym bench code --subset kattis --model smollm2-135m-instruct":
        "toolgym bench code --subset kattis --model smollm2-135m-instruct --limit 1 --max-tokens 32",
    '"steps=2", "sft.demos=500"': '"steps=1", "sft.demos=300"',
    '["steps=2", "output_dir=runs/from_script"]': '["steps=1", "sft.demos=300", "eval.tasks=8", "output_dir=runs/from_script"]',
    'subset="arc_easy", limit=20)': 'subset="arc_easy", limit=4)',
}


@dataclass
class Block:
    file: str
    line: int
    lang: str
    code: str
    skip: str | None = None
    slow: bool = False


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    """The fenced shell and Python blocks of a Markdown file, with the directive written right above each."""
    lines = path.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = re.match(r"^```\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        lang = RUN_LANGS.get(m.group(1).lower())
        if lang:
            b = Block(str(path.relative_to(ROOT)), i + 1, lang, "\n".join(lines[i + 1:j]) + "\n")
            k = i - 1
            while k >= 0 and lines[k].startswith("<!--"):
                d = DIRECTIVE.match(lines[k].strip())
                if d and d.group(1) == "skip":
                    b.skip = d.group(2) or ""
                elif d:
                    b.slow = True
                k -= 1
            out.append(b)
        i = j + 1
    return out


def short_form(code: str) -> str:
    for long, short in SHORT_FORMS.items():
        code = code.replace(long, short)
    return code


# Pages whose blocks a journey test runs in an empty folder and checks (tests/journeys/): not run twice here.
JOURNEY_PAGES = {"docs/walkthrough.md": "tests/journeys/test_own_env.py"}


def pages() -> list:
    params = []
    for f in doc_files():
        if str(f.relative_to(ROOT)) in JOURNEY_PAGES:
            continue
        bs = blocks_of(f)
        if any(b.skip is None for b in bs):
            marks = [pytest.mark.slow] if any(b.slow and b.skip is None for b in bs) else []
            params.append(pytest.param(f, id=str(f.relative_to(ROOT)), marks=marks))
    return params


def test_every_skip_gives_a_reason_and_every_short_form_is_used() -> None:
    every = [b for f in doc_files() for b in blocks_of(f)]
    for b in every:
        assert b.skip is None or len(b.skip) > 10, f"{b.file}:{b.line}: a skipped block needs its reason"
    for long in SHORT_FORMS:
        assert any(long in b.code for b in every if b.skip is None), f"SHORT_FORMS entry no block uses: {long!r}"
    skipped = [f"{b.file}:{b.line} ({b.skip})" for b in every if b.skip is not None]
    assert len(skipped) <= len(every) // 3, f"too many blocks left out: {skipped}"


def test_no_documented_command_sets_the_vllm_kv_cache_by_hand() -> None:
    for f in doc_files():
        for b in blocks_of(f):
            assert "VLLM_CPU_KVCACHE_SPACE" not in b.code, f"{b.file}:{b.line} sets VLLM_CPU_KVCACHE_SPACE"


def _workdir(tmp: Path) -> Path:
    """A fresh folder that looks like a checkout to the commands: relative paths resolve, outputs land here."""
    tmp.mkdir(parents=True)
    for name in ("examples", "benchmarks", "scripts", "src", "pyproject.toml"):
        (tmp / name).symlink_to(ROOT / name)
    (tmp / ".venv").symlink_to(Path(sys.prefix))
    if (ROOT / ".venv-vllm").exists():
        (tmp / ".venv-vllm").symlink_to(ROOT / ".venv-vllm")
    return tmp


@pytest.mark.parametrize("page", pages())
def test_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    todo = [b for b in blocks_of(page) if b.skip is None]
    if any(".venv-vllm/" in b.code for b in todo):
        need((ROOT / ".venv-vllm" / "bin" / "python").exists(), "no .venv-vllm (scripts/setup.sh --vllm makes it)")
    for b in todo:
        b.code = short_form(b.code)
    work = _workdir(tmp_path / "work")
    spec = tmp_path / "blocks.json"
    spec.write_text(json.dumps([asdict(b) for b in todo]))
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("run_blocks.py")), str(spec)], cwd=work,
                          env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, f"{page.name}:\n{proc.stderr[-5000:]}\n--- stdout:\n{proc.stdout[-3000:]}"
