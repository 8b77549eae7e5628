"""`toolgym proxy`: serve the recording proxy (OpenAI chat completions on loopback) and write what it records.

    toolgym proxy --model M --out FILE.jsonl [--sampler hf|vllm|openai|PLUGIN] [-- PROGRAM ARGS...]

With a program after ``--``, it runs that program with ``OPENAI_BASE_URL`` set to the proxy (the official
``openai`` client reads it), then writes the trajectories and exits with the program's exit status. Without
one, it serves until Ctrl-C (or SIGTERM) and writes them then.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import typer

from toolgym._stop import Stopped, signals
from toolgym.errors import ConfigError


def proxy(
    program: list[str] = typer.Argument(None, help="a program to run against the proxy (after --), e.g. "
                                                   "-- python agent.py"),
    model: str = typer.Option(..., "--model", help="local folder, asset name or Hugging Face Hub id (openai: the "
                                                   "served model name)"),
    out: Path = typer.Option(..., "--out", help="JSONL file the recorded trajectories are written to"),
    sampler: str = typer.Option("hf", "--sampler", help="hf | vllm | openai | a plug-in's name"),
    base_url: str = typer.Option("http://127.0.0.1:8000/v1", "--base-url", help="a remote sampler's /v1 URL"),
    tokenizer: str = typer.Option(None, "--tokenizer", help="tokenizer folder, asset or Hub id (default: the model's)"),
    device: str = typer.Option(None, "--device", help="in-process sampler (hf): auto | cpu | cuda | cuda:N "
                                                    "(default auto)"),
    host: str = typer.Option("127.0.0.1", "--host", help="the address to listen on: 127.0.0.1 only"),
    port: int = typer.Option(0, "--port", min=0, max=65535, help="the port (0: a free one, printed)"),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1, help="the most new tokens a request may ask for"),
    max_model_len: int = typer.Option(4096, "--max-model-len", min=16, help="prompt + response tokens per request"),
    tool_parser: str = typer.Option(None, "--tool-parser", help="the model's tool-call format (default: read from "
                                    "the chat template)"),
) -> None:
    """Serve OpenAI chat completions with a sampler on loopback and record every conversation as trajectories."""
    from toolgym._cli.sampler_choice import check_sampler_choice
    from toolgym.agents import build_sampler
    from toolgym.agents.chat import ChatTemplate
    from toolgym.agents.proxy import RecordingProxy
    from toolgym.agents.proxy_server import check_host, serve_in_thread
    from toolgym.agents.storage import write_jsonl
    from toolgym.agents.token_text import piece_table, write_token_text
    from toolgym.assets import resolve_model

    check_host(host)  # before a model loads
    spec, device_kwargs = check_sampler_choice(sampler, device, tool_parser)
    if spec.remote:
        tok_ref = resolve_model(tokenizer or model, "tokenizer")
        smp = build_sampler(sampler, model, base_url=base_url, max_model_len=max_model_len)
    else:
        path = resolve_model(model)
        tok_ref = resolve_model(tokenizer, "tokenizer") if tokenizer else path
        typer.echo(f"loading the model: {model} ({sampler} sampler)", err=True)
        smp = build_sampler(sampler, path, max_model_len=max_model_len, **device_kwargs)
    tpl = ChatTemplate(getattr(smp, "tokenizer", None) or tok_ref, tool_parser=tool_parser)
    rec = RecordingProxy(smp, tpl, model_name=model, max_tokens=max_tokens)
    meta = {"source": "toolgym proxy", "model": model, "sampler": sampler, "tool_parser": tpl.tool_parser.name,
            "program": list(program or []), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    status = 0
    stopped: Stopped | None = None
    with serve_in_thread(rec, host, port) as url:
        typer.echo(f"serving OpenAI chat completions at {url}", err=True)
        try:
            with signals():
                if program:
                    status = _run(program, url)
                else:
                    threading.Event().wait()
        except Stopped as stop:
            stopped = stop
        except FileNotFoundError:
            raise ConfigError(f"program not found: {program[0]!r}") from None
    trajs = rec.take()
    write_jsonl(out, trajs, {**meta, "complete": True, "program_status": status})
    # each token's text beside the file, so the viewer colours tokens without a tokenizer
    write_token_text(out, piece_table(tpl.tokenizer, (i for t in trajs for i in t.prompt_ids + t.response_ids)),
                     tokenizer=str(tok_ref))
    summary: dict[str, Any] = {"out": str(out), "trajectories": len(trajs),
                               "splits": sum(1 for t in trajs if t.metadata.get("split")),
                               "sampled_tokens": sum(t.num_model_tokens for t in trajs), "program_status": status}
    typer.echo(json.dumps(summary))
    if stopped is not None:
        raise typer.Exit(stopped.exit_code)
    if status:
        raise typer.Exit(status)


def _run(program: list[str], url: str) -> int:
    """Run the agent program with the proxy as its OpenAI endpoint (any key: the proxy checks none)."""
    env = {**os.environ, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "toolgym-proxy", "TOOLGYM_PROXY_URL": url}
    return subprocess.run(program, env=env, check=False).returncode
