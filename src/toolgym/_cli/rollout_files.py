"""`toolgym rollouts`: inspect rollout files.

    toolgym rollouts show FILE [--limit N] [--full] [--json]
    toolgym rollouts export FILE --format parquet|jsonl --out OUT
    toolgym rollouts view FILE [--out page.html | --serve]   (toolgym/_cli/rollouts_view.py)
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from toolgym._cli.rollouts_view import view
from toolgym._text import printable
from toolgym.errors import ConfigError

app = typer.Typer(no_args_is_help=True, help="Inspect and convert rollout files.")


def _say(text: str, **style: object) -> None:
    """One line of the listing, its control characters made visible: the file holds model and program
    text, and a raw escape sequence would reach the terminal (a clipboard write, a forged header)."""
    typer.secho(printable(text), **style)  # type: ignore[arg-type]


def _clip(text: str, n: int) -> str:
    text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
    return text if len(text) <= n else text[: n - 1] + "…"


@app.command()
def show(
    file: Path = typer.Argument(..., help="a JSONL file written by `toolgym rollout`"),
    limit: int = typer.Option(20, "--limit", min=0, help="show at most this many episodes (0 = all)"),
    full: bool = typer.Option(False, "--full", help="print whole messages instead of clipping them"),
    as_json: bool = typer.Option(False, "--json", help="print a JSON summary per episode"),
) -> None:
    """Print each episode's turns, tool calls and results, reward and finish reason."""
    from toolgym.agents.storage import group_by, read_header, read_jsonl

    header = read_header(file)
    trajs = read_jsonl(file)
    shown = trajs if limit == 0 else trajs[:limit]
    if as_json:
        rows = [{"task_id": t.task_id, "group_id": t.group_id, "reward": t.reward, "finish_reason": t.finish_reason,
                 "error": t.error, "turns": len([m for m in t.turns if m.get("role") == "assistant"]),
                 "prompt_tokens": len(t.prompt_ids), "response_tokens": len(t.response_ids),
                 "model_tokens": t.num_model_tokens, "reward_breakdown": t.reward_breakdown} for t in shown]
        typer.echo(json.dumps({"meta": header.get("meta", {}), "episodes": rows}, indent=2))
        return
    meta = header.get("meta", {})
    groups = group_by(trajs)
    rewards = [t.reward for t in trajs]
    _say(f"{file}: {len(trajs)} episodes in {len(groups)} groups"
         + (f", env {meta['env_id']}, model {meta['model']} ({meta.get('sampler')})" if "env_id" in meta else "")
         + (f", mean reward {sum(rewards) / len(rewards):.3f}" if rewards else ""))
    n = 10_000 if full else 400
    for t in shown:
        idx = t.metadata.get("episode_index", "?")
        _say("")
        _say(f"== {t.task_id}  group {t.group_id}  episode {idx}  reward {t.reward:g}  "
             f"finish {t.finish_reason}  tokens {len(t.prompt_ids)}+{len(t.response_ids)} "
             f"({t.num_model_tokens} sampled)", bold=True)
        if t.error:
            _say(f"   error: {_clip(t.error, n)}", fg="red")
        if t.reward_breakdown:
            _say("   reward: " + ", ".join(f"{k}={v:g}" for k, v in t.reward_breakdown.items()))
        for m in t.turns:
            role = m.get("role", "?")
            content = m.get("content") or ""
            label = {"assistant": "assistant", "tool": "tool result", "user": "user", "system": "system"}.get(role, role)
            if role == "system" and not full:
                content = _clip(content, 120)
            cut = "  [cut at max tokens]" if m.get("finish_reason") == "length" else ""
            _say(f"   [{label}] {_clip(content, n)}{cut}".replace("\n", "\n      "))
            for call in m.get("tool_calls") or []:
                fn = call.get("function", call)
                _say(f"      -> call {fn.get('name')}({_clip(json.dumps(fn.get('arguments'), ensure_ascii=False), 200)})")
    if limit and len(trajs) > limit:
        _say(f"\n… {len(trajs) - limit} more episodes (use --limit 0)")


@app.command()
def export(
    file: Path = typer.Argument(..., help="a JSONL file written by `toolgym rollout` (or by the trainer)"),
    fmt: str = typer.Option("parquet", "--format", help="parquet | jsonl (jsonl: rewrite an old file with its "
                                                          "header line as plain JSONL plus a .meta.json sidecar)"),
    out: Path = typer.Option(..., "--out", help="output file"),
) -> None:
    """Convert a rollout file: Parquet with a nested schema, or plain JSONL + sidecar."""
    from toolgym.agents.storage import read_header, read_jsonl, write_jsonl

    if fmt not in ("parquet", "jsonl"):
        raise ConfigError(f"--format must be parquet or jsonl, got {fmt!r}")
    if out.resolve() == file.resolve():
        raise ConfigError(f"--out must differ from the input file {file}")
    meta = read_header(file).get("meta", {})
    trajs = read_jsonl(file)
    if fmt == "parquet":
        from toolgym.agents.parquet import write_parquet

        n = write_parquet(out, trajs, meta)
    else:
        n = write_jsonl(out, trajs, meta)
    typer.echo(f"wrote {n} episodes to {out} ({fmt})")


app.command("view")(view)
