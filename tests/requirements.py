"""One rule for tests whose real parts (Docker, the local sandbox, vLLM, assets, lm-eval, ...) are missing:
skip on a developer's machine, fail under CI, where scripts/setup.sh installs and starts every part."""

from __future__ import annotations

import os

import pytest


def on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def need(cond: bool, why: str) -> None:
    """Skip locally when a part is missing; under CI the test fails instead."""
    if not cond:
        if on_ci():
            pytest.fail(f"CI is set but {why}")
        pytest.skip(why)


def need_module(name: str):
    """``pytest.importorskip`` that fails under CI, where every test dependency is installed."""
    if on_ci():
        import importlib

        try:
            return importlib.import_module(name)
        except ImportError as exc:
            pytest.fail(f"CI is set but {name} cannot be imported ({exc}): scripts/setup.sh installs it")
    return pytest.importorskip(name)


def long_checks() -> bool:
    """TOOLGYM_LONG_CHECKS=1 runs the long form of the few checks (marked ``long``) that CI runs in a short
    form: a whole dataset instead of a fixed sample of it, more training steps."""
    return os.environ.get("TOOLGYM_LONG_CHECKS", "").strip().lower() not in ("", "0", "false", "no")
