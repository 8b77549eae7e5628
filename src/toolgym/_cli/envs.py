"""`toolgym envs`: list registered environments and run the environment checker.

    toolgym envs list [--json]
    toolgym envs check ID [--seed N] [-k key=value ...] [--model M [--tool-parser NAME]] [--only CHECK ...] [--json]
    toolgym envs new NAME [--dir PARENT]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

import typer

from toolgym._text import printable
from toolgym.envs.checker import CHECKS
from toolgym.errors import ToolgymError

app = typer.Typer(no_args_is_help=True, help="List, check and create environments.")


def _fail(msg: str) -> NoReturn:
    typer.echo(printable(f"error: {msg}"), err=True)  # errors quote files, plug-ins and program text
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
        typer.echo(printable(f"warning: plugin {name} failed to load: {err}"), err=True)


@app.command()
def check(
    env_id: str = typer.Argument(..., help="environment id, e.g. toolgym/Arith-v0"),
    seed: int = typer.Option(0, "--seed", help="seed for the determinism checks"),
    kwarg: list[str] = typer.Option([], "--kwarg", "-k", help="constructor argument key=value (value parsed as JSON)"),
    model: str = typer.Option(None, "--model", help="also check this model against the env: does its chat template "
                              "render the env's tools, which tool-call parser would a run use (a local folder, "
                              "asset name or Hub id; only its tokenizer is loaded)"),
    tool_parser: str = typer.Option(None, "--tool-parser", help="with --model: the format a run would name "
                                    "(default: read from the chat template)"),
    only: list[str] = typer.Option([], "--only", help="run only this named check on the training build "
                                   f"(repeatable): {', '.join(CHECKS)}"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Run the environment checker: reset/step contract, determinism, info, tool schemas, reward range;
    with --model, whether that model's template renders the env's tools and which parser it would use;
    with --only, just the named checks."""
    from toolgym.envs import registry
    from toolgym.envs.checker import check_builds, check_env, check_model_format, run_builds

    kwargs = _parse_kwargs(kwarg)
    summary: dict[str, Any] | None = None
    model_checks: list[Any] = []
    if tool_parser is not None and model is None:
        _fail("--tool-parser needs --model (the model whose template the check renders)")
    try:
        registry.spec(env_id)
        template = None
        if model is not None:
            from toolgym.agents.chat import ChatTemplate

            template = ChatTemplate(model, tool_parser=tool_parser)
        if only:
            checks = _only(env_id, kwargs, only, seed)
        else:
            checks = check_builds(env_id, kwargs)
        train_build = next(iter(run_builds(env_id, kwargs).values()))
        if not only and all(c.ok for c in checks):
            checks += check_env(train_build, seed=seed)
        if template is not None and all(c.ok for c in checks):
            model_checks, summary = check_model_format(train_build, template, seed=seed)
            checks += model_checks
            summary["model"] = model
    except ToolgymError as exc:
        _fail(str(exc))
    _report(env_id, checks, model_checks, summary, model, as_json)


def _only(env_id: str, kwargs: dict[str, Any], names: list[str], seed: int) -> list[Any]:
    """The named checks alone, on the training build; a wrong name is one line with the known ones."""
    from toolgym.envs.checker import check_env, run_builds

    for name in names:  # before building anything
        CHECKS.find(name, "--only")
    train_build = next(iter(run_builds(env_id, kwargs).values()))
    try:
        return check_env(train_build, seed=seed, only=names)
    except ToolgymError:
        raise
    except Exception as exc:
        _fail(f"building {env_id} for training rollouts raised {type(exc).__name__}: {exc} "
              f"(`toolgym envs check {env_id}` without --only checks each way a run builds it)")


def _report(env_id: str, checks: list[Any], model_checks: list[Any], summary: dict[str, Any] | None,
            model: str | None, as_json: bool) -> None:
    from toolgym.envs.checker import checks_to_json

    failed = [c for c in checks if not c.ok]
    names = {c.title: c.name for c in CHECKS.values()}
    if as_json:
        out = {"env_id": env_id, "ok": not failed, "checks": checks_to_json(checks)}
        if summary is not None:
            out["model"] = summary
        typer.echo(json.dumps(out, indent=2))
    else:
        for c in checks:
            mark = "ok  " if c.ok else "FAIL"
            shown = c.detail and (not c.ok or any(c is m for m in model_checks))
            key = names.get(c.name)  # a failed named check says how to rerun it alone
            title = f"{c.name} [--only {key}]" if key and not c.ok else c.name
            typer.echo(printable(f"{mark} {title}" + (f": {c.detail}" if shown else "")))
        if summary is not None:
            typer.echo(f"{model}: parses tool calls as {summary['tool_parser']} ({summary['tool_parser_source']}); "
                       f"its template {'renders' if summary['renders_tools'] else 'does not render'} tools")
        typer.echo(f"{env_id}: {len(checks) - len(failed)}/{len(checks)} checks passed")
    if failed:
        raise typer.Exit(1)


@app.command()
def new(
    name: str = typer.Argument(..., help="package name: lowercase words joined by '-', e.g. my-env"),
    parent: Path = typer.Option(Path("."), "--dir", help="folder to create the package folder NAME/ in"),
) -> None:
    """Write a new environment package NAME/: an environment (a task source, one @tool, a Rubric), its tests,
    an entry point and a one-step train.yaml. `my-env` gets the id `my-env/MyEnv-v0` (NAME, then NAME in
    CamelCase with -v0) and the import package `my_env`. Install it with `pip install -e NAME`; it passes
    `toolgym envs check ID` and trains with `toolgym train NAME/train.yaml` as generated."""
    from toolgym._cli.scaffold import name_error, write_package

    err = name_error(name)
    if err:
        _fail(err)
    target = parent / name
    if target.exists() or target.is_symlink():
        _fail(f"{target} already exists; pick another NAME or --dir (nothing was written)")
    try:
        root, names = write_package(parent, name)
    except OSError as exc:
        _fail(f"cannot write {target}: {exc.strerror or exc}")
    shown = str(root) if root.is_absolute() else f"./{root}"  # pip reads a bare "my-env" as a package name
    typer.echo(f"wrote {shown}/ with environment {names.env_id} (class {names.module}.{names.cls})")
    typer.echo("next, in the Python environment that has toolgym:")
    typer.echo(f"  pip install -e {shown}")
    typer.echo(f"  toolgym envs check {names.env_id}")
    typer.echo(f"  python -m pytest {shown}/tests")
    typer.echo(f"  toolgym train {shown}/train.yaml")
