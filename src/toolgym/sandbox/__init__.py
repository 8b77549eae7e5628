"""toolgym.sandbox: run untrusted, model-written code in pooled sandboxes.

    from toolgym.sandbox import open_sandbox, Limits
    with open_sandbox("auto", Limits(timeout_s=10, memory_mb=512)) as sb:
        sb.run("print(1)").stdout

Backends: `docker` (locked-down containers, the default where an engine and the image
exist) and `local` (bubblewrap namespaces; weaker isolation, see local_backend).
Modules load lazily so `import toolgym` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from toolgym.sandbox.types import STATUSES, ExecResult, Limits

_LAZY = {
    "open_sandbox": "toolgym.sandbox.api",
    "Sandbox": "toolgym.sandbox.api",
    "Session": "toolgym.sandbox.api",
    "SandboxRequestError": "toolgym.sandbox.api",
    "LANGUAGES": "toolgym.sandbox.api",
    "doctor_report": "toolgym.sandbox.doctor",
    "judge": "toolgym.sandbox.judging",
    "TestCase": "toolgym.sandbox.judging",
    "ajudge": "toolgym.sandbox.judging",
    "JudgeReport": "toolgym.sandbox.judging",
    "Verdict": "toolgym.sandbox.judging",
}

__all__ = ["ExecResult", "Limits", "STATUSES", "open_sandbox", "Sandbox", "Session", "SandboxRequestError",
           "LANGUAGES", "doctor_report", "judge", "TestCase", "ajudge", "JudgeReport", "Verdict"]

if TYPE_CHECKING:  # pragma: no cover
    from toolgym.sandbox.api import LANGUAGES, Sandbox, SandboxRequestError, Session, open_sandbox
    from toolgym.sandbox.doctor import doctor_report


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'toolgym.sandbox' has no attribute {name!r}")
