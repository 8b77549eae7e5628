"""The scripts injected into sandboxes, as self-contained `python -c` programs.

The files in `injected/` run inside the sandbox, not in toolgym: standard library only,
no toolgym import, Python 3.9+. A script imports another file of that folder by its bare
name (`from common import ...`, `import frames`); `program(name)` returns a bootstrap that
defines every such module from its text (its own imports first) and then runs the script as
`__main__`, so nothing has to exist on the sandbox's disk. The same bootstrap serves both
backends: Docker and the local one each start the executor as `python3 -I -c program("executor")`,
and the executor runs the judge harness, `program("harness")`, as a trusted call's program.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).with_name("injected")


def _text(name: str) -> str:
    return (HERE / f"{name}.py").read_text(encoding="utf-8")


def _imports_in(source: str, own: str = "") -> tuple[str, ...]:
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
    return tuple(dict.fromkeys(m for m in found if m != own and (HERE / f"{m}.py").is_file()))


def imports(name: str) -> tuple[str, ...]:
    """The injected modules that injected/<name>.py imports (at any depth of its code), by name."""
    return _imports_in(_text(name), name)


def _order(roots: tuple[str, ...], path: tuple[str, ...]) -> list[str]:
    order: list[str] = []

    def visit(mod: str, path: tuple[str, ...]) -> None:
        if mod in path:
            raise ValueError(f"injected modules import each other in a cycle: {' -> '.join((*path, mod))}")
        if mod in order:
            return
        for dep in imports(mod):
            visit(dep, (*path, mod))
        order.append(mod)

    for root in roots:
        visit(root, path)
    return order


def modules(name: str) -> tuple[str, ...]:
    """Every injected module script `name` needs, each after the modules it imports."""
    return tuple(_order(imports(name), (name,)))


def bundle(source: str, name: str = "script") -> str:
    """`source` as a self-contained program: the injected modules it imports (and theirs) defined first,
    then `source` run as `__main__` (its frames are named `<sandbox NAME>`)."""
    mods = _order(_imports_in(source, name), (name,))
    lines = ["import sys as _s, types as _t"]
    for mod in mods:
        lines += [f"_m = _t.ModuleType({mod!r})", "_m.__sandbox__ = True", f"_s.modules[{mod!r}] = _m",
                  f"exec(compile({_text(mod)!r}, '<sandbox {mod}>', 'exec'), _m.__dict__)"]
    lines += ["del _s, _t" + (", _m" if mods else ""),
              f"exec(compile({source!r}, '<sandbox {name}>', 'exec'), "
              "{'__name__': '__main__', '__builtins__': __builtins__})"]
    return "\n".join(lines) + "\n"


@lru_cache(maxsize=8)
def program(name: str) -> str:
    """Source text of injected/<name>.py, runnable with `python -I -c` (or as a file)."""
    return bundle(_text(name), name)
