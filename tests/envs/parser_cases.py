"""The strings the tool-call parsers are cross-checked on against vLLM's (tests/envs/test_parser_crosscheck.py):
per format, well-formed calls as the family's models write them, then malformed and adversarial text.

A string wrapped in `Differs(text, reason)` is one where toolgym deliberately extracts other calls than
vLLM; WHY says how and why for each reason, and the cross-check asserts that very difference. Every other
string must give equal calls (names and arguments) on both sides."""

from __future__ import annotations

import json

WHY: dict[str, str] = {
    "keeps-good-calls": "vLLM drops every call of a message once one of them is malformed; toolgym runs the "
                        "well-formed calls and returns an error for the broken one, so one typo does not hide "
                        "the rest of the turn",
    "object-arguments": "vLLM passes arguments that are not a JSON object (invalid or cut-off JSON, a list, "
                        "prose) on as they are; toolgym returns a parse error the model reads, since a tool "
                        "takes an object and the model should learn what went wrong",
    "needs-a-name": "vLLM makes a call whose name is empty or a line of prose; toolgym returns an error naming "
                    "the format",
    "cut-off": "vLLM runs a call that stops before its closing marker with {} arguments; toolgym returns an "
               "error instead of running a tool with arguments the model never finished",
    "decodes-strings": "arguments written as a JSON string holding an object are decoded by toolgym (models "
                       "double-encode); vLLM hands the string on",
    "empty-is-none": "an empty argument body is a call without arguments ({}) in toolgym; vLLM passes an "
                     "empty string",
    "reads-variant": "toolgym also reads a variant of the format that this vLLM parser does not: surrounding "
                     "whitespace, Llama 4's <|python_start|> wrapper, dotted names, a \"parameters\" key, "
                     "a call without arguments, pretty-printed or unfenced JSON, DeepSeek V3.1's form",
    "never-raises": "vLLM's parser raises (RecursionError) on deeply nested input; toolgym returns a parse error",
    "no-recovery": "after a cut-off call, vLLM still makes one call with {} arguments from the first "
                   "<function=...>; toolgym reports each cut-off call (up to the per-turn cap) and runs none",
    "own-value": "a <parameter=...> left open before </function> keeps its value in toolgym; vLLM drops the "
                 "parameter",
}


class Differs(str):
    """A case string on which toolgym and vLLM deliberately disagree, for `reason` (a key of WHY)."""

    reason: str

    def __new__(cls, text: str, reason: str) -> Differs:
        if reason not in WHY:
            raise KeyError(reason)
        obj = super().__new__(cls, text)
        obj.reason = reason
        return obj

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                         "metric": {"type": "boolean"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "description": "Add two numbers.", "parameters": {
        "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}},
    {"type": "function", "function": {"name": "python", "description": "Run Python code.", "parameters": {
        "type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search.", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}, "filters": {"type": "object"},
                                         "tags": {"type": "array"}}}}},
]

CODE = 'def f(x):\n    return {"k": [x, "</tool_call>"]}\nprint(f(1))'
UNI = "Zürich 東京 🙂 \u202e"

# Text that is not a call in any format: the answer must come through untouched.
COMMON = [
    "",
    "The answer is 42.",
    "Let me think {about} this carefully.",
    "\\boxed{\\{1, 2\\}}",
    f"答案是 {UNI} \x00",
    '{"answer": 42}',
    "[1, 2, 3]",
    "Use get_weather(city='Paris') to find out.",
]


def _j(x: object) -> str:
    return json.dumps(x, ensure_ascii=False)


def _hermes(name: str, args: object, key: str = "arguments") -> str:
    return f"<tool_call>\n{_j({'name': name, key: args})}\n</tool_call>"


