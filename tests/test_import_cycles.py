"""The ``acyclic`` import-linter contract (pyproject.toml): no import cycle between the children of any package
of toolgym, function-level imports included. It runs on the real tree, and on a made-up package to show that
it catches the kind of cycle issue 27 found (one side imports the other only inside a function)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.requirements import need

ROOT = Path(__file__).resolve().parents[1]
LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"]


def _acyclic_contract() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c.get("id") == "acyclic"]
    return contract


def _lint(config: Path, cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LINT, "--no-cache", str(config)], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(pythonpath), "PATH": "/usr/bin:/bin"})


def test_toolgym_has_no_cycle_between_siblings() -> None:
    need(importlib.util.find_spec("importlinter") is not None, "import-linter is not installed (the dev extra)")
    proc = _lint(ROOT / "pyproject.toml", ROOT, ROOT / "src")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "no import cycle between sibling modules or subpackages anywhere in toolgym KEPT" in " ".join(proc.stdout.split())


def test_the_contract_catches_a_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    need(importlib.util.find_spec("importlinter") is not None, "import-linter is not installed (the dev extra)")
    pkg = tmp_path / "cyclepkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "schema.py").write_text("def loss():\n    from cyclepkg.sub import losses\n    return losses\n")
    (pkg / "sub" / "losses.py").write_text("from cyclepkg.sub import schema\n")
    (pkg / "typed.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cyclepkg import untyped\n")
    (pkg / "untyped.py").write_text("import cyclepkg.typed\n")
    contract = {k: v for k, v in _acyclic_contract().items() if k not in ("ignore_imports",)}
    lines = ['[tool.importlinter]', 'root_package = "cyclepkg"', "exclude_type_checking_imports = true", "",
             "[[tool.importlinter.contracts]]"]
    lines += [f"{k} = {v!r}".replace("'", '"') for k, v in contract.items() if k != "ancestors"]
    lines.append('ancestors = ["cyclepkg"]')
    config = tmp_path / "contract.toml"
    config.write_text("\n".join(lines) + "\n")
    proc = _lint(config, tmp_path, tmp_path)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 1, out
    assert "No cycles are allowed in cyclepkg.sub" in out
    assert "No cycles are allowed in cyclepkg. " not in out  # an import under TYPE_CHECKING makes no cycle


def test_no_cycle_even_through_imports_made_only_for_type_checking(tmp_path: Path) -> None:
    """The contract leaves ``if TYPE_CHECKING:`` imports out (they run nothing); toolgym has no cycle through
    them either (one did: ``losses`` and ``loss_metrics``, for a type hint), so a reader never meets one."""
    need(importlib.util.find_spec("importlinter") is not None, "import-linter is not installed (the dev extra)")
    contract = _acyclic_contract()
    lines = ['[tool.importlinter]', 'root_package = "toolgym"', "exclude_type_checking_imports = false", "",
             "[[tool.importlinter.contracts]]"]
    lines += [f"{k} = {v!r}".replace("'", '"') for k, v in contract.items()]
    config = tmp_path / "with_type_checking.toml"
    config.write_text("\n".join(lines) + "\n")
    proc = _lint(config, ROOT, ROOT / "src")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "KEPT" in proc.stdout
