"""Expected failures. The CLI prints these as one actionable line, never a traceback."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ToolgymError(Exception):
    """An expected, user-fixable failure. The message says what to do."""

    exit_code = 2


class ConfigError(ToolgymError, ValueError):
    """A config field is invalid; the message names the field and the allowed values."""


class AssetError(ToolgymError):
    """An asset is unknown, missing, broken, or its source cannot be reached."""


class InfrastructureError(ToolgymError):
    """A fault no program could have caused: the engine, the host, a sampler, or a sandbox that also fails a
    control run. An episode it hits is not scored (its reward is masked, not 0); a program's own failures,
    its sandbox's failures included, are verdicts instead."""


class SandboxUnavailable(InfrastructureError):
    """No sandbox backend can run here (no Docker engine, no image, no bubblewrap), or none works now."""


def unknown(what: str, name: object, known: Iterable[str], note: str = "", limit: int = 30) -> str:
    """The one line every user-named thing that does not exist gets (env, model, suite, algorithm, sampler,
    parser, config key, example config), so a typo reads the same everywhere:
    ``unknown X 'y'; did you mean 'z'? known: a, b, c``. ``note`` adds what else the name may be;
    a list longer than ``limit`` is cut (its closest matches are in the hint)."""
    names = [str(k) for k in known]
    text = str(name)
    close = difflib.get_close_matches(text, names, n=1, cutoff=0.6)
    if not close:  # a case slip ("Toolgym/arith-v0") is a typo too
        lowered = {k.lower(): k for k in names}
        close = [lowered[k] for k in difflib.get_close_matches(text.lower(), list(lowered), n=1, cutoff=0.6)]
    hint = f"; did you mean {close[0]!r}?" if close else ""
    shown = ", ".join(names[:limit]) + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")
    tail = f" ({note})" if note else ""
    return f"unknown {what} {text!r}{hint}{' ' if hint else '; '}known: {shown or '(none)'}{tail}"
