"""Multi-turn alignment per tool-call format: a real ToolEnv (default parser "hermes") run by the rollout
runner with a model whose template writes another format. The runner must (1) give the env the model's
format, so the call runs, (2) render the tool result through the model's own template, and (3) keep
token-in/token-out: the sampled ids verbatim, and the whole episode equal to the template's rendering of
the conversation the model was trained on.

The model is scripted: each turn it writes exactly what its template renders for that assistant turn,
as a model trained on the template would. `hermes` runs on the real Qwen3 and Qwen2.5-Coder templates;
the other formats on the stand-in templates of tests/agents/format_templates.py (no tokenizer of those
families ships here)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.agents.conftest import asset_dir
from tests.agents.format_templates import STAND_INS, stand_in_tokenizer
from tests.agents.helpers import segments
from tests.requirements import need
from toolgym.agents.chat import ChatTemplate
from toolgym.agents.runner import EpisodeLimits, RolloutRunner
from toolgym.agents.sampling import Sample, Sampler, SamplingParams
from toolgym.envs import ToolEnv, tool
from toolgym.envs.parsing import get_parser
from toolgym.envs.types import Task


@tool
def add(a: float, b: float) -> str:
    """Add two numbers.

    Args:
        a: the first number
        b: the second number
    """
    return f"{a + b:g}"


SYSTEM = "You add numbers carefully."
QUESTION = "What is 1 + 2? Use the add tool."


def make_env() -> ToolEnv:
    return ToolEnv([Task(id="sum", prompt=[{"role": "user", "content": QUESTION}], ground_truth="3")],
                   tools=[add], system_prompt=SYSTEM, sandbox=None, max_turns=3)


class ScriptedSampler(Sampler):
    """Returns the scripted turns in order (the ids a model trained on the template would sample)."""

    name = "scripted"

    def __init__(self, turns: list[list[int]]) -> None:
        self.turns = list(turns)
        self.prompts: list[list[int]] = []

    async def agenerate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Sample]]:
        self.prompts.append(list(prompts[0]))
        ids = self.turns.pop(0)
        return [[Sample(token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason="stop")]]


def conversation(fmt: str, call_id: str, family: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(first assistant turn with its call, the rest: tool result and final answer), as the family writes them."""
    call = {"id": call_id, "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}
    first: dict[str, Any] = {"role": "assistant", "content": "Let me add them." if fmt in ("gpt_oss", "qwen3_coder",
                                                                                            "mistral") else "",
                             "tool_calls": [call]}
    final: dict[str, Any] = {"role": "assistant", "content": "The answer is \\boxed{3}."}
    if family == "qwen3":  # Qwen3 renders the reasoning of turns after the last question: give the turns some
        first["reasoning_content"] = "I should call add."
        final["reasoning_content"] = "The tool said 3."
    tool_msg = {"role": "tool", "name": "add", "tool_call_id": call_id, "content": "3"}
    return [first], [tool_msg, final]


def tokenizer_for(family: str) -> Any:
    if family in STAND_INS:
        return stand_in_tokenizer(family)
    from transformers import AutoTokenizer

    name = {"qwen3": "qwen3-tokenizer", "qwen2.5-coder": "qwen2.5-coder-0.5b-instruct"}[family]
    p = asset_dir(name)
    need(p is not None, f"the {name} asset is missing: run `toolgym assets fetch {name}`")
    return AutoTokenizer.from_pretrained(str(p))


FAMILIES = [("hermes", "qwen3"), ("hermes", "qwen2.5-coder"), *((f, f) for f in STAND_INS)]


@pytest.mark.parametrize("fmt, family", FAMILIES, ids=[f"{f}-{fam}" for f, fam in FAMILIES])
def test_tool_episode_in_the_models_format_is_token_exact(fmt: str, family: str) -> None:
    tok = tokenizer_for(family)
    tpl = ChatTemplate(tok)
    assert tpl.tool_parser.name == fmt and tpl.tool_parser_source == "template"
    assert tpl.renders_tools()
    env = make_env()
    prompt_msgs, info = env.reset(options={"index": 0})
    tools = info["tools"]
    first, rest = conversation(fmt, get_parser(fmt).call_id(1, 0), family)

    def rendered(msgs: list[dict[str, Any]], gen: bool) -> str:
        return tpl.render_text(msgs, tools, add_generation_prompt=gen)

    # what a model trained on this template writes: the template's text for its turn, after the header
    turn1 = rendered(prompt_msgs + first, False)[len(rendered(prompt_msgs, True)) :]
    convo = prompt_msgs + first + rest
    turn2 = rendered(convo, False)[len(rendered(convo[:-1], True)) :]
    script = [tpl.encode(turn1), tpl.encode(turn2)]
    sampler = ScriptedSampler(script)
    runner = RolloutRunner(sampler, tpl, make_env, SamplingParams(max_tokens=64),
                           EpisodeLimits(max_turns=3, max_total_tokens=4000), seed=0)
    (group,) = runner.run([0], group_size=1)
    traj = group[0]
    assert traj.error is None, traj.error
    assert traj.metadata["tool_parser"] == fmt
    tool_turns = [m for m in traj.turns if m["role"] == "tool"]
    assert [(m["name"], m["content"]) for m in tool_turns] == [("add", "3")], traj.turns  # the call ran
    assert traj.finish_reason == "answer" and traj.reward == 1.0
    # token-in/token-out: the sampled runs are the scripted ids verbatim, the template's runs are mask 0
    runs = [(s, e) for s, e, m in segments(traj.loss_mask) if m == 1]
    assert [traj.response_ids[s:e] for s, e in runs] == [tpl.encode(turn1), tpl.encode(turn2)]
    # the second prompt is the one the model was trained on: the template's rendering of the conversation
    assert tok.decode(sampler.prompts[1]) == rendered(prompt_msgs + first + rest[:1], True)
    assert tok.decode(traj.prompt_ids + traj.response_ids) == rendered(convo, False)


@pytest.mark.parametrize("fmt", list(STAND_INS))
def test_override_beats_the_template_and_unknown_names_are_refused(fmt: str) -> None:
    from toolgym.errors import ConfigError

    tok = stand_in_tokenizer(fmt)
    other = "pythonic" if fmt != "pythonic" else "mistral"
    tpl = ChatTemplate(tok, tool_parser=other)
    assert tpl.tool_parser.name == other and tpl.tool_parser_source == "override"
    with pytest.raises(ConfigError, match="llama3_json"):
        ChatTemplate(tok, tool_parser="python")  # fenced blocks are an environment's fallback, not a model format


def test_decode_turn_keeps_the_formats_markers_and_drops_end_of_turn_tokens() -> None:
    tok = stand_in_tokenizer("mistral")
    tpl = ChatTemplate(tok)
    ids = tpl.encode('[TOOL_CALLS]add[ARGS]{"a": 1}</s><pad>')
    assert tpl.decode(ids, skip_special_tokens=True) == 'add{"a": 1}'  # what the runner handed envs before
    assert tpl.decode_turn(ids) == '[TOOL_CALLS]add[ARGS]{"a": 1}'


def test_tool_results_after_several_calls_fall_back_when_the_template_takes_one_call() -> None:
    """Llama 3.1 refuses two calls in one turn; the results still render (after a plain stand-in turn)."""
    tpl = ChatTemplate(stand_in_tokenizer("llama3_json"))
    results = [{"role": "tool", "name": "add", "tool_call_id": f"call_1_{i}", "content": str(i)} for i in range(2)]
    sampled = tpl.encode('{"name": "add", "parameters": {}}<|eot_id|>')
    text = tpl.decode(tpl.continuation_ids(sampled, results))
    assert text == ("<|start_header_id|>ipython<|end_header_id|>\n\n0<|eot_id|><|start_header_id|>ipython"
                    "<|end_header_id|>\n\n1<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")


def test_gpt_oss_results_name_the_function_and_close_a_cut_off_call() -> None:
    tpl = ChatTemplate(stand_in_tokenizer("gpt_oss"))
    result = [{"role": "tool", "name": "add", "tool_call_id": "call_1_0", "content": "3"}]
    with pytest.raises(Exception, match="no previous assistant message with a tool call"):
        tpl.delta_text(result)  # a plain stand-in turn: the template refuses the result
    want = "<|start|>functions.add to=assistant<|channel|>commentary<|message|>3<|end|><|start|>assistant"
    closed = tpl.encode('<|channel|>commentary to=functions.add json<|message|>{"a": 1}<|call|>')
    assert tpl.decode(tpl.continuation_ids(closed, result)) == want
    cut = closed[:-1]  # stopped before <|call|>: the template's close comes first
    assert tpl.decode(tpl.continuation_ids(cut, result)) == "<|call|>" + want
