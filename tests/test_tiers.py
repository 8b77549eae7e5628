"""The fast tier (``pytest -m "not slow"``) is what the test files declare: ``@pytest.mark.slow`` on a test or a
parametrize case, ``pytestmark`` on a module. No timing file decides it, so the tier is the same on every machine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# one file of each way to declare: a parametrize case, the sandbox's backend case, a decorated test, a module
FILES = ["tests/suites/test_lmeval_parity.py", "tests/sandbox/test_attack_fault_attribution.py",
         "tests/training/test_resume.py"]


def _collect(*args: str) -> set[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args,
                          *FILES], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return {line for line in out.stdout.splitlines() if "::" in line}


def test_no_timing_file_decides_the_tiers() -> None:
    import tests.conftest as conftest

    assert not (ROOT / "tests" / "durations.json").exists() and not (ROOT / "scripts" / "test_durations.py").exists()
    assert not hasattr(conftest, "SLOW_S")


@pytest.mark.slow
def test_what_a_file_declares_slow_is_left_out_of_the_fast_tier_and_nothing_else() -> None:
    parity = "tests/suites/test_lmeval_parity.py::test_contexts_and_continuations_equal_lm_evals_requests"
    fault = ("tests/sandbox/test_attack_fault_attribution.py::"
             "test_a_sandbox_that_fails_mid_batch_fails_only_the_job_that_made_it_fail")
    declared_slow = {f"{parity}[sciq-1000]", f"{fault}[docker]",
                     "tests/training/test_resume.py::test_kill9_then_resume_matches_uninterrupted_run",
                     "tests/sandbox/test_attack_fault_attribution.py::test_a_jobs_own_time_excludes_its_batch_mates[local]"}
    every, fast = _collect(), _collect("-m", "not slow")
    assert declared_slow <= every and not declared_slow & fast, declared_slow & fast
    assert {f"{parity}[arc_easy-200]", f"{fault}[local]", "tests/sandbox/test_attack_fault_attribution.py::"
            "test_a_call_whose_sandbox_fails_gets_its_own_verdict[docker]"} <= fast
    assert fast < every


def test_a_check_with_a_short_form_is_marked_long() -> None:
    """CI runs the short form of what reads ``long_checks()``; the marker lets `-m long` find the long forms."""
    users = [p for p in (ROOT / "tests").rglob("test_*.py") if "long_checks()" in p.read_text()]
    assert users, "no test reads long_checks(): drop the marker and TOOLGYM_LONG_CHECKS"
    unmarked = [str(p.relative_to(ROOT)) for p in users if "pytest.mark.long" not in p.read_text()]
    assert not unmarked, f"these read long_checks() but mark no test long: {unmarked}"