HERMES = COMMON + [
    _hermes("get_weather", {"city": "Paris"}),
    "I'll check.\n" + _hermes("get_weather", {"city": UNI, "days": 3}),
    _hermes("get_weather", {"city": "Paris"}) + "\n" + _hermes("add", {"a": 1, "b": 2.5}),
    _hermes("python", {"code": CODE}),
    _hermes("search", {"query": "q", "filters": {"year": {"gte": 2020}}, "tags": ["a", "b"]}),
    _hermes("add", {}),
    '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>',
    Differs('<tool_call>\n{"name": "add", "arguments": "{\\"a\\": 1}"}\n</tool_call>', "decodes-strings"),
    _hermes("add", {"a": -1e10, "b": 0}),
    _hermes("get_weather", {"city": "a\nb\tc\\d\"e"}),
    "<tool_call>\n" + _j({"name": "get_weather", "arguments": {"city": "x" * 5000}}) + "\n</tool_call>",
    "".join(_hermes("add", {"a": i, "b": i}) for i in range(5)),
    _hermes("add", {"a": 1}) + " and then the answer is \\boxed{3}",
    # malformed and adversarial
    '<tool_call>{"name": "add", "arguments": {"a": </tool_call>',
    "<tool_call></tool_call>",
    "<tool_call>[1, 2]</tool_call>",
    '<tool_call>{"arguments": {"a": 1}}</tool_call>',
    '<tool_call>{"name": "add", "arguments": {"a": 1}',
    '{"name": "add", "arguments": {"a": 1}}</tool_call>',
    '<tool_call><tool_call>{"name": "add", "arguments": {}}</tool_call>',
    Differs("<tool_call>{bad}</tool_call>" + _hermes("add", {"a": 1}), "keeps-good-calls"),
    Differs('<tool_call>{"name": "add", "parameters": {"a": 1}}</tool_call>', "reads-variant"),
    Differs('<tool_call>{"name": "add"}</tool_call>', "reads-variant"),
    '<tool_call>{"name": 7, "arguments": {}}</tool_call>',
    Differs('<tool_call>{"name": "add", "arguments": [1, 2]}</tool_call>', "object-arguments"),
    "<tool_call>" + "[" * 3000 + "</tool_call>",
    Differs('<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>trailing <tool_call>', "keeps-good-calls"),
]

_TAG = "<|python_tag|>"


def _l3(name: str, args: object, key: str = "parameters") -> str:
    return _j({"name": name, key: args})


LLAMA3_JSON = COMMON + [
    _l3("get_weather", {"city": "Paris"}),
    _TAG + _l3("get_weather", {"city": "Paris"}),
    _l3("get_weather", {"city": UNI, "days": 3}),
    _l3("add", {"a": 1, "b": 2}, key="arguments"),
    _l3("add", {"a": 1, "b": 2}) + "; " + _l3("get_weather", {"city": "Oslo"}),
    _TAG + _l3("add", {"a": 1}) + "; " + _l3("add", {"a": 2}),
    _l3("python", {"code": CODE}),
    _l3("search", {"query": "q", "filters": {"nested": {"deep": [1, {"x": None}]}}, "tags": []}),
    "  \n" + _l3("add", {}) + "\n",
    'Sure, calling it: {"name": "add", "parameters": {"a": 1}}',
    _l3("add", {"a": 1}) + "<|eom_id|>",
    _l3("get_weather", {"city": "x" * 5000}),
    Differs('{"name": "add", "parameters": "{\\"a\\": 1}"}', "decodes-strings"),
    # malformed and adversarial
    '{"name": "add", "parameters": {"a": 1}',
    '{"name": "add", "parameters": {"a": }}',
    _TAG + '{"name": "add", "parameters": {"a": 1',
    '{"name": "add"}',
    '{"parameters": {"a": 1}}',
    Differs('{"name": "add", "parameters": [1, 2]}', "object-arguments"),
    _TAG + "brave_search.call(query=\"weather\")",
    _TAG,
    Differs(_l3("add", {"a": 1}) + "; {broken", "keeps-good-calls"),
    Differs(_l3("add", {"a": 1}) + ' {"note": "not a call"}', "keeps-good-calls"),
    '{"name": "add", "parameters": {"a": 1}} trailing text',
    '{"name": 5, "parameters": {}}',
    "{" * 2000,
    '{"a": 1} then ' + _l3("add", {"a": 1}),
]


