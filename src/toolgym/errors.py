"""Expected failures. The CLI prints these as one actionable line, never a traceback."""

from __future__ import annotations


class ToolgymError(Exception):
    """An expected, user-fixable failure. The message says what to do."""

    exit_code = 2


class ConfigError(ToolgymError, ValueError):
    """A config field is invalid; the message names the field and the allowed values."""


class AssetError(ToolgymError):
    """An asset is unknown, missing, broken, or its source cannot be reached."""


class SandboxUnavailable(ToolgymError):
    """No sandbox backend can run here (no Docker engine, no image, no bubblewrap)."""
