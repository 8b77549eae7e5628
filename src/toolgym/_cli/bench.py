"""`toolgym bench`: run benchmark suites and compare reports.

    toolgym bench SUITE --model M [--mode tools|generate|loglik] [--subset NAME] [--limit N] --out DIR [--json]
    toolgym bench compare A.json B.json [--json]
    toolgym bench list [--json]

SUITE is a built-in suite (code, science, math) or a YAML suite file.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

from toolgym._stop import Stopped, command_line, signals
from toolgym._text import printable


class _SuiteGroup(TyperGroup):
    """Routes `toolgym bench SUITE ...` to the `run` command when SUITE is not a subcommand name."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().resolve_command(ctx, args)


app = typer.Typer(no_args_is_help=True, cls=_SuiteGroup, help="Run benchmark suites and compare reports.")


def _err(msg: str) -> None:
    typer.echo(printable(f"error: {msg}"), err=True)
    raise typer.Exit(2)


@app.command("run")
def run(
    suite: str = typer.Argument(..., help="code | science | math | path/to/suite.yaml"),
    model: str = typer.Option(..., "--model", "-m", help="asset name (smollm2-135m-instruct), local folder or Hub id"),
    mode: str = typer.Option("generate", help="tools | generate | loglik"),
    subset: str = typer.Option(None, help="comma-separated entry names to run (e.g. arc_challenge,sciq)"),
    limit: int = typer.Option(None, help="first N tasks of each entry"),
    out: str = typer.Option(None, "--out", "-o", help="output folder (default: runs/bench/SUITE-MODE)"),
    samples: int = typer.Option(1, "--samples", "-k", help="completions per task (pass@k up to k)"),
    temperature: float = typer.Option(0.0, help="0 = greedy"),
    top_p: float = typer.Option(1.0),
    max_tokens: int = typer.Option(512, help="new tokens per completion"),
    sampler: str = typer.Option("hf", help="hf | vllm | openai | a plug-in's name (entry-point group "
                                "toolgym.samplers)"),
    base_url: str = typer.Option(None, help="the server of a remote sampler (openai: OpenAI-compatible)"),
    tokenizer: str = typer.Option(None, help="tokenizer for a remote sampler such as openai (default: the model's)"),
    batch: int = typer.Option(8, help="questions per loglik forward; generate mode decodes 2x this many prompts at once"),
    concurrency: int = typer.Option(64, help="programs handed to the sandbox pool at once (it micro-batches them; the pool bounds real parallelism)"),
    sandbox: str = typer.Option("auto", help="sandbox backend: auto | docker | local"),
    max_turns: int = typer.Option(4, help="turns per episode in tools mode"),
    tool_parser: str = typer.Option(None, "--tool-parser", help="tools mode: the model's tool-call format (hermes, "
                                    "llama3_json, pythonic, mistral, qwen3_coder, gpt_oss, deepseek_v3; default: "
                                    "read from the chat template)"),
    seed: int = typer.Option(0),
    device: str = typer.Option("auto", help="hf sampler / loglik model: auto (CUDA when available, else CPU) | cpu "
                                            "| cuda | cuda:N"),
    completions: str = typer.Option(None, help="score completions from this JSONL instead of sampling"),
    trust_pickle: bool = typer.Option(False, "--trust-pickle",
                                      help="allow LiveCodeBench pickled private tests (restricted unpickler)"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Run a suite (resumes in --out: finished tasks are skipped) and write report.json/.md and plots."""
    from toolgym.errors import ToolgymError
    from toolgym.suites.report import markdown
    from toolgym.suites.runner import BenchConfig, Interrupted, run_benchmark

    out_dir = out or f"runs/bench/{suite.rsplit('/', 1)[-1].removesuffix('.yaml')}-{mode}"
    try:
        cfg = BenchConfig(suite=suite, model=model, mode=mode, subset=subset, limit=limit, seed=seed, samples=samples,
                          temperature=temperature, top_p=top_p, max_tokens=max_tokens, sampler=sampler,
                          base_url=base_url, tokenizer=tokenizer, batch=batch, concurrency=concurrency,
                          sandbox_backend=sandbox, trust_pickle=trust_pickle, completions=completions,
                          max_turns=max_turns, device=device, tool_parser=tool_parser)
        stream = sys.stderr if as_json else sys.stdout

        def log(msg: str) -> None:
            print(printable(msg), file=stream, flush=True)  # progress lines quote entries' errors

        with signals():
            report = run_benchmark(cfg, out_dir, log=log)
    except Interrupted as exc:
        # A sampler thread may still be inside a forward pass; a normal interpreter exit would then
        # abort in C++ ("terminate called"). The report is written: leave at once.
        typer.echo(printable(f"stopped ({exc.signal_name}): partial report in {exc.report}; resume: {command_line()}"),
                   err=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exc.exit_code)
    except Stopped as stop:  # before the first entry started: nothing to report yet
        typer.echo(f"stopped ({stop.name}) before any task ran; resume: {command_line()}", err=True)
        raise typer.Exit(stop.exit_code) from None
    except ToolgymError as exc:
        _err(str(exc))
        return
    if as_json:
        typer.echo(json.dumps(report))
        return
    typer.echo("")
    typer.echo(printable(markdown(report)))
    files = ["report.json", "report.md", *report.get("plots", [])]
    typer.echo("wrote " + ", ".join(str(Path(out_dir) / f) for f in files))


@app.command("compare")
def compare(
    a: str = typer.Argument(..., help="report A (report.json or its folder)"),
    b: str = typer.Argument(..., help="report B"),
    alpha: float = typer.Option(0.05, help="significance level"),
    seed: int = typer.Option(0),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Deltas B - A per entry on shared tasks, with paired bootstrap / McNemar significance."""
    from toolgym.errors import ToolgymError
    from toolgym.suites.compare import compare_reports, format_comparison, load_report

    try:
        cmp = compare_reports(load_report(a), load_report(b), seed=seed, alpha=alpha)
    except ToolgymError as exc:
        _err(str(exc))
        return
    typer.echo(json.dumps(cmp) if as_json else printable(format_comparison(cmp)))


@app.command("list")
def list_suites(as_json: bool = typer.Option(False, "--json")) -> None:
    """The registered suites (built-ins, then plug-ins) and their entries."""
    from toolgym.suites.registry import registered_suites

    suites = {n: s.to_dict() for n, s in registered_suites().items()}
    if as_json:
        typer.echo(json.dumps(suites))
        return
    for name, s in suites.items():
        typer.echo(f"{name}: {s['description']}")
        for e in s["entries"]:
            opt = " (optional)" if e["optional"] else ""
            typer.echo(f"  {e['name']:<15} {e['metric']:<9} {e['source']}{opt}")
