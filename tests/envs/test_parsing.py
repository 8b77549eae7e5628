"""Tool-call parsers: Hermes tags, fenced python blocks, combined; hostile input never raises."""

from __future__ import annotations

import json
import random

import pytest

from toolgym.envs.parsing import (
    FORMATS,
    PARSERS,
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


MARKERS = ["<tool_call>", "</tool_call>", "<|python_tag|>", "<|python_start|>", "<|python_end|>", "[TOOL_CALLS]",
           "[ARGS]", "[CALL_ID]", "<function=", "</function>", "<parameter=", "</parameter>", ">", "<|channel|>",
           "<|message|>", "<|call|>", "<|end|>", "<|start|>", "<|constrain|>", "to=functions.", "commentary",
           "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
           "<｜tool▁calls▁end｜>", "```json\n", "[", "]", "(", ")", "=", ",", "'"]


@pytest.mark.parametrize("parser", [*PARSERS, "llama3_json+python", "gpt_oss+python"])
def test_hostile_input_never_raises(parser):
    p = get_parser(parser)
    rng = random.Random(1)
    pieces = ["<tool_call>", "</tool_call>", "{", "}", '"name"', ":", "```python\n", "```", "<think>", "</think>",
              "\\boxed{", "<answer>", "\x00", "\ud800", "🙂", "\u202e", "\n", *MARKERS]
    for _ in range(200):
        text = "".join(rng.choice(pieces) if rng.random() < 0.5 else chr(rng.randint(0, 0x10FFFF)) for _ in range(rng.randint(0, 60)))
        p.parse(text)
    big = "".join(rng.choice(pieces) for _ in range(1 << 17))  # about a megabyte
    turn = p.parse(big)
    assert len(turn.calls) <= p.max_calls
    deep = "<tool_call>" + "[" * 100000 + "</tool_call>"
    assert p.parse(deep) is not None
    for marker in MARKERS:
        for deep in (marker + "[" * 100000, marker + "{" * 100000, marker + '{"a": ' * 50000, marker * 20000):
            turn = p.parse(deep, tools=[])
            assert len(turn.calls) <= p.max_calls and len(turn.errors) <= p.max_calls + 2


def test_unknown_parser_name():
    with pytest.raises(ConfigError, match="hermes") as err:
        get_parser("xml")
    msg = str(err.value)
    assert "\n" not in msg and all(name in msg for name in FORMATS) and "llama3_json+python" in msg
    with pytest.raises(ConfigError):
        get_parser("python+hermes")
    with pytest.raises(ConfigError):
        get_parser(None)  # type: ignore[arg-type]


# -- the model formats ---------------------------------------------------------------------------------

SCHEMAS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "ratio": {"type": "number"}, "metric": {"type": "boolean"},
    "where": {"type": "object"}, "tags": {"type": "array"}, "note": {"type": ["string", "null"]}}}}}]
ARGS = {"city": "Zürich \"東京\" 🙂\n\\ ok", "days": 3, "ratio": 0.5, "metric": True,
        "where": {"lat": -1.5, "nested": [1, {"x": None}]}, "tags": ["a", "b"]}


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_each_format_reads_back_the_call_it_writes(fmt):
    p = get_parser(fmt)
    one = p.format_call("get_weather", ARGS)
    turn = p.parse("I will look it up.\n" * (fmt not in ("pythonic", "llama3_json")) + one, turn=4, tools=SCHEMAS)
    assert [(c.name, c.arguments) for c in turn.calls] == [("get_weather", ARGS)], turn.errors
    assert turn.errors == [] and turn.answer is None
    two = p.format_call("get_weather", {"city": "Oslo"}) + ("; " if fmt == "llama3_json" else "\n") + p.format_call(
        "add", {})
    if fmt == "pythonic":  # one list holds every call
        two = "[get_weather(city='Oslo'), add()]"
    turn = p.parse(two, turn=1, tools=SCHEMAS)
    assert [c.name for c in turn.calls] == ["get_weather", "add"] and turn.errors == []
    assert len({c.id for c in turn.calls}) == 2


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_each_format_leaves_plain_answers_alone(fmt):
    p = get_parser(fmt)
    for text in ("The answer is \\boxed{7}.", "So {x | x > 0} holds. Answer: 7", "[1, 2, 3]\nAnswer: 7"):
        turn = p.parse(text)
        assert not turn.has_tool_activity and turn.answer == "7", (fmt, text, turn)


