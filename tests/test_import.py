"""`import toolgym` and `toolgym --help` stay fast and free of heavy ML imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ("torch", "transformers", "vllm", "ray", "accelerate", "safetensors")

_PROBE = """
import json, sys, time
t0 = time.perf_counter()
import toolgym
elapsed = time.perf_counter() - t0
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(HEAVY))
print(json.dumps({"seconds": elapsed, "heavy": heavy, "version": toolgym.__version__}))
""".replace("HEAVY", repr(HEAVY))


def _probe() -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_is_light_and_fast() -> None:
    runs = [_probe() for _ in range(3)]
    assert all(r["heavy"] == [] for r in runs), runs[0]["heavy"]
    # "well under a second": the best of three cold imports, generous for a loaded CI box
    assert min(r["seconds"] for r in runs) < 1.0, runs


def test_cli_help_works_without_heavy_imports() -> None:
    code = (
        "import sys, json\n"
        "sys.argv = ['toolgym', '--help']\n"
        "from toolgym.cli import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "assets" in out.stdout and "doctor" in out.stdout
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_console_script_help() -> None:
    script = Path(sys.executable).parent / "toolgym"
    cmd = [str(script)] if script.exists() else [sys.executable, "-c", "from toolgym.cli import main; main()"]
    out = subprocess.run([*cmd, "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Usage" in out.stdout and "assets" in out.stdout
