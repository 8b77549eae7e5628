"""`toolgym analyze ...`: analyses of rollout files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from toolgym.errors import ToolgymError, unknown

app = typer.Typer(no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Analyses of rollouts (teacher signal, ...)."""


def _load_model(name: str, device: str):  # noqa: ANN202 - heavy types imported lazily
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolgym._assets.names import load_error
    from toolgym.assets import resolve_model
    from toolgym.devices import resolve_device

    dev = resolve_device(device, what="--device", local_rank=None)
    path = resolve_model(name)  # a local path, a toolgym asset or a Hugging Face Hub id; one line if absent
    try:
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise load_error(name, "model", exc) from None
    if dev.startswith("cuda"):
        model = model.to(torch.bfloat16)
    return model.to(dev).eval(), tok


@app.command("teacher-signal")
def teacher_signal(
    rollouts: Path = typer.Argument(..., help="Rollouts JSONL of toolgym Trajectory records."),
    model: str = typer.Option(..., "--model", help="Scoring model: a local folder, an asset name or a Hugging Face Hub id."),
    out: Path = typer.Option(None, "--out", help="Output folder (default: <rollouts stem>_teacher_signal)."),
    conditions: str = typer.Option("all", help="Comma-separated conditions, or 'all'."),
    threshold: float = typer.Option(1.0, help="Success threshold on the reward."),
    max_prompts: int = typer.Option(300, help="Prompts sampled evenly over easy/medium/hard."),
    max_responses: int = typer.Option(8, help="Responses kept per prompt."),
    max_len: int = typer.Option(8192, help="Token limit; the context is truncated from the left."),
    batch_size: int = typer.Option(8, help="Scoring batch size."),
    n_boot: int = typer.Option(2000, help="Bootstrap resamples (prompt level)."),
    text_from: str = typer.Option("auto", help="Response text from 'turns', decoded 'ids', or 'auto'."),
    device: str = typer.Option("auto", help="auto (CUDA when available, else CPU) | cpu | cuda | cuda:N."),
    seed: int = typer.Option(0, help="Seed of prompt sampling and the random-peer control."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Does a peer context make the teacher's score track the verifier reward? (docs/algorithms/mopd.md)

    Scores every response under contexts none / S1 / S2 / F / 1S1F / 2S (positive) / 2S1F
    (contrastive) / random / score_top3, then reports Spearman, Kendall tau-b, Goodman-Kruskal gamma,
    pairwise accuracy, success AUC and point-biserial over prompts with both outcomes, with bootstrap
    95% intervals, as Markdown, JSON and a PNG plot.
    """
    from toolgym.agents.storage import read_jsonl
    from toolgym.analysis import teacher_signal as ts

    conds = list(ts.CONDITIONS) if conditions == "all" else [c.strip() for c in conditions.split(",") if c.strip()]
    missing = [c for c in conds if c not in ts.CONDITIONS]
    if missing:
        raise ToolgymError(unknown("condition", missing[0], ts.CONDITIONS))
    if text_from not in ("auto", "turns", "ids"):
        raise ToolgymError(f"--text-from must be auto, turns or ids, not {text_from!r}")
    from toolgym.devices import check_device

    device = check_device(device, "--device")
    if not rollouts.exists():
        raise ToolgymError(f"no such rollouts file: {rollouts}")
    trajs = read_jsonl(rollouts)
    lm, tok = _load_model(model, device)

    def decode(ids: list[int]) -> str:
        return tok.decode(ids, skip_special_tokens=True)

    try:
        groups = ts.groups_from_trajectories(trajs, decode, text_from)
    except ValueError as exc:
        raise ToolgymError(f"{rollouts}: {exc}; try --text-from ids") from exc
    groups = ts.sample_prompts(groups, max_prompts, max_responses, threshold, seed)
    if not groups:
        raise ToolgymError(f"{rollouts}: no prompt has at least 2 responses; sample groups with --group >= 2")

    def progress(done: int) -> None:
        if not json_out:
            print(f"\rscored {done}", end="", file=sys.stderr, flush=True)

    def score_fn(pairs: list[tuple[str, str]]) -> list[ts.Score]:
        res = ts.score_responses(lm, tok, pairs, max_len=max_len, batch_size=batch_size, progress=progress)
        if not json_out:
            print(file=sys.stderr)
        return res

    result = ts.analyze(groups, score_fn, conditions=conds, threshold=threshold, n_boot=n_boot, seed=seed)
    result.settings.update(model=str(model), rollouts=str(rollouts), max_len=max_len, text_from=text_from)
    out_dir = out or rollouts.with_name(rollouts.stem + "_teacher_signal")
    paths = ts.write_reports(result, out_dir)
    if json_out:
        typer.echo(json.dumps({**result.to_json(), "files": paths}, allow_nan=True))
    else:
        typer.echo(ts.markdown_table(result))
        for kind, p in paths.items():
            typer.echo(f"{kind}: {p}")
