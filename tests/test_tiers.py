"""The fast tier: tests/durations.json (renewed by scripts/test_durations.py) marks measured-slow tests slow."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("test_durations", ROOT / "scripts" / "test_durations.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def test_durations_add_up_per_test_and_keep_ids_with_spaces() -> None:
    lines = ["============ slowest durations ============",
             "2.50s call     tests/a.py::test_x[docker-weakref.finalize run by the restore]",
             "0.75s setup    tests/a.py::test_x[docker-weakref.finalize run by the restore]",
             "0.01s teardown tests/b.py::test_y",
             "(3 durations < 0.005s hidden.  Use -vv to show these durations.)"]
    got = _script().parse(lines)
    assert got == {"tests/a.py::test_x[docker-weakref.finalize run by the restore]": 3.25, "tests/b.py::test_y": 0.01}


def test_a_test_measured_slow_is_left_out_of_the_fast_tier() -> None:
    import json
    import subprocess
    import sys

    measured = json.loads((ROOT / "tests" / "durations.json").read_text())["seconds"]
    slow = "tests/integrations/test_trl.py::test_two_trl_steps_train_with_the_toolgym_loss"
    fast = "tests/integrations/test_trl.py::test_trl_settings_the_loss_cannot_honour_are_refused_and_ratio_one_is_said"
    from tests.conftest import SLOW_S

    assert measured[slow] > SLOW_S > measured.get(fast, 0.0), "the recorded durations changed: pick other examples"
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "-m", "not slow", "tests/integrations/test_trl.py"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    collected = {line for line in out.stdout.splitlines() if "::" in line}
    assert fast in collected and slow not in collected
