"""Plain, JSON-serializable value types shared by every sandbox backend."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeVar

from toolgym.sandbox.injected import limits as _defaults

Status = Literal["ok", "error", "timeout", "oom", "output_limit", "killed", "sandbox_error"]
STATUSES: tuple[str, ...] = ("ok", "error", "timeout", "oom", "output_limit", "killed", "sandbox_error")
# pids a sandbox needs beside a call's own `Limits.pids`: the executor, its call template, the two
# standing cleaners, a judge harness and its zygote, and some slack
OWN_PIDS = 10


@dataclass(frozen=True)
class Limits:
    """Per-call resource limits; every backend enforces all of them. The defaults are the executor's
    own for a request that leaves one out (injected/limits.py)."""

    timeout_s: float = _defaults.TIMEOUT_S
    memory_mb: int = _defaults.MEMORY_MB
    pids: int = 64
    output_bytes: int = _defaults.OUTPUT_BYTES
    cpu_s: float | None = None  # CPU-time limit; defaults to timeout_s
    file_bytes: int = _defaults.FILE_BYTES  # largest file a call may write

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError(f"Limits.timeout_s must be > 0, got {self.timeout_s}")
        if self.memory_mb < 16:
            raise ValueError(f"Limits.memory_mb must be >= 16, got {self.memory_mb}")
        if self.pids < 1:
            raise ValueError(f"Limits.pids must be >= 1, got {self.pids}")
        if self.output_bytes < 1:
            raise ValueError(f"Limits.output_bytes must be >= 1, got {self.output_bytes}")


@dataclass
class ExecResult:
    """Outcome of one sandboxed call. `status` is the verdict; exit_code is raw."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    status: Status = "ok"
    duration_s: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    files: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecResult:
        return cls(**data)


_T = TypeVar("_T")


def from_fields(cls: type[_T], value: Any, where: str, error: type[Exception]) -> _T:
    """``value`` if it is a ``cls``, else ``cls(**value)`` for a dict of its fields; anything else, or a
    wrong field, is one ``error`` line naming ``where``."""
    if isinstance(value, cls):
        return value
    if isinstance(value, dict):
        try:
            return cls(**value)
        except TypeError as e:
            raise error(f"{where}: {e}") from None
    article = "an" if cls.__name__[0] in "AEIOU" else "a"
    raise error(f"{where} must be {article} {cls.__name__} (or a dict of its fields), got {type(value).__name__}")