@pytest.mark.parametrize("fmt, text, needle", [
    ("llama3_json", '{"name": "f", "parameters": {"a": }}', "invalid JSON"),
    ("llama3_json", '<|python_tag|>brave_search.call(query="x")', "python_tag"),
    ("llama3_json", '{"name": "f"}', '"parameters"'),
    ("pythonic", "[f(1, 2)]", "by keyword"),
    ("pythonic", "[f(a=open('x'))]", "literal"),
    ("pythonic", "[f(a=1)", "end with ']'"),
    ("pythonic", "[f(a=1, b=)]", "invalid Python"),
    ("mistral", "[TOOL_CALLS]", "without a call"),
    ("mistral", "[TOOL_CALLS]f[ARGS]{bad", "invalid JSON"),
    ("mistral", "[TOOL_CALLS]two words{}", "one word"),
    ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=a>\n1\n", "unterminated"),
    ("qwen3_coder", "<tool_call>\n</tool_call>", "without <function=NAME>"),
    ("gpt_oss", "<|channel|>commentary to=functions.f json<|message|>{bad<|call|>", "invalid JSON"),
    ("gpt_oss", "<|channel|>commentary to=browser.search<|message|>{}<|call|>", "functions.NAME"),
    ("deepseek_v3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{", "unterminated"),
    ("deepseek_v3", "<｜tool▁calls▁begin｜><｜tool▁calls▁end｜>", "without a call"),
])
def test_format_errors_name_the_problem(fmt, text, needle):
    turn = get_parser(fmt).parse(text)
    assert turn.calls == [] and any(needle in e.message for e in turn.errors), [e.message for e in turn.errors]


def test_qwen3_coder_types_text_values_by_the_tool_schema():
    p = get_parser("qwen3_coder")
    text = ("<tool_call>\n<function=get_weather>\n<parameter=city>\n007\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
            "<parameter=ratio>\n2\n</parameter>\n<parameter=metric>\nfalse\n</parameter>\n<parameter=note>\nnull\n"
            "</parameter>\n<parameter=tags>\nnot json\n</parameter>\n<parameter=other>\n5\n</parameter>\n</function>\n</tool_call>")
    args = p.parse(text, tools=SCHEMAS).calls[0].arguments
    # strings stay text (even "007" and "null" where the type allows a string); what does not convert stays text
    assert args == {"city": "007", "days": 3, "ratio": 2, "metric": False, "note": "null", "tags": "not json",
                    "other": "5"}
    assert p.parse(text).calls[0].arguments["days"] == "3"  # no schemas: text as written


def test_gpt_oss_answer_is_the_final_channel_and_analysis_calls_are_read():
    p = get_parser("gpt_oss")
    turn = p.parse("<|channel|>analysis<|message|>Maybe \\boxed{1}?<|end|><|start|>assistant<|channel|>final"
                   "<|message|>It is \\boxed{2}.<|return|>")
    assert turn.calls == [] and turn.answer == "2"
    turn = p.parse("<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant to=functions.get_weather"
                   '<|channel|>commentary <|constrain|>json<|message|>{"city": "Oslo"}<|call|>')
    assert [(c.name, c.arguments) for c in turn.calls] == [("get_weather", {"city": "Oslo"})]


def test_mistral_ids_are_nine_letters_and_digits():
    turn = get_parser("mistral").parse("[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]g[ARGS]{}[TOOL_CALLS]h[ARGS]{bad", turn=12)
    ids = [c.id for c in turn.calls] + [e.id for e in turn.errors]
    assert len(ids) == 3 and len(set(ids)) == 3 and all(len(i) == 9 and i.isalnum() for i in ids)