PYTHONIC = COMMON + [
    "[get_weather(city='Paris')]",
    '[get_weather(city="Paris", days=3), add(a=1, b=2.5)]',
    "[add()]",
    "[search(query='q', filters={'year': {'gte': 2020}}, tags=['a', 'b'])]",
    "[get_weather(city='Zürich 東京 🙂')]",
    "[add(a=-1, b=+2)]",
    "[search(query=None, filters={}, tags=[True, False])]",
    "[search(query='x', filters={'ok': true, 'no': false, 'n': null})]",
    "[search(query='x', tags=(1, 2))]",
    Differs("  [add(a=1, b=2)]  ", "reads-variant"),
    "[python(code='print(1)\\nprint(2)')]",
    "[python(code=" + repr(CODE) + ")]",
    Differs("[tools.add(a=1)]", "reads-variant"),
    "[get_weather(city=f'Paris')]",
    Differs("<|python_start|>[add(a=1, b=2)]<|python_end|>", "reads-variant"),
    # malformed and adversarial
    "[add(a=1, b=2)",
    "[add(a=1, b=)]",
    "[add(1, 2)]",
    "[add(a=x)]",
    "[add(a=1+2)]",
    "[add(a=1)] and some text after",
    "Calling: [add(a=1)]",
    "[add(**{'a': 1})]",
    Differs("[add(a=1), 5]", "keeps-good-calls"),
    "[add(a=__import__('os').system('true'))]",
    "[" * 300 + "]" * 300,
    "[get_weather(city='Paris'), get_weather(city='Oslo', days=2)]",
]


_TC = "[TOOL_CALLS]"


def _mv11(name: str, args: object) -> str:
    return f"{_TC}{name}[ARGS]{_j(args)}"


MISTRAL = COMMON + [
    # before v11: a JSON list after the marker
    _TC + _j([{"name": "get_weather", "arguments": {"city": "Paris"}}]),
    _TC + " " + _j([{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "get_weather", "arguments": {"city": UNI}}]),
    "Let me look.\n" + _TC + _j([{"name": "python", "arguments": {"code": CODE}}]),
    _TC + _j([{"name": "add", "arguments": "{\"a\": 1}"}]),
    _TC + _j({"name": "add", "arguments": {"a": 1}}),
    _TC + _j([{"name": "add", "arguments": {"a": 1}}]) + "</s>",
    _TC + _j([{"name": "search", "arguments": {"query": "q", "filters": {"d": [1, {"e": None}]}}}]),
    # v11 and later: name[ARGS]{...} per call
    _mv11("get_weather", {"city": "Paris"}),
    _mv11("add", {"a": 1, "b": 2}) + _mv11("get_weather", {"city": "Oslo", "days": 2}),
    "I'll check.\n" + _mv11("get_weather", {"city": UNI}),
    _mv11("python", {"code": CODE}),
    _mv11("add", {}),
    _TC + 'get_weather{"city": "Paris"}',
    _mv11("search", {"query": "q", "tags": ["a"]}) + "</s>",
    # malformed and adversarial
    _TC + '[{"name": "add", "arguments": {"a": ',
    Differs(_TC + "get_weather[ARGS]{bad json}", "object-arguments"),
    _TC,
    _TC + "   ",
    _TC + "[1, 2, 3]",
    Differs(_TC + '[{"arguments": {"a": 1}}]', "needs-a-name"),
    Differs(_TC + "just some words", "needs-a-name"),
    Differs(_TC + "get_weather[ARGS]" + '{"city": "Paris"', "object-arguments"),
    "[TOOL_CALLS" + '[{"name": "add", "arguments": {}}]',
    _TC + _TC + _j([{"name": "add", "arguments": {"a": 1}}]),
    Differs(_TC + "[" * 3000, "never-raises"),
    Differs(_TC + '[{"name": "add", "arguments": [1, 2]}]', "object-arguments"),
    "[ARGS]{\"a\": 1}",
]


