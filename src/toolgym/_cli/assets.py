"""`toolgym assets`: fetch models and datasets into the offline cache.

    toolgym assets fetch NAME [NAME ...] | --all [--force] [--json]
    toolgym assets path NAME
    toolgym assets list [--json]
    toolgym assets verify NAME

Progress and licenses go to stderr, results (paths, JSON) to stdout, so
`MODEL=$(toolgym assets path smollm2-135m-instruct)` works in scripts.
"""

from __future__ import annotations

import json
import time
from typing import Any

import typer

from toolgym._progress import eta_text

app = typer.Typer(no_args_is_help=True, help="Fetch models and datasets into the offline cache.")


def _fail(exc: Exception) -> None:
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(2)


@app.command()
def fetch(
    names: list[str] = typer.Argument(None, help="asset names (see `toolgym assets list`)"),
    all_: bool = typer.Option(False, "--all", help="fetch every known asset but the large on-request ones"),
    force: bool = typer.Option(False, "--force", help="rebuild even if the cache entry is good"),
    as_json: bool = typer.Option(False, "--json", help="print a JSON list of fetched assets"),
) -> None:
    """Download, extract, verify and cache assets; prints each asset's folder."""
    from toolgym import assets
    from toolgym.errors import AssetError, unknown

    names = assets.default_assets() if all_ else list(names or [])
    if not names:
        _fail(AssetError(f"name an asset or pass --all; known: {', '.join(assets.KNOWN_ASSETS)}"))

    for name in names:  # refuse typos before any download starts
        if name not in assets.KNOWN_ASSETS:
            _fail(AssetError(unknown("asset", name, assets.KNOWN_ASSETS)))
    done: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for i, name in enumerate(names):
        if len(names) > 1:  # each asset's own steps follow as log lines (download, build, verify)
            typer.echo(f"asset {i + 1}/{len(names)}: {name} ({eta_text(i, len(names), time.perf_counter() - t0)})",
                       err=True)
        try:
            path = assets.fetch(name, force=force)
        except AssetError as exc:
            _fail(exc)
        spec = assets.KNOWN_ASSETS[name]
        done.append({"name": name, "path": str(path), "license": spec.license, "notice": spec.notice or None})
        if not as_json:
            typer.echo(str(path))
    if as_json:
        typer.echo(json.dumps(done, indent=2))


@app.command()
def path(name: str = typer.Argument(..., help="asset name")) -> None:
    """Print the local folder of a fetched asset (fails if it is not fetched)."""
    from toolgym import assets
    from toolgym.errors import AssetError

    try:
        typer.echo(str(assets.asset_path(name)))
    except AssetError as exc:
        _fail(exc)


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """Known assets, whether each is in the cache, and their licenses."""
    from toolgym import assets

    rows = assets.list_assets()
    if as_json:
        typer.echo(json.dumps({"cache": str(assets.cache_root()), "assets": rows}, indent=2))
        return
    typer.echo(f"cache: {assets.cache_root()}")
    for r in rows:
        size = f"{r['size_bytes'] / 1e6:8.1f} MB" if r["size_bytes"] is not None else " " * 11
        typer.echo(f"  {r['name']:<28} {r['kind']:<9} {r['status']:<7} {size}  {r['license']}")


@app.command()
def verify(name: str = typer.Argument(..., help="asset name")) -> None:
    """Check every file of a fetched asset against its recorded sha256."""
    from toolgym import assets
    from toolgym.errors import AssetError

    try:
        typer.echo(str(assets.verify(name)))
    except AssetError as exc:
        _fail(exc)
