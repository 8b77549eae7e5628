"""Tool-call parsers: Hermes tags, fenced python blocks, combined; hostile input never raises."""

from __future__ import annotations

import json
import random

import pytest

from toolgym.envs.parsing import (
    CombinedParser,
    HermesParser,
    NoToolParser,
    PythonBlockParser,
    get_parser,
    strip_thinking,
)
from toolgym.errors import ConfigError


def hermes(name, args):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


def test_hermes_several_calls_in_order():
    text = "Let me check.\n" + hermes("python", {"code": "print(1)"}) + "\nand\n" + hermes("calc", {"expression": "2+2"})
    turn = HermesParser().parse(text, turn=3)
    assert [c.name for c in turn.calls] == ["python", "calc"]
    assert turn.calls[0].arguments == {"code": "print(1)"}
    assert turn.calls[1].arguments == {"expression": "2+2"}
    assert [c.id for c in turn.calls] == ["call_3_0", "call_3_1"]
    assert turn.errors == [] and turn.answer is None


def test_hermes_double_encoded_arguments_and_parameters_key():
    t1 = HermesParser().parse('<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>')
    assert t1.calls[0].arguments == {"x": 1}
    t2 = HermesParser().parse('<tool_call>{"name": "f", "parameters": {"y": 2}}</tool_call>')
    assert t2.calls[0].arguments == {"y": 2}


@pytest.mark.parametrize(
    "text, needle",
    [
        ('<tool_call>{"name": "python", "arguments": {"code": </tool_call>', "invalid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', '"name"'),
        ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', '"arguments" must be a JSON object'),
        ('<tool_call>{"name": "f", "arguments": "not json"}</tool_call>', "not valid JSON"),
        ("<tool_call>   </tool_call>", "empty"),
        ('<tool_call>{"name": "f"', "unterminated"),
        ('<tool_call><tool_call>{"name": "f"}</tool_call>', "nested"),
        ('{"name": "f"}</tool_call>', "without a matching"),
    ],
)
def test_hermes_malformed_becomes_named_error(text, needle):
    turn = HermesParser().parse(text)
    assert turn.calls == []
    assert turn.errors, "a malformed call must produce an error for the model"
    assert any(needle in e.message for e in turn.errors), [e.message for e in turn.errors]
    assert turn.has_tool_activity


def test_hermes_good_call_survives_a_bad_neighbour():
    text = "<tool_call>{bad}</tool_call>" + hermes("python", {"code": "x"})
    turn = HermesParser().parse(text)
    assert [c.name for c in turn.calls] == ["python"]
    assert len(turn.errors) == 1


def test_too_many_calls_are_capped_with_an_error():
    text = "".join(hermes("f", {"i": i}) for i in range(12))
    turn = HermesParser(max_calls=3).parse(text)
    assert len(turn.calls) == 3
    assert any("too many" in e.message for e in turn.errors)


def test_calls_inside_thinking_are_not_run():
    text = "<think>maybe " + hermes("python", {"code": "1"}) + "</think>The answer is \\boxed{4}."
    turn = HermesParser().parse(text)
    assert turn.calls == [] and turn.answer == "4"
    unclosed = "<think>" + hermes("python", {"code": "1"})
    assert HermesParser().parse(unclosed).calls == []
    assert strip_thinking("a</think>b</think>c") == "c"


def test_python_blocks_are_calls_and_output_blocks_are_skipped():
    text = "First\n```python\nx = 2\nprint(x)\n```\n```output\n2\n```\nthen\n```py\nprint(3)\n```"
    turn = PythonBlockParser().parse(text)
    assert [c.arguments["code"] for c in turn.calls] == ["x = 2\nprint(x)\n", "print(3)\n"]
    assert all(c.name == "python" for c in turn.calls)


def test_python_block_unterminated_is_an_error_and_other_fences_ignored():
    assert "unterminated" in PythonBlockParser().parse("```python\nprint(1)").errors[0].message
    turn = PythonBlockParser().parse("```bash\nls\n```\n```\nplain\n```\nAnswer: 7")
    assert turn.calls == [] and turn.answer == "7"


def test_combined_prefers_hermes_and_falls_back_to_blocks():
    p = CombinedParser()
    both = hermes("calc", {"expression": "1"}) + "\n```python\nprint(1)\n```"
    assert [c.name for c in p.parse(both).calls] == ["calc"]
    assert [c.name for c in p.parse("```python\nprint(1)\n```").calls] == ["python"]


def test_final_answer_only_when_no_calls():
    assert PythonBlockParser().parse("```python\nprint(1)\n```\n\\boxed{1}").answer is None
    assert NoToolParser().parse("<tool_call>{}</tool_call> \\boxed{5}").answer == "5"


def test_non_string_action_is_an_error_not_a_crash():
    turn = HermesParser().parse(None)  # type: ignore[arg-type]
    assert turn.errors and "text" in turn.errors[0].message


@pytest.mark.parametrize("parser", ["hermes", "python", "hermes+python", "none"])
def test_hostile_input_never_raises(parser):
    p = get_parser(parser)
    rng = random.Random(1)
    pieces = ["<tool_call>", "</tool_call>", "{", "}", '"name"', ":", "```python\n", "```", "<think>", "</think>",
              "\\boxed{", "<answer>", "\x00", "\ud800", "🙂", "\u202e", "\n"]
    for _ in range(200):
        text = "".join(rng.choice(pieces) if rng.random() < 0.5 else chr(rng.randint(0, 0x10FFFF)) for _ in range(rng.randint(0, 60)))
        p.parse(text)
    big = "".join(rng.choice(pieces) for _ in range(1 << 17))  # about a megabyte
    turn = p.parse(big)
    assert len(turn.calls) <= p.max_calls
    deep = "<tool_call>" + "[" * 100000 + "</tool_call>"
    assert p.parse(deep) is not None


def test_unknown_parser_name():
    with pytest.raises(ConfigError, match="hermes"):
        get_parser("xml")
