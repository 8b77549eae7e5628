"""Registry: built-ins, make/spec/register, close-match suggestions, third-party entry points."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium
import pytest

import toolgym
from toolgym.envs import registry
from toolgym.envs.core import ToolEnv
from toolgym.errors import ConfigError, ToolgymError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plugin_env"


def test_builtins_are_listed_and_made_unwrapped():
    ids = registry.list_envs()
    for env_id in registry.BUILTIN:
        assert env_id in ids
    env = toolgym.make("toolgym/Arith-v0", sandbox=None)
    try:
        assert isinstance(env, ToolEnv)  # no Gymnasium wrappers hiding areset/astep
        assert env.spec.id == "toolgym/Arith-v0"
    finally:
        env.close()
    assert toolgym.spec("toolgym/MathTIR-v0").entry_point == registry.BUILTIN["toolgym/MathTIR-v0"]


def test_unknown_id_suggests_close_matches():
    with pytest.raises(registry.UnknownEnvError) as ei:
        toolgym.make("toolgym/Arithm-v0")
    assert "toolgym/Arith-v0" in str(ei.value)
    assert isinstance(ei.value, ToolgymError)
    with pytest.raises(registry.UnknownEnvError, match="toolgym/MathTIR-v0"):
        toolgym.spec("toolgym/mathtir-v0")
    with pytest.raises(registry.UnknownEnvError, match=r"^unknown environment 'zzz/Qqq-v9'; known: (\S+, )*toolgym/Arith-v0, "):
        toolgym.spec("zzz/Qqq-v9")


def test_register_custom_env_and_conflicts():
    env_id = "testns/Custom-v0"
    try:
        toolgym.register(env_id, entry_point="toolgym.envs.tasks.arith:ArithEnv", kwargs={"max_digits": 3})
        toolgym.register(env_id, entry_point="toolgym.envs.tasks.arith:ArithEnv")  # same entry point: no-op
        env = toolgym.make(env_id, sandbox=None)
        assert env.config.max_digits == 3
        env.close()
        with pytest.raises(ConfigError, match="already registered"):
            toolgym.register(env_id, entry_point="toolgym.envs.tasks.math_tir:MathTIREnv")
        toolgym.register(env_id, entry_point="toolgym.envs.tasks.math_tir:MathTIREnv", override=True)
        assert toolgym.spec(env_id).entry_point.endswith("MathTIREnv")
    finally:
        gymnasium.registry.pop(env_id, None)


@pytest.mark.parametrize("bad", ["NoNamespace-v0", "ns/NoVersion", "ns/Bad Name-v0", ""])
def test_ids_must_be_namespaced_and_versioned(bad):
    with pytest.raises(ConfigError, match="namespace/Name-v0"):
        toolgym.register(bad, entry_point="x:y")


@pytest.mark.slow
def test_example_plugin_installs_and_is_found_by_entry_point(tmp_path):
    """pip-install the example package into a folder, put it on sys.path, find it by entry point."""
    target = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--quiet",
         "--target", str(target), str(EXAMPLE)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    sys.path.insert(0, str(target))
    try:
        registry.load_plugins(force=True)
        assert "example/Reverse-v0" in registry.list_envs()
        assert "example/ReverseHard-v0" in registry.list_envs()  # registered by the hook entry point
        env = toolgym.make("example/Reverse-v0")
        obs, info = env.reset(seed=3)
        assert info["tools"][0]["function"]["name"] == "reverse"
        word = obs[-1]["content"].split("'")[1]
        call = json.dumps({"name": "reverse", "arguments": {"text": word}})
        obs, r, term, trunc, info = env.step(f"<tool_call>{call}</tool_call>")
        assert obs[0]["role"] == "tool" and obs[0]["content"] == word[::-1] and r == 0.0 and not term
        obs, r, term, trunc, info = env.step(f"<answer>{word[::-1]}</answer>")
        assert term and r == 1.0 and info["reward_components"] == {"correct": 1.0}
        hard = toolgym.make("example/ReverseHard-v0")
        assert len(hard.reset(seed=0)[0][-1]["content"].split("'")[1].split()) == 3
        env.close()
        hard.close()
        from toolgym.envs.checker import check_env

        assert all(c.ok for c in check_env(lambda: toolgym.make("example/Reverse-v0")))
    finally:
        sys.path.remove(str(target))
        for k in [k for k in sys.modules if k.startswith("toolgym_reverse_env")]:
            del sys.modules[k]
        gymnasium.registry.pop("example/Reverse-v0", None)
        gymnasium.registry.pop("example/ReverseHard-v0", None)
        registry._ours.discard("example/Reverse-v0")
        registry._ours.discard("example/ReverseHard-v0")


def test_broken_plugin_is_reported_not_fatal(tmp_path):
    dist = tmp_path / "broken_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[toolgym.envs]\nhook = no_such_module_xyz:register\n"
                                           "example/Broken-v0 = no_such_module_xyz:Env\n")
    sys.path.insert(0, str(tmp_path))
    try:
        registry.load_plugins(force=True)
        assert any("no_such_module_xyz" in k for k in registry.plugin_errors)
        assert "toolgym/Arith-v0" in registry.list_envs()
        # made by id, the broken plug-in is one line naming it and its error, as every registry says it
        with pytest.raises(ConfigError) as e:
            toolgym.make("example/Broken-v0")
        assert str(e.value) == ("the plug-in environment 'example/Broken-v0' (no_such_module_xyz:Env) failed to load: "
                                "ModuleNotFoundError: No module named 'no_such_module_xyz' (is its package installed "
                                "in this environment?)")
    finally:
        sys.path.remove(str(tmp_path))
        registry.plugin_errors.clear()
        gymnasium.registry.pop("example/Broken-v0", None)
        registry._ours.discard("example/Broken-v0")


def test_readme_example_script_runs():
    script = Path(__file__).resolve().parents[2] / "examples" / "register_env.py"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "reward: 1.0" in proc.stdout


RACE = """
import sys, threading
import gymnasium
from toolgym.envs import registry
sys.setswitchinterval(1e-6)  # switch threads as often as possible: the race shows in most rounds
failed = 0
for _ in range(30):  # each round a fresh registry, as in a new rollout worker process
    registry._loaded = False
    for env_id in registry.BUILTIN:
        gymnasium.registry.pop(env_id, None)
    barrier, errors = threading.Barrier(8), []
    def build():
        barrier.wait()
        try:
            registry.spec("toolgym/Arith-v0")
        except Exception as exc:
            errors.append(exc)
    threads = [threading.Thread(target=build) for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    failed += bool(errors)
print(failed)
"""


def test_threads_that_build_envs_in_a_fresh_process_all_find_the_builtins():
    # episodes build their envs on threads; the first ones in a new process load the registry together
    out = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["0"]
