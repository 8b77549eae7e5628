"""Generate mode through real Sampler backends: HFSampler in process, and OpenAISampler against a
local OpenAI-compatible server (tests/agents/completion_server.py, HFSampler behind real HTTP).
Same seed, same model: the same completions, whichever backend samples them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from toolgym.suites.registry import suite_from_dict  # noqa: E402
from toolgym.suites.runner import BenchConfig, run_benchmark  # noqa: E402


def _suite(tmp_path: Path):
    data = tmp_path / "m.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"{i}+1?", "answer": str(i + 1)}) + "\n"
                            for i in range(3)))
    return suite_from_dict({"name": "s", "entries": [{"name": "m", "env": "toolgym/MathTIR-v0",
                                                      "source": f"asset:{data}", "metric": "pass@2",
                                                      "options": {"dataset": "gsm8k"}}]})


def _texts(out: Path) -> dict[str, list[str]]:
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    return {r["id"]: [s["text"] for s in r["samples"]] for r in recs}


@pytest.mark.slow
def test_generate_with_hf_and_openai_samplers(tmp_path: Path, tiny_dir: Path) -> None:
    from tests.agents.completion_server import CompletionServer
    from toolgym.agents.hf_sampler import HFSampler

    common = dict(suite="s", model=str(tiny_dir), samples=2, temperature=1.0, max_tokens=6, seed=3)
    rep = run_benchmark(BenchConfig(**common), tmp_path / "hf", log=lambda m: None, suite=_suite(tmp_path))
    m = rep["entries"]["m"]
    assert m["n"] == 3 and m["samples"] == 2 and set(m["metrics"]) >= {"pass@1", "pass@2", "avg@2"}
    again = run_benchmark(BenchConfig(**common), tmp_path / "hf2", log=lambda m: None, suite=_suite(tmp_path))
    assert _texts(tmp_path / "hf") == _texts(tmp_path / "hf2")  # seeded: reproducible
    assert again["entries"]["m"]["metrics"] == m["metrics"]

    with CompletionServer(HFSampler(str(tiny_dir))) as srv:
        run_benchmark(BenchConfig(**common, sampler="openai", base_url=srv.url), tmp_path / "oa",
                      log=lambda m: None, suite=_suite(tmp_path))
        assert srv.requests >= 3
    assert _texts(tmp_path / "oa") == _texts(tmp_path / "hf")


def test_tools_mode_runs_episodes_in_the_environment(tmp_path: Path, tiny_dir: Path) -> None:
    data = tmp_path / "mc.jsonl"
    rows = [{"id": f"s{i}", "question": f"Pick {i}?", "choices": ["red", "blue"], "labels": ["A", "B"],
             "answer": "A"} for i in range(2)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    suite = suite_from_dict({"name": "t", "entries": [{"name": "sci", "env": "toolgym/ScienceQA-v0",
                                                       "source": f"asset:{data}", "metric": "acc",
                                                       "options": {"dataset": "arc_easy"}}]})
    cfg = BenchConfig(suite="t", model=str(tiny_dir), mode="tools", samples=2, temperature=1.0, max_tokens=8)
    rep = run_benchmark(cfg, tmp_path / "tools", log=lambda m: None, suite=suite)
    sci = rep["entries"]["sci"]
    assert sci["n"] == 2 and sci["samples"] == 2
    recs = [json.loads(x) for x in (tmp_path / "tools" / "records.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in recs) == ["s0", "s1"]
    for r in recs:
        assert len(r["samples"]) == 2 and all(s["turns"] for s in r["samples"])
        # a sample counts only with full reward
        assert r["correct"] == [s["reward"] >= 1.0 and not s["error"] for s in r["samples"]]


def test_tools_mode_tool_parser_override_reaches_the_template(tiny_dir: Path) -> None:
    """--tool-parser (BenchConfig.tool_parser) is the format tools-mode episodes parse; unknown names fail early."""
    from toolgym.errors import ConfigError
    from toolgym.suites.runner import make_sampler

    cfg = BenchConfig(suite="t", model=str(tiny_dir), mode="tools", max_tokens=8, tool_parser="pythonic")
    sampler, template = make_sampler(cfg)
    try:
        assert (template.tool_parser.name, template.tool_parser_source) == ("pythonic", "override")
    finally:
        sampler.close()
    assert make_sampler(BenchConfig(suite="t", model=str(tiny_dir), mode="tools"))[1].tool_parser_source != "override"
    with pytest.raises(ConfigError, match="unknown tool-call format 'xml'; known: hermes"):
        BenchConfig(suite="t", model=str(tiny_dir), mode="tools", tool_parser="xml")