def test_with_format_swaps_only_the_call_format():
    llama = get_parser("llama3_json")
    assert get_parser("hermes").with_format(llama) is llama
    combined = get_parser("hermes+python").with_format(llama)
    assert combined.name == "llama3_json+python"
    turn = combined.parse('{"name": "f", "parameters": {}}')
    assert [c.name for c in turn.calls] == ["f"]
    assert [c.name for c in combined.parse("```python\nprint(1)\n```").calls] == ["python"]
    for keep in ("python", "none"):
        p = get_parser(keep)
        assert p.with_format(llama) is p


@pytest.mark.parametrize("template, name", [
    ("{{'<|im_start|>'}}<tools>{{ tools }}</tools> <tool_call>{\"name\": ...}</tool_call>", "hermes"),
    ("<tool_call>\n<function={{ name }}>\n<parameter={{ k }}>", "qwen3_coder"),
    ("{%- if tools %}[AVAILABLE_TOOLS]{{ tools }}[/AVAILABLE_TOOLS]{% endif %}[TOOL_CALLS]", "mistral"),
    ("<|start|>assistant<|channel|>commentary to=functions.{{ name }}<|message|>{{ args }}<|call|>", "gpt_oss"),
    ("<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>", "deepseek_v3"),
    ("<|start_header_id|>ipython<|end_header_id|>{{ '<|python_tag|>' }}", "llama3_json"),
    ("<|start_header_id|>ipython<|end_header_id|>", "llama3_json"),
    ("[func_name1(params_name1=params_value1)]<|start_header_id|>ipython", "pythonic"),
    ("{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}", None),
])
def test_detect_parser_from_template(template, name):
    from toolgym.envs.parsing import detect_parser

    assert detect_parser(template) == name
    assert detect_parser({"default": "plain", "tool_use": template}) == name
    assert detect_parser(None, {"tool_calls": {"open": "[TOOL_CALLS]"}}) == "mistral"  # a response template first


def test_llama3_json_with_python_fallback_runs_code_that_holds_json():
    """A dict with a "name" key inside a python block is code, not a broken call: the block runs."""
    p = get_parser("llama3_json+python")
    turn = p.parse('Let me check.\n```python\nprint({"name": "Bob", "age": 3})\n```')
    assert [c.name for c in turn.calls] == ["python"] and turn.errors == []


# -- tool names (round-5 red team x09) ------------------------------------------------------------------

BAD_NAMES = ["\ud800", "x" * 65, "naïve", "\u202e"]  # names every format writes verbatim


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_tool_name_outside_the_safe_set_is_a_malformed_call(fmt):
    """A name a model picks (a lone surrogate, a control character, 65 characters) never becomes a call: it would reach
    the episode's turns, the rollout files and a template that prints tool names after the call."""
    p = get_parser(fmt)
    for name in BAD_NAMES:
        text = p.format_call(name, {"a": 1})
        turn = p.parse(text, tools=SCHEMAS)
        assert turn.calls == [], (fmt, ascii(name), turn)
        assert turn.errors or fmt == "pythonic", (fmt, ascii(name), turn)  # pythonic: not a call at all (text)
        for e in turn.errors:
            e.message.encode("utf-8")  # the feedback itself is text every tokenizer takes
    good = p.parse(p.format_call("get_weather", {"city": "Oslo"}), tools=SCHEMAS)
    assert [c.name for c in good.calls] == ["get_weather"]


def test_hermes_names_the_invalid_tool_name_and_keeps_good_neighbours():
    turn = HermesParser().parse(hermes("\ud800", {}) + hermes("python", {"code": "1"}) + hermes("functions.f", {}))
    assert [c.name for c in turn.calls] == ["python", "functions.f"]
    assert [e.message.split(":")[0] for e in turn.errors] == ["invalid tool name '\\ud800'"]