def _q3c(name: str, params: dict[str, str]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


QWEN3_CODER = COMMON + [
    _q3c("get_weather", {"city": "Paris"}),
    _q3c("get_weather", {"city": "Paris", "days": "3", "metric": "true"}),
    _q3c("add", {"a": "1", "b": "2.5"}),
    "Let me run it.\n" + _q3c("python", {"code": CODE}),
    _q3c("search", {"query": "q", "filters": '{"year": {"gte": 2020}}', "tags": '["a", "b"]'}),
    _q3c("get_weather", {"city": UNI}) + "\n" + _q3c("add", {"a": "1", "b": "2"}),
    _q3c("add", {}),
    "<tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>\n</tool_call>",
    _q3c("get_weather", {"city": "\n\nParis\n\n"}),
    _q3c("python", {"code": "x = '<parameter=y>'\nprint(x)"}),
    "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>",
    _q3c("get_weather", {"city": "x" * 5000}),
    _q3c("add", {"a": "not a number", "b": "2"}),
    _q3c("search", {"query": "q", "filters": "not json"}),
    # malformed and adversarial
    Differs("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n", "cut-off"),
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
    Differs("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>", "own-value"),
    "<tool_call>\n</tool_call>",
    '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>',
    "<tool_call>\n<function=>\n</function>\n</tool_call>",
    "</function></parameter></tool_call>",
    "<tool_call>" * 500,
    Differs("<function=add>" * 200, "no-recovery"),
    _q3c("get_weather", {"city": "Paris"}) + " trailing <tool_call>",
    "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=a>\n2\n</parameter>\n</function>\n</tool_call>",
]


_C, _M, _CALL, _END, _S = "<|channel|>", "<|message|>", "<|call|>", "<|end|>", "<|start|>assistant"


def _oss(name: str, args: object, header: str = "commentary to=functions.{} <|constrain|>json") -> str:
    return f"{_C}{header.format(name)}{_M}{_j(args)}{_CALL}"


GPT_OSS = COMMON + [
    _oss("get_weather", {"city": "Paris"}),
    f"{_C}analysis{_M}I need the weather.{_END}{_S}" + _oss("get_weather", {"city": UNI, "days": 3}),
    _oss("add", {"a": 1, "b": 2.5}, header="commentary to=functions.{} json"),
    f"{_C}analysis{_M}Add them.{_END}{_S} to=functions.add{_C}commentary json{_M}" + _j({"a": 1}) + _CALL,
    _oss("python", {"code": CODE}),
    _oss("search", {"query": "q", "filters": {"x": [1, {"y": None}]}, "tags": ["a"]}),
    _oss("add", {}),
    f"{_C}commentary{_M}Let me check two things.{_END}{_S}" + _oss("add", {"a": 1}),
    f"{_C}final{_M}The answer is 42.<|return|>",
    f"{_C}analysis{_M}thinking only{_END}",
    _oss("get_weather", {"city": "x" * 5000}),
    f"{_C}analysis{_M}call {_j({'name': 'add'})} maybe{_END}{_S}{_C}final{_M}Done.<|return|>",
    _oss("add", {"a": 1}).removesuffix(_CALL),
    # malformed and adversarial
    Differs(f"{_C}commentary to=functions.add <|constrain|>json{_M}" + '{"a": ' + _CALL, "object-arguments"),
    Differs(f"{_C}commentary to=functions.add <|constrain|>json{_M}[1, 2]{_CALL}", "object-arguments"),
    Differs(f"{_C}commentary to=functions.add <|constrain|>json{_M}{_CALL}", "empty-is-none"),
    f"{_C}commentary to=browser.search <|constrain|>json{_M}" + _j({"query": "x"}) + _CALL,
    Differs(f"{_C}commentary to=functions.add <|constrain|>json{_M}not json at all{_CALL}", "object-arguments"),
    f"{_C}{_C}{_M}{_M}{_CALL}",
    _M * 300,
    Differs(f"{_C}commentary to=functions.add <|constrain|>json{_M}" + "[" * 3000 + _CALL, "never-raises"),
    "to=functions.add " + _j({"a": 1}),
    f"{_C}commentary to=functions.add json{_M}" + _j({"a": 1}) + _END,
]

_CB, _CE, _B, _E, _SEP = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def _ds(name: str, args: object) -> str:
    return f"{_B}function{_SEP}{name}\n```json\n{_j(args)}\n```{_E}"


def _dsm(*calls: str) -> str:
    return _CB + "\n".join(calls) + _CE


DEEPSEEK_V3 = COMMON + [
    _dsm(_ds("get_weather", {"city": "Paris"})),
    _dsm(_ds("get_weather", {"city": UNI, "days": 3})),
    _dsm(_ds("add", {"a": 1, "b": 2}), _ds("get_weather", {"city": "Oslo"})),
    "Let me check.\n" + _dsm(_ds("add", {"a": 1})),
    _dsm(_ds("python", {"code": CODE})),
    _dsm(_ds("search", {"query": "q", "filters": {"x": [1, {"y": None}]}})),
    _dsm(_ds("add", {})),
    _dsm(_ds("add", {"a": 1})) + "<｜end▁of▁sentence｜>",
    _dsm(_ds("get_weather", {"city": "x" * 5000})),
    _CB + _ds("add", {"a": 1}),
    _dsm(_ds("add", {"a": 1}), _ds("add", {"a": 2}), _ds("add", {"a": 3})),
    # malformed and adversarial
    Differs(_dsm(f"{_B}function{_SEP}add\n```json\n" + '{"a": 1,\n "b": 2}' + f"\n```{_E}"), "reads-variant"),
    Differs(_dsm(f"{_B}function{_SEP}add\n```json\n{{bad}}\n```{_E}"), "object-arguments"),
    Differs(_dsm(f"{_B}function{_SEP}add\n```json\n[1, 2]\n```{_E}"), "object-arguments"),
    _dsm(f"{_B}function{_SEP}add\n```json\n" + '{"a": 1}'),
    _dsm(f"{_B}add\n```json\n" + '{"a": 1}' + f"\n```{_E}"),
    _CB + _CE,
    _CB,
    Differs(_dsm(f"{_B}function{_SEP}\n```json\n{{}}\n```{_E}"), "needs-a-name"),
    _B + f"function{_SEP}add\n```json\n" + '{"a": 1}' + f"\n```{_E}",
    Differs(_dsm(f"{_B}function{_SEP}add\n" + '{"a": 1}' + _E), "reads-variant"),
    Differs(_dsm(f"{_B}function{_SEP}add\n```json\n" + "[" * 3000 + f"\n```{_E}"), "object-arguments"),
    _CB * 300,
    _dsm(f"{_B}function{_SEP}add\n```json\n" + '{"a": "```"}' + f"\n```{_E}"),
    Differs(_dsm(f"{_B}add{_SEP}" + '{"a": 1}' + _E), "reads-variant"),
    Differs(_dsm(f"{_B}function{_SEP}add\n```json\n" + '{"a": 1} extra' + f"\n```{_E}"), "object-arguments"),
]

CASES: dict[str, list[str]] = {
    "hermes": HERMES,
    "llama3_json": LLAMA3_JSON,
    "pythonic": PYTHONIC,
    "mistral": MISTRAL,
    "qwen3_coder": QWEN3_CODER,
    "gpt_oss": GPT_OSS,
    "deepseek_v3": DEEPSEEK_V3,
}
