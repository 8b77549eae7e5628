"""Suites as entry lists: built-ins, YAML files, subsets, and actionable errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolgym.errors import ConfigError
from toolgym.suites.registry import builtin_suites, load_suite


def test_builtin_suites_cover_the_issue() -> None:
    s = builtin_suites()
    assert {e.name for e in s["science"].entries} >= {"arc_challenge", "arc_easy", "mmlu_stem", "sciq",
                                                       "openbookqa", "gpqa_diamond"}
    assert {e.name for e in s["code"].entries} >= {"humaneval", "mbpp", "leetcode", "livecodebench", "codecontests"}
    assert {e.name for e in s["math"].entries} >= {"gsm8k", "math500", "aime"}
    for suite in s.values():
        for e in suite.entries:
            assert e.env.startswith("toolgym/") and ":" in e.source


def test_yaml_suite_and_subset(tmp_path: Path) -> None:
    f = tmp_path / "mine.yaml"
    f.write_text(
        "name: mine\nentries:\n"
        "  - {name: a, env: toolgym/ScienceQA-v0, source: asset:arc_easy, metric: acc_norm}\n"
        "  - {name: b, env: toolgym/MathTIR-v0, source: 'aime:/x.jsonl', metric: maj@8, optional: true}\n"
    )
    s = load_suite(str(f))
    assert s.name == "mine" and [e.name for e in s.entries] == ["a", "b"] and s.entries[1].optional
    assert [e.name for e in s.select("b").entries] == ["b"]
    with pytest.raises(ConfigError, match=r"^unknown suite entry 'zzz'; known: a, b \(in suite 'mine'\)$"):
        s.select("zzz")


@pytest.mark.parametrize(("body", "msg"), [
    ("name: x\n", "entries"),
    ("entries:\n  - {name: a, env: e, source: asset:x}\n", "missing metric"),
    ("entries:\n  - {name: a, env: e, source: asset:x, metric: f1}\n", "metric 'f1'"),
    ("entries:\n  - {name: a, env: e, source: asset:x, metric: acc, colour: red}\n", "unknown suite entry key 'colour'"),
    ("entries:\n  - {name: a, env: e, sourse: asset:x, metric: acc}\n",
     "^unknown suite entry key 'sourse'; did you mean 'source'\\? known: name, env, source, metric, options, optional "
     "\\(in .*bad.yaml, entry 1\\)$"),
    ("entries: [\n", "invalid YAML"),
])
def test_bad_yaml_is_a_config_error(tmp_path: Path, body: str, msg: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(body)
    with pytest.raises(ConfigError, match=msg):
        load_suite(str(f))


def test_unknown_suite() -> None:
    with pytest.raises(ConfigError, match="unknown suite"):
        load_suite("nope")


def test_a_suite_from_a_package_by_reference_and_by_entry_point(tmp_path: Path) -> None:
    import sys

    from toolgym.suites.registry import SUITES, registered_suites

    (tmp_path / "tg_suite_fixture.py").write_text(
        "from toolgym.suites.registry import Suite, SuiteEntry\n"
        "MINE = Suite('mine', [SuiteEntry('a', 'toolgym/ScienceQA-v0', 'asset:arc_easy', 'acc_norm')], 'one')\n")
    dist = tmp_path / "tg_suite_fixture-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tg-suite-fixture\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[toolgym.suites]\nmine = tg_suite_fixture:MINE\n")
    sys.path.insert(0, str(tmp_path))
    try:
        SUITES.load_plugins(force=True)
        assert [e.name for e in load_suite("mine").entries] == ["a"]
        assert load_suite("tg_suite_fixture:MINE").description == "one"
        assert list(registered_suites())[:4] == ["science", "code", "math", "mine"]
        picked = load_suite("mine").select("a")
        picked.entries[0].options["x"] = 1  # a caller's copy: the registered suite is unchanged
        assert load_suite("mine").entries[0].options == {}
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("tg_suite_fixture", None)
        for name in ("mine", "tg_suite_fixture:MINE"):
            SUITES.pop(name, None)


def test_an_env_source_names_a_part_of_the_environments_own_tasks() -> None:
    """`source: env[:PART]` (an environment's own tasks) is read; a misspelt part is one line when the file is."""
    import pytest

    from toolgym.errors import ConfigError
    from toolgym.suites.registry import suite_from_dict

    entry = {"name": "mine", "env": "toolgym/Arith-v0", "metric": "avg@1"}
    for source in ("env", "env:test", "env:train", "env:all"):
        assert suite_from_dict({"entries": [{**entry, "source": source}]}).entries[0].source == source
    with pytest.raises(ConfigError, match=r"unknown env source part 'tset'; did you mean 'test'\?"):
        suite_from_dict({"entries": [{**entry, "source": "env:tset"}]})
