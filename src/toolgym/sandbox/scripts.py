"""The scripts injected into sandboxes, as self-contained `python -c` programs.

The files in `injected/` run inside the sandbox, not in toolgym: standard library only,
no toolgym import, Python 3.9+. Each may `from common import ...` (injected/common.py);
`program(name)` returns a bootstrap that defines that module from its text and then runs
the script as `__main__`, so nothing has to exist on the sandbox's disk.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).with_name("injected")


# the injected modules each script may import
MODULES = {"executor": ("common",), "harness": ("common", "rpc", "zygote", "kattis")}


@lru_cache(maxsize=8)
def program(name: str) -> str:
    """Source text of injected/<name>.py, runnable with `python -I -c` (or as a file)."""
    lines = ["import sys as _s, types as _t"]
    for mod in MODULES[name]:
        text = (HERE / f"{mod}.py").read_text(encoding="utf-8")
        lines += [f"_m = _t.ModuleType({mod!r})", f"_s.modules[{mod!r}] = _m",
                  f"exec(compile({text!r}, '<sandbox {mod}>', 'exec'), _m.__dict__)"]
    script = (HERE / f"{name}.py").read_text(encoding="utf-8")
    lines += ["del _s, _t, _m",
              f"exec(compile({script!r}, '<sandbox {name}>', 'exec'), "
              "{'__name__': '__main__', '__builtins__': __builtins__})"]
    return "\n".join(lines) + "\n"
