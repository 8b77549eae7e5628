"""Expected failures. The CLI prints these as one actionable line, never a traceback."""

from __future__ import annotations


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
