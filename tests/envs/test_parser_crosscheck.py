"""toolgym's tool-call parsers against vLLM's own parsers for the same formats, on the strings of
tests/envs/parser_cases.py: equal calls (names and arguments) on every string but those marked
`Differs`, and on those exactly the documented difference. vLLM runs in its own virtual environment
(.venv-vllm), through tests/envs/vllm_parsers_script.py; which tokenizer each vLLM parser gets is
said there. The per-format table in docs/tool-calling.md is checked against the cases here."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.envs.parser_cases import CASES, TOOLS, WHY, Differs
from tests.requirements import need
from toolgym.envs.parsing import FORMATS, get_parser

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-vllm"
DOC = ROOT / "docs" / "tool-calling.md"


def test_every_format_has_at_least_30_cases_with_malformed_ones():
    assert set(CASES) == set(FORMATS)
    for fmt, texts in CASES.items():
        assert len(texts) >= 30, fmt
        turns = [get_parser(fmt).parse(t, tools=TOOLS) for t in texts]
        assert sum(bool(t.calls) for t in turns) >= 10, f"{fmt}: too few well-formed calls"
        assert sum(bool(t.errors) for t in turns) >= 5, f"{fmt}: too few malformed calls"
        assert sum(not t.has_tool_activity for t in turns) >= 5, f"{fmt}: too few strings that are no call"


def table() -> list[tuple[str, int, int, int, dict[str, int]]]:
    """(format, strings, equal, deliberate differences, differences by reason) per format."""
    rows = []
    for fmt, texts in CASES.items():
        diffs = [t.reason for t in texts if isinstance(t, Differs)]
        by = {r: diffs.count(r) for r in WHY if r in diffs}
        rows.append((fmt, len(texts), len(texts) - len(diffs), len(diffs), by))
    return rows


def test_docs_table_matches_the_cases():
    """The cross-check table in docs/tool-calling.md says what the cases and the vLLM test establish."""
    text = DOC.read_text()
    for fmt, n, equal, ndiff, by in table():
        m = re.search(rf"^\| `{fmt}` \| (\d+) \| (\d+) \| (\d+) \| ([^|]*)\|", text, re.M)
        assert m, f"docs/tool-calling.md has no row for {fmt}"
        assert (int(m[1]), int(m[2]), int(m[3])) == (n, equal, ndiff), fmt
        assert {r: int(k) for k, r in re.findall(r"(\d+) ([a-z-]+)", m[4])} == by, fmt
    for reason in WHY:
        assert f"`{reason}`" in text, f"docs/tool-calling.md does not explain {reason}"


@pytest.fixture(scope="module")
def vllm_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    from toolgym.assets import asset_path

    need((VENV / "bin" / "python").exists(), f"{VENV} is missing: run scripts/setup_vllm.sh")
    try:
        qwen3 = Path(asset_path("qwen3-tokenizer"))
    except Exception:
        qwen3 = Path("/nonexistent")
    need(qwen3.exists(), "the qwen3-tokenizer asset is missing: run `toolgym assets fetch qwen3-tokenizer`")
    spec = tmp_path_factory.mktemp("xcheck") / "cases.json"
    spec.write_text(json.dumps({"cases": CASES, "tools": TOOLS, "qwen3_tokenizer": str(qwen3)}))
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([str(VENV / "bin" / "python"), str(Path(__file__).with_name("vllm_parsers_script.py")),
                           str(spec)], capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _theirs(result: Any) -> Any:
    """vLLM's calls with arguments decoded where they are JSON (vLLM returns them as a string)."""
    if isinstance(result, dict):
        return result
    out = []
    for name, args in result:
        try:
            args = json.loads(args)
        except (TypeError, ValueError, RecursionError):
            pass
        out.append([name, args])
    return out


def _documented(reason: str, ours: Any, theirs: Any) -> bool:
    """Whether the difference is the one WHY[reason] describes."""
    calls, errors = [[c.name, c.arguments] for c in ours.calls], ours.errors
    raised = isinstance(theirs, dict)
    if reason == "never-raises":
        return raised and "RecursionError" in theirs["error"] and not calls and bool(errors)
    if raised:
        return False
    if reason == "keeps-good-calls":
        return bool(calls) and bool(errors) and theirs == []
    if reason == "object-arguments":
        return bool(errors) and len(calls) < len(theirs) and any(not isinstance(a, dict) for _, a in theirs)
    if reason == "needs-a-name":
        return bool(errors) and not calls and any(not n or " " in n for n, _ in theirs)
    if reason in ("cut-off", "no-recovery"):
        return bool(errors) and not calls and bool(theirs) and all(a == {} for _, a in theirs)
    if reason == "decodes-strings":
        return len(calls) == len(theirs) == 1 and isinstance(theirs[0][1], str) and json.loads(theirs[0][1]) == calls[0][1]
    if reason == "empty-is-none":
        return calls and calls[0][1] == {} and theirs and theirs[0][1] == ""
    if reason == "reads-variant":
        return bool(calls) and not errors and theirs == []
    if reason == "own-value":
        return ([n for n, _ in calls] == [n for n, _ in theirs]
                and all(set(b) < set(a) for (_, a), (_, b) in zip(calls, theirs, strict=True)))
    raise AssertionError(reason)


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("fmt", list(CASES))
def test_calls_equal_vllms_but_for_the_documented_differences(fmt: str, vllm_results: dict[str, list[Any]]) -> None:
    parser = get_parser(fmt)
    results = vllm_results[fmt]
    assert len(results) == len(CASES[fmt])
    mismatches = []
    for text, result in zip(CASES[fmt], results, strict=True):
        ours = parser.parse(text, tools=TOOLS)
        theirs = _theirs(result)
        mine = [[c.name, c.arguments] for c in ours.calls]
        if isinstance(text, Differs):
            if mine == theirs or not _documented(text.reason, ours, theirs):
                mismatches.append(f"documented as {text.reason} but: ours={mine} {[e.message for e in ours.errors]} "
                                  f"vllm={str(theirs)[:200]} for {text[:120]!r}")
        elif mine != theirs:
            mismatches.append(f"ours={str(mine)[:200]} vllm={str(theirs)[:200]} for {text[:120]!r}")
    assert not mismatches, "\n".join(mismatches)
