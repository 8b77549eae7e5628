"""Library code logs through `logging.getLogger(__name__)` instead of printing; the CLI picks the level."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "toolgym"
TOOLGYM = str(Path(sys.executable).parent / "toolgym")

# where writing to stdout is the point, not a log line
ALLOWED = {
    "agents/program_relay.py": "a stdlib script run inside the agent-program jail (no logging set up there)",
    "envs/verifiers.py": "the verifier child process answers on stdout",
    "training/outputs/logging.py": "logger.say: the trainer's console output",
    "training/trainer.py": "the resume notice, console output like logger.say",
    "_progress.py": "the commands' progress display: plain lines where there is no terminal for a bar",
}


def _prints_and_named_loggers(tree: ast.AST) -> tuple[list[int], list[int]]:
    prints, loggers = [], []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "print":
            prints.append(node.lineno)
        elif (isinstance(f, ast.Attribute) and f.attr == "write" and isinstance(f.value, ast.Attribute)
              and f.value.attr in ("stdout", "stderr")):
            prints.append(node.lineno)
        elif (isinstance(f, ast.Attribute) and f.attr == "getLogger" and isinstance(f.value, ast.Name)
              and f.value.id == "logging" and not (node.args and isinstance(node.args[0], ast.Name)
                                                     and node.args[0].id == "__name__")):
            loggers.append(node.lineno)
    return prints, loggers


def test_library_modules_log_instead_of_printing():
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(("_cli/", "sandbox/injected/")) or rel == "cli.py":  # the CLI; stdlib-only sandbox scripts
            continue
        prints, loggers = _prints_and_named_loggers(ast.parse(path.read_text(encoding="utf-8")))
        bad += [f"{rel}:{n} prints" for n in prints if rel not in ALLOWED]
        bad += [f"{rel}:{n} getLogger without __name__" for n in loggers]
    assert not bad, bad


def _fetch(*args: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "TOOLGYM_LOG_LEVEL"}
    return subprocess.run([TOOLGYM, *args, "assets", "fetch", "humaneval"], capture_output=True, text=True,
                          timeout=300, env={**full, **env})


@pytest.mark.slow
def test_cli_log_level_option_and_environment_variable():
    default = _fetch()
    assert default.returncode == 0, default.stderr
    assert "toolgym.assets: humaneval: license MIT" in default.stderr.splitlines()  # INFO shows by default
    for quiet in (_fetch("--log-level", "warning"), _fetch(TOOLGYM_LOG_LEVEL="warning")):
        assert quiet.returncode == 0 and "toolgym.assets" not in quiet.stderr
        assert quiet.stdout == default.stdout
    bad = _fetch("--log-level", "loud")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: --log-level / TOOLGYM_LOG_LEVEL must be one of debug, info, warning, error, critical, got 'loud'"]
