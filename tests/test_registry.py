"""Registry[T], the one shape of every plug-in kind: lazy entries, entry points, package.module:Name names,
and the same one-line errors (toolgym/_registry.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from toolgym._registry import Registry
from toolgym.errors import ConfigError


@pytest.fixture
def site(tmp_path: Path):
    """A folder on sys.path holding a module ``tg_reg_fixture`` and a distribution whose entry points name it."""
    (tmp_path / "tg_reg_fixture.py").write_text(
        "from toolgym.envs.parsing import HermesParser, PARSERS\n"
        "from toolgym.training.algorithms import Algorithm\n"
        "def _objective(cfg):\n    raise AssertionError('not trained here')\n"
        "ALGO = Algorithm('from_ep', {'loss': {'ratio': 'token'}}, None, _objective)\n"
        "class MyParser(HermesParser):\n    pass\n"
        "def hook():\n    PARSERS.add('hooked', MyParser)\n"
        "NOT_AN_ALGORITHM = 3\n"
        "from toolgym.agents.samplers import SamplerSpec\n"
        "SPEC = SamplerSpec('by_ref', 'tg_reg_fixture:build', needs_weight_push=True)\n")
    dist = tmp_path / "tg_reg_fixture-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tg-reg-fixture\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[toolgym.algorithms]\nfrom_ep = tg_reg_fixture:ALGO\nbroken_algo = tg_reg_missing_module:ALGO\n"
        "[toolgym.parsers]\nmine = tg_reg_fixture:MyParser\nhook = tg_reg_fixture:hook\n")
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    sys.modules.pop("tg_reg_fixture", None)


def test_a_lazy_entry_is_imported_only_when_asked_for(site: Path) -> None:
    reg: Registry[type] = Registry("widget", accepts=lambda obj: isinstance(obj, type))
    reg.add("mine", "tg_reg_fixture:MyParser", lazy=True)
    assert "mine" in reg and list(reg) == ["mine"]
    assert "tg_reg_fixture" not in sys.modules
    assert reg.find("mine").__name__ == "MyParser" and "tg_reg_fixture" in sys.modules


def test_unknown_names_and_broken_entries_are_one_line_that_names_them(site: Path) -> None:
    reg: Registry[type] = Registry("widget", accepts=lambda obj: isinstance(obj, type))
    reg.add("gadget", "tg_reg_fixture:MyParser", lazy=True)
    reg.add("gone", "tg_reg_missing_module:X", lazy=True)
    with pytest.raises(ConfigError) as e:
        reg.find("gadgte", "a.field")
    assert str(e.value) == "unknown widget 'gadgte'; did you mean 'gadget'? known: gadget, gone (from a.field)"
    with pytest.raises(ConfigError) as e:
        reg.find("gone")
    assert str(e.value) == ("the plug-in widget 'gone' (tg_reg_missing_module:X) failed to load: ModuleNotFoundError: "
                            "No module named 'tg_reg_missing_module' (is its package installed in this environment?)")
    with pytest.raises(ConfigError) as e:
        reg.find("tg_reg_fixture:NOT_AN_ALGORITHM")
    assert str(e.value) == ("widget 'tg_reg_fixture:NOT_AN_ALGORITHM': 'tg_reg_fixture:NOT_AN_ALGORITHM' is an "
                            "object of type int, not a widget")
    assert "tg_reg_fixture:NOT_AN_ALGORITHM" not in reg


def test_a_lazy_entry_cannot_be_a_bare_name() -> None:
    with pytest.raises(ValueError, match="must be 'module:attr'"):
        Registry("widget").add("x", "not a reference", lazy=True)


def test_algorithms_come_from_entry_points_and_from_references(site: Path) -> None:
    from toolgym.training.algorithms import ALGORITHMS, get_algorithm

    ALGORITHMS.load_plugins(force=True)
    try:
        assert get_algorithm("from_ep").loss == {"ratio": "token"}
        assert get_algorithm("tg_reg_fixture:ALGO") == get_algorithm("from_ep")  # registered checked, equal
        with pytest.raises(ConfigError) as e:
            get_algorithm("broken_algo")
        assert "the plug-in broken_algo (tg_reg_missing_module:ALGO) failed to load: ModuleNotFoundError" in \
            str(e.value)
    finally:
        for name in ("from_ep", "tg_reg_fixture:ALGO"):
            ALGORITHMS.pop(name, None)
        ALGORITHMS.errors.clear()


def test_parsers_come_from_entry_points_hooks_and_references(site: Path) -> None:
    from toolgym.envs.parsing import PARSERS, get_parser, parser_names

    PARSERS.load_plugins(force=True)
    try:
        assert type(get_parser("mine")).__name__ == "MyParser"
        assert type(get_parser("hooked")).__name__ == "MyParser"
        assert type(get_parser("tg_reg_fixture:MyParser")).__name__ == "MyParser"
        assert "mine" in parser_names()
        with pytest.raises(ConfigError, match="is an object of type int, not a tool-call parser$"):
            get_parser("tg_reg_fixture:NOT_AN_ALGORITHM")
    finally:
        for name in ("mine", "hooked", "tg_reg_fixture:MyParser"):
            PARSERS.pop(name, None)


def test_a_config_names_an_installed_sampler_by_its_spec(site: Path) -> None:
    from toolgym.agents.samplers import SAMPLERS, get_sampler

    try:
        spec = get_sampler("tg_reg_fixture:SPEC", "rollout.sampler")
        assert (spec.name, spec.needs_weight_push, spec.follows_training) == ("by_ref", True, True)
        with pytest.raises(ConfigError) as e:
            get_sampler("tg_reg_fixture:NOT_AN_ALGORITHM", "rollout.sampler")
        assert str(e.value).endswith("is an object of type int, not a sampler")
    finally:
        SAMPLERS.pop("tg_reg_fixture:SPEC", None)


def test_sandbox_backends_and_assets_are_registries() -> None:
    from toolgym.assets import ASSETS, KNOWN_ASSETS
    from toolgym.sandbox.api import BACKENDS, SandboxRequestError, make_backend

    assert ASSETS is KNOWN_ASSETS and ASSETS.group == "toolgym.assets" and all(s.builder for s in ASSETS.values())
    assert list(BACKENDS) == ["docker", "local"] and BACKENDS.group == "toolgym.sandbox_backends"
    with pytest.raises(SandboxRequestError) as e:
        make_backend("dockr", None)  # type: ignore[arg-type]
    assert str(e.value) == "unknown sandbox backend 'dockr'; did you mean 'docker'? known: auto, docker, local"
