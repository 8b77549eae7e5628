"""The environment checker catches broken environments (and passes good ones)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from toolgym.envs import Rubric, Task, ToolEnv, tool
from toolgym.envs.checker import check_env
from toolgym.envs.sources import GeneratorSource


@tool
def echo(text: str) -> str:
    """Echo text."""
    return text


def task(i: int) -> Task:
    return Task(id=f"t{i}", prompt=[{"role": "user", "content": f"say {i}"}], ground_truth=str(i))


def good_env(**kw) -> ToolEnv:
    return ToolEnv(GeneratorSource(task), tools=[echo], sandbox=None, **kw)


def failed(checks) -> set[str]:
    return {c.name for c in checks if not c.ok}


def test_good_env_passes():
    assert failed(check_env(good_env)) == set()


def test_reward_outside_documented_range_fails():
    def huge(answer):
        return 5.0

    assert "step contract on hostile and ordinary text" in failed(check_env(lambda: good_env(rubric=Rubric([huge], range=(0, 1)))))


def test_non_json_info_fails():
    class BadInfo(ToolEnv):
        async def areset(self, *, seed=None, options=None):
            obs, info = await super().areset(seed=seed, options=options)
            info["obj"] = object()
            return obs, info

    assert "reset info is JSON-serializable" in failed(check_env(lambda: BadInfo(GeneratorSource(task), sandbox=None)))


def test_nondeterministic_reset_fails():
    import random

    class Random(ToolEnv):
        def sample_task(self, options):
            return task(random.randrange(10**9))

    assert "reset is deterministic for a seed" in failed(check_env(lambda: Random(GeneratorSource(task), sandbox=None)))


def test_crashing_step_fails():
    class Crashy(ToolEnv):
        async def astep(self, action):
            if "<tool_call>" in action:
                raise RuntimeError("parser bug")
            return await super().astep(action)

    f = failed(check_env(lambda: Crashy(GeneratorSource(task), tools=[echo], sandbox=None)))
    assert "step contract on hostile and ordinary text" in f


def test_invalid_tool_schema_fails():
    class BadSchema(ToolEnv):
        @property
        def tool_schemas(self):
            return [{"type": "function", "function": {"name": "x", "description": "", "parameters": {"type": "object", "properties": {"a": {"type": "nope"}}}}}]

    assert "tool schemas are valid JSON Schema" in failed(check_env(lambda: BadSchema(GeneratorSource(task), sandbox=None)))


def test_cli_list_and_check():
    from toolgym.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["envs", "list", "--json"])
    assert res.exit_code == 0
    ids = [e["id"] for e in json.loads(res.stdout)["envs"]]
    assert "toolgym/Arith-v0" in ids and "toolgym/CodeContest-v0" in ids
    res = runner.invoke(app, ["envs", "check", "toolgym/Arith-v0", "-k", "max_digits=4", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["ok"] and all(c["ok"] for c in out["checks"])
    res = runner.invoke(app, ["envs", "check", "toolgym/Arth-v0"])
    assert res.exit_code == 2 and "did you mean 'toolgym/Arith-v0'" in res.output
    res = runner.invoke(app, ["envs", "check", "toolgym/Arith-v0", "-k", "max_digits=0"])
    assert res.exit_code == 2 and "digits" in res.output and "Traceback" not in res.output
