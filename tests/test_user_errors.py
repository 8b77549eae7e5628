"""Every user-named thing that does not exist reads the same through the real CLI: one line on stderr,
`error: unknown X 'y'; did you mean 'z'? known: ...`, exit 2, no traceback, and nothing written or
started (each command runs in a fresh, empty folder that must stay empty)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(sys.executable).parent / "toolgym"
CLI = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-c", "from toolgym.cli import main; main()"]

MODELS = "smollm2-135m-instruct, qwen2.5-coder-0.5b-instruct, qwen2.5-coder-1.5b-instruct"
MODEL_NOTE = "(a model may also be a local path or a Hugging Face Hub id, owner/name)"
ENVS = "toolgym/Arith-v0, toolgym/CodeContest-v0, toolgym/MathTIR-v0, toolgym/Program-v0, toolgym/ReasoningGym-v0, toolgym/ScienceQA-v0"
FORMATS = "hermes, llama3_json, pythonic, mistral, qwen3_coder, gpt_oss, deepseek_v3"
EXAMPLES = "arith_ctpo, arith_mixture, arith_mopd, arith_parts, openai_agent, qwen_mbpp_mopd, smollm2_arith, smollm2_arith_sft"
ROLLOUT_KEYS = ("env, env_kwargs, envs, split, group_size, prompts_per_step, max_turns, max_new_tokens, "
                "max_response_tokens, temperature, top_p, sampler, base_url, sampler_kwargs, frozen_policy_ok, "
                "vllm_sleep, sandbox, sandbox_pool, tool_parser, max_staleness, workers, servers, partial, push_on, "
                "group_deadline_s")
ROLLOUT = ["rollout", "toolgym/Arith-v0", "--tasks", "1", "--group", "2", "--out", "r.jsonl"]
BENCH = ["bench", "science", "--limit", "1"]
SMOL = ["--model", "smollm2-135m-instruct"]

SUITE_FILES = {  # suite YAML files the cases name, each with one typo
    "mine.yaml": "entries:\n  - {name: a, env: toolgym/MathTIR-v0, sourse: asset:gsm8k, metric: acc}\n",
    "kind.yaml": "entries:\n  - {name: a, env: toolgym/MathTIR-v0, source: 'asets:gsm8k', metric: acc}\n",
    "env.yaml": "entries:\n  - {name: a, env: toolgym/MathTIR-v9, source: 'asset:gsm8k', metric: acc}\n",
}

# (what the user got wrong, the command, the one line it must print)
CASES = [
    ("environment", ["envs", "check", "toolgym/Arith-v1"],
     f"unknown environment 'toolgym/Arith-v1'; did you mean 'toolgym/Arith-v0'? known: {ENVS}"),
    ("environment in a config", ["train", "arith_ctpo", "-s", "rollout.env=toolgym/Arith-v9"],
     f"unknown environment 'toolgym/Arith-v9'; did you mean 'toolgym/Arith-v0'? known: {ENVS}"),
    ("environment in a mixture", ["train", "arith_ctpo", "-s", "rollout.env=null", "-s", "rollout.env_kwargs={}", "-s",
                                  "rollout.envs=[{env: toolgym/Arith-v0}, {env: toolgym/Arith-v9, weight: 2}]"],
     f"unknown environment 'toolgym/Arith-v9'; did you mean 'toolgym/Arith-v0'? known: {ENVS}"),
    ("model (rollout)", [*ROLLOUT, "--model", "smollm2-135m-instruc"],
     f"unknown model 'smollm2-135m-instruc'; did you mean 'smollm2-135m-instruct'? known: {MODELS} {MODEL_NOTE}"),
    ("model (bench)", [*BENCH, "--model", "smollm2-135m-instruc"],
     f"unknown model 'smollm2-135m-instruc'; did you mean 'smollm2-135m-instruct'? known: {MODELS} {MODEL_NOTE}"),
    ("model in a config", ["train", "arith_ctpo", "-s", "model.name_or_path=smollm2-135m-instruc"],
     f"unknown model 'smollm2-135m-instruc'; did you mean 'smollm2-135m-instruct'? known: {MODELS} {MODEL_NOTE}"),
    ("asset", ["assets", "fetch", "gsm9k"],
     "unknown asset 'gsm9k'; did you mean 'gsm8k'? known: qwen3-tokenizer, smollm2-135m-instruct, "
     "qwen2.5-coder-0.5b-instruct, qwen2.5-coder-1.5b-instruct, humaneval, gsm8k, math500, math, mbpp, "
     "arc_challenge, arc_easy, mmlu, sciq, openbookqa, leetcode"),
    ("suite", ["bench", "sciense", *SMOL],
     "unknown suite 'sciense'; did you mean 'science'? known: science, code, math (or a suite YAML file)"),
    ("suite entry", [*BENCH, "--subset", "sciqq", *SMOL],
     "unknown suite entry 'sciqq'; did you mean 'sciq'? known: arc_challenge, arc_easy, gpqa_diamond, mmlu_stem, "
     "openbookqa, sciq (in suite 'science')"),
    ("suite YAML key", ["bench", "mine.yaml", *SMOL],
     "unknown suite entry key 'sourse'; did you mean 'source'? known: name, env, source, metric, options, optional "
     "(in mine.yaml, entry 1)"),
    ("suite YAML task source", ["bench", "kind.yaml", *SMOL],
     "unknown task source 'asets'; did you mean 'asset'? known: asset, aime, codecontests, gpqa, kattis, "
     "livecodebench (in 'asets:gsm8k': a source is KIND:WHAT)"),
    ("suite YAML environment", ["bench", "env.yaml", *SMOL],
     f"unknown environment 'toolgym/MathTIR-v9'; did you mean 'toolgym/MathTIR-v0'? known: {ENVS}"),
    ("bench mode", [*BENCH, *SMOL, "--mode", "tool"],
     "unknown mode 'tool'; did you mean 'tools'? known: tools, generate, loglik (from --mode)"),
    ("sandbox backend", ["sandbox", "run", "--backend", "dockr", "-c", "print(1)"],
     "unknown sandbox backend 'dockr'; did you mean 'docker'? known: auto, docker, local"),
    ("algorithm", ["train", "arith_ctpo", "-s", "algorithm=ctpp"],
     "unknown algorithm 'ctpp'; did you mean 'ctpo'? known: ctpo, grpo, gspo, full_is, mopd, sdpo, opd"),
    ("sampler (bench)", [*BENCH, *SMOL, "--sampler", "vlm"],
     "unknown sampler 'vlm'; did you mean 'vllm'? known: hf, vllm, openai, vllm_server (from --sampler)"),
    ("sampler (rollout)", [*ROLLOUT, *SMOL, "--sampler", "hff"],
     "unknown sampler 'hff'; did you mean 'hf'? known: hf, vllm, openai, vllm_server (from --sampler)"),
    ("sampler in a config", ["train", "arith_ctpo", "-s", "rollout.sampler=vlm"],
     "unknown sampler 'vlm'; did you mean 'vllm'? known: hf, vllm, openai, vllm_server (from rollout.sampler)"),
    ("tool-call parser (bench)", [*BENCH, *SMOL, "--mode", "tools", "--tool-parser", "hermez"],
     f"unknown tool-call format 'hermez'; did you mean 'hermes'? known: {FORMATS}"),
    ("tool-call parser (rollout)", [*ROLLOUT, *SMOL, "--tool-parser", "hermez"],
     f"unknown tool-call format 'hermez'; did you mean 'hermes'? known: {FORMATS}"),
    ("config key", ["train", "arith_ctpo", "-s", "rollout.grop_size=4"],
     f"unknown rollout key 'grop_size'; did you mean 'group_size'? known: {ROLLOUT_KEYS}"),
    ("example config", ["train", "arith_ctp"],
     f"unknown config 'arith_ctp'; did you mean 'arith_ctpo'? known: {EXAMPLES} "
     "(a config may also be a path to a YAML file)"),
    ("example config (sft)", ["sft", "arith_ctp", "--out", "warm"],
     f"unknown config 'arith_ctp'; did you mean 'arith_ctpo'? known: {EXAMPLES} "
     "(a config may also be a path to a YAML file)"),
]


@pytest.mark.parametrize(("what", "args", "line"), CASES, ids=[c[0] for c in CASES])
def test_a_typo_is_one_line_exit_2_before_any_work(tmp_path: Path, what: str, args: list[str], line: str) -> None:
    for name, text in SUITE_FILES.items():
        (tmp_path / name).write_text(text)
    before = sorted(p.name for p in tmp_path.iterdir())
    env = {k: v for k, v in os.environ.items() if k != "TOOLGYM_LOG_LEVEL"}
    r = subprocess.run([*CLI, *args], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert (r.returncode, r.stderr.strip().splitlines(), r.stdout) == (2, [f"error: {line}"], ""), what
    assert sorted(p.name for p in tmp_path.iterdir()) == before, f"{what}: the failed command wrote files"


@pytest.mark.parametrize(("body", "line"), [
    ('{"id": "a", "question": "1+1?", "answer": "2"}\n\n{"id": "b", "question": "2+2?"}\n',
     "./mine.jsonl:3: field 'answer' is missing or empty"),
    ('{"id": "a", "question": "1+1?", "answer": "2"}\n\n{"id": "b", "question": }\n',
     "./mine.jsonl:3: not valid JSON (Expecting value at column 25)"),
], ids=["bad record", "bad line"])
def test_a_bad_jsonl_line_of_a_suite_is_named_as_an_editor_numbers_it(tmp_path: Path, body: str, line: str) -> None:
    """A bad record and a line that is not JSON, in the user's own suite data: one number, the file's line."""
    (tmp_path / "mine.jsonl").write_text(body)
    (tmp_path / "s.yaml").write_text("entries:\n  - {name: m, env: toolgym/MathTIR-v0, source: 'asset:./mine.jsonl', "
                                     "metric: pass@1, options: {dataset: gsm8k}}\n")
    r = subprocess.run([*CLI, "bench", "s.yaml", "--model", "smollm2-135m-instruct", "--limit", "1"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert (r.returncode, r.stderr.strip().splitlines()) == (2, [f"error: {line}"])
