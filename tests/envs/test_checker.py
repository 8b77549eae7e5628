"""The environment checker catches broken environments (and passes good ones)."""

from __future__ import annotations

import json

import pytest
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


@pytest.mark.slow
def test_cli_check_with_a_model_reports_its_template_and_parser(tmp_path):
    """`envs check ID --model M`: M's template renders the env's tools, the parser it would use, and a call in
    that format reaches the env; with the real Qwen3 tokenizer (Hermes) and a Mistral-format stand-in."""
    from tests.agents.conftest import asset_dir
    from tests.agents.format_templates import stand_in_tokenizer
    from tests.requirements import need
    from toolgym.cli import app

    mistral = tmp_path / "mistral-standin"
    stand_in_tokenizer("mistral").save_pretrained(mistral)
    qwen3 = asset_dir("qwen3-tokenizer")
    need(qwen3 is not None, "the qwen3-tokenizer asset is missing: run `toolgym assets fetch qwen3-tokenizer`")
    runner = CliRunner()
    for model, parser, source in ((qwen3, "hermes", "template"), (mistral, "mistral", "template")):
        res = runner.invoke(app, ["envs", "check", "toolgym/Arith-v0", "-k", "max_digits=4", "--model", str(model),
                                  "--json"])
        assert res.exit_code == 0, res.output
        out = json.loads(res.stdout)
        assert out["ok"], out
        assert out["model"]["tool_parser"] == parser and out["model"]["tool_parser_source"] == source
        assert out["model"]["renders_tools"] is True and out["model"]["call_reaches_env"] is True
        names = [c["name"] for c in out["checks"]]
        assert f"a call written as {parser} reaches the env" in names
        assert "tool results render through the model's template" in names
    # a wrong override is caught: pythonic calls reach the env, but their ids are not the 9-character ids the
    # Mistral template demands, so the results cannot be rendered for the next turn
    res = runner.invoke(app, ["envs", "check", "toolgym/Arith-v0", "--model", str(mistral), "--tool-parser", "pythonic"])
    assert res.exit_code == 1, res.output
    assert "parses tool calls as pythonic (override)" in res.output
    assert "ok   a call written as pythonic reaches the env" in res.output
    assert "FAIL tool results render through the model's template: TemplateError: Tool call IDs" in res.output
    res = runner.invoke(app, ["envs", "check", "toolgym/Arith-v0", "--model", str(mistral), "--tool-parser", "xml"])
    assert res.exit_code == 2 and "unknown tool-call format 'xml'" in res.output and "Traceback" not in res.output


def test_a_template_without_tools_is_reported_and_the_model_check_fails_for_a_deaf_env():
    """SmolLM2-like templates print no tools (toolgym adds them to the system turn); an env whose parser
    ignores the model's format fails the call check."""
    from tests.agents.format_templates import stand_in_tokenizer
    from toolgym.agents.chat import ChatTemplate
    from toolgym.envs.checker import check_model_format

    tok = stand_in_tokenizer("qwen3_coder")
    tok.chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" \
                        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    tpl = ChatTemplate(tok)
    checks, summary = check_model_format(good_env, tpl)
    assert summary == {"tool_parser": "hermes", "tool_parser_source": "default", "renders_tools": False,
                       "call_reaches_env": True}
    assert failed(checks) == set()
    assert "system turn" in next(c.detail for c in checks if c.name == "the prompt shows the env's tools")

    class Deaf(ToolEnv):
        def use_tool_format(self, parser):  # keeps Hermes whatever the model writes
            pass

    checks, summary = check_model_format(lambda: Deaf(GeneratorSource(task), tools=[echo], sandbox=None),
                                         ChatTemplate(stand_in_tokenizer("mistral")))
    assert failed(checks) == {"a call written as mistral reaches the env"} and summary["call_reaches_env"] is False
