"""The `toolgym` command. Each command group lives in its own module under toolgym._cli
and is imported only when used, so `toolgym --help` stays fast."""

from __future__ import annotations

import importlib
import sys

import typer

app = typer.Typer(
    name="toolgym",
    help="Tool-use environments, sandboxes and RL training for LLM agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# (group name, module, help). Each module exposes `app` (a typer.Typer) or `register(app)`.
_GROUPS: list[tuple[str, str, str]] = [
    ("assets", "toolgym._cli.assets", "Fetch models and datasets into the offline cache."),
    ("sandbox", "toolgym._cli.sandbox", "Run code in the sandbox; check or build the image."),
    ("envs", "toolgym._cli.envs", "List, check and create environments."),
    ("rollouts", "toolgym._cli.rollout_files", "Inspect rollout files."),
    ("analyze", "toolgym._cli.analyze", "Analyses of rollouts (teacher signal, ...)."),
    ("bench", "toolgym._cli.bench", "Run benchmark suites and compare reports."),
]
# Top-level commands: (module, function name).
_COMMANDS: list[tuple[str, str]] = [
    ("toolgym._cli.doctor", "doctor"),
    ("toolgym._cli.rollout", "rollout"),
    ("toolgym._cli.train", "train"),
    ("toolgym._cli.train", "sft"),
    ("toolgym._cli.export", "export"),
    ("toolgym._cli.proxy", "proxy"),
]


@app.callback()
def _options(
    log_level: str = typer.Option("info", "--log-level", envvar="TOOLGYM_LOG_LEVEL",
                                  help="debug | info | warning | error: toolgym's log records on stderr"),
) -> None:
    from toolgym._cli.logs import configure

    configure(log_level)


@app.command()
def version() -> None:
    """Print the toolgym version."""
    from toolgym import __version__

    typer.echo(__version__)


def _load() -> None:
    for name, module, help_text in _GROUPS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue  # group not built yet
            raise
        sub = getattr(mod, "app", None)
        if sub is not None:
            app.add_typer(sub, name=name, help=help_text)
    for module, func in _COMMANDS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue
            raise
        fn = getattr(mod, func, None)
        if fn is not None:
            app.command(name=func)(fn)


_load()


def main() -> None:  # pragma: no cover - thin wrapper
    from toolgym.errors import ToolgymError

    try:
        app()
    except ToolgymError as exc:
        from toolgym._text import printable

        typer.secho(printable(f"error: {exc}"), fg="red", err=True)  # errors quote files and model text
        sys.exit(exc.exit_code)
