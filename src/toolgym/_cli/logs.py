"""Where the library's `logging` records go when toolgym runs as a command: stderr, at the level chosen by
`--log-level` or TOOLGYM_LOG_LEVEL (default info). Library modules only create loggers; this is the one
place that adds a handler, and only to the `toolgym` logger.

The progress bars of Hugging Face libraries ("Loading checkpoint shards", "Writing model shards", downloads,
dataset maps) are off unless the level is debug or the user set their switch (HF_HUB_DISABLE_PROGRESS_BARS,
HF_DATASETS_DISABLE_PROGRESS_BARS) themselves: toolgym's own progress says what is going on."""

from __future__ import annotations

import logging
import os
import sys

from toolgym._text import printable
from toolgym.errors import ConfigError

LEVELS = ("debug", "info", "warning", "error", "critical")


class _Stderr(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time of the record (test runners swap it)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:  # StreamHandler.__init__ assigns it
        pass


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = f"{record.name}: {record.getMessage()}"
        if record.levelno >= logging.WARNING:
            text = f"{record.levelname.lower()}: {text}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return printable(text)  # records quote model and program text: no raw control character reaches stderr


def configure(level: str) -> None:
    """Send `toolgym.*` records at `level` and above to stderr (idempotent)."""
    name = (level or "info").strip().lower()
    if name not in LEVELS:
        raise ConfigError(f"--log-level / TOOLGYM_LOG_LEVEL must be one of {', '.join(LEVELS)}, got {level!r}")
    if name != "debug":  # read by huggingface_hub, transformers and datasets when they are imported
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    logger = logging.getLogger("toolgym")
    logger.setLevel(name.upper())
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(_Format())
        logger.addHandler(handler)
