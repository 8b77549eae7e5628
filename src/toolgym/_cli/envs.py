"""`toolgym envs`: list registered environments and run the environment checker.

    toolgym envs list [--json]
    toolgym envs check ID [--seed N] [-k key=value ...] [--json]
"""

from __future__ import annotations

import json
from typing import Any

import typer

app = typer.Typer(no_args_is_help=True, help="List and check registered environments.")


def _fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def _parse_kwargs(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            _fail(f"--kwarg {item!r} must look like key=value")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = json.loads(v)
        except ValueError:
            out[k.strip()] = v
    return out


@app.command("list")
def list_cmd(as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Show every registered toolgym environment (built-ins and entry-point plugins)."""
    import gymnasium

    from toolgym.envs import registry

    rows = []
    for env_id in registry.list_envs():
        ep = gymnasium.registry[env_id].entry_point
        rows.append({"id": env_id, "entry_point": ep if isinstance(ep, str) else getattr(ep, "__qualname__", repr(ep)),
                     "builtin": env_id in registry.BUILTIN})
    if as_json:
        typer.echo(json.dumps({"envs": rows, "plugin_errors": registry.plugin_errors}, indent=2))
        return
    width = max((len(r["id"]) for r in rows), default=10)
    for r in rows:
        typer.echo(f"{r['id']:<{width}}  {r['entry_point']}{'' if r['builtin'] else '  (plugin)'}")
    for name, err in registry.plugin_errors.items():
        typer.echo(f"warning: plugin {name} failed to load: {err}", err=True)


@app.command()
def check(
    env_id: str = typer.Argument(..., help="environment id, e.g. toolgym/Arith-v0"),
    seed: int = typer.Option(0, "--seed", help="seed for the determinism checks"),
    kwarg: list[str] = typer.Option([], "--kwarg", "-k", help="constructor argument key=value (value parsed as JSON)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Run the environment checker: reset/step contract, determinism, info, tool schemas, reward range."""
    from toolgym.envs import registry
    from toolgym.envs.checker import check_env, checks_to_json
    from toolgym.errors import ToolgymError

    kwargs = _parse_kwargs(kwarg)
    try:
        registry.spec(env_id)
        checks = check_env(lambda: registry.make(env_id, **kwargs), seed=seed)
    except ToolgymError as exc:
        _fail(str(exc))
    failed = [c for c in checks if not c.ok]
    if as_json:
        typer.echo(json.dumps({"env_id": env_id, "ok": not failed, "checks": checks_to_json(checks)}, indent=2))
    else:
        for c in checks:
            mark = "ok  " if c.ok else "FAIL"
            typer.echo(f"{mark} {c.name}" + (f": {c.detail}" if c.detail and not c.ok else ""))
        typer.echo(f"{env_id}: {len(checks) - len(failed)}/{len(checks)} checks passed")
    if failed:
        raise typer.Exit(1)
