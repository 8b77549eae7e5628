"""Tool-call parsing: turn one assistant message into tool calls, parse errors and a final answer.

One module per format, each a small `ToolCallParser`; `get_parser(NAME)` returns one by name:

  hermes       <tool_call>{"name": ..., "arguments": {...}}</tool_call>        Hermes 2 Pro, Qwen2.5, Qwen3
  llama3_json  {"name": ..., "parameters": {...}}, optionally after <|python_tag|>   Llama 3.x
  pythonic     [name(arg=value), ...]                                          Llama 3.2/4, Olmo
  mistral      [TOOL_CALLS][{...}] or [TOOL_CALLS]name[ARGS]{...}              Mistral, Magistral, Devstral
  qwen3_coder  <tool_call><function=NAME><parameter=K>V</parameter>...          Qwen3-Coder
  gpt_oss      <|channel|>commentary to=functions.NAME ... <|message|>{...}    gpt-oss (harmony)
  deepseek_v3  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME ```json ...   DeepSeek V3/R1
  python       fenced ```python blocks as calls to the python tool (tool-integrated reasoning)
  X+python     format X first, fenced python blocks when the message has no call in X
  none         no tools: only the final answer

Other packages add parsers through the entry-point group ``toolgym.parsers`` (a `ToolCallParser` subclass,
registered under the entry point's name, or a hook that calls ``PARSERS.add``), and `get_parser` (an
environment's ``parser=``) takes an installed one as ``package.module:Class``. The model formats (`FORMATS`,
what ``--tool-parser`` takes) are the built-in ones.

The format is the model's: `detect_parser` reads it from the chat template, and an environment's
parser takes the model's format through `ToolCallParser.with_format` (the rollout runner does this).
Nothing a model writes raises: malformed calls come back as `ParseError`s for the model to read.
"""

from __future__ import annotations

from toolgym._registry import Registry
from toolgym.envs.parsing.base import (
    MAX_CALLS_PER_TURN,
    NoToolParser,
    ParsedTurn,
    ParseError,
    ToolCall,
    ToolCallParser,
    coerce_arguments,
    strip_thinking,
)
from toolgym.envs.parsing.deepseek_v3 import DeepSeekV3Parser
from toolgym.envs.parsing.detect import detect_parser
from toolgym.envs.parsing.gpt_oss import GptOssParser
from toolgym.envs.parsing.hermes import HermesParser
from toolgym.envs.parsing.llama3_json import Llama3JsonParser
from toolgym.envs.parsing.mistral import MistralParser
from toolgym.envs.parsing.python_blocks import CombinedParser, PythonBlockParser
from toolgym.envs.parsing.pythonic import PythonicParser
from toolgym.envs.parsing.qwen3_coder import Qwen3CoderParser

#: The model formats, by the names `--tool-parser` and `rollout.tool_parser` take.
FORMATS: dict[str, type[ToolCallParser]] = {
    "hermes": HermesParser,
    "llama3_json": Llama3JsonParser,
    "pythonic": PythonicParser,
    "mistral": MistralParser,
    "qwen3_coder": Qwen3CoderParser,
    "gpt_oss": GptOssParser,
    "deepseek_v3": DeepSeekV3Parser,
}

PARSERS: Registry[type[ToolCallParser]] = Registry(
    "tool-call parser", "toolgym.parsers",
    accepts=lambda obj: isinstance(obj, type) and issubclass(obj, ToolCallParser))
for _name, _cls in {"none": NoToolParser, **FORMATS, "python": PythonBlockParser,
                    "hermes+python": CombinedParser}.items():
    PARSERS.add(_name, _cls)


def parser_names() -> list[str]:
    """Every name get_parser accepts (each format also combines with fenced python blocks: "X+python")."""
    return [*PARSERS, *(f"{n}+python" for n in FORMATS if n != "hermes")]


def get_parser(parser: str | ToolCallParser) -> ToolCallParser:
    """A parser instance from a name (see `parser_names()`) or an instance."""
    if isinstance(parser, ToolCallParser):
        return parser
    if isinstance(parser, str):
        base, plus, extra = parser.partition("+")
        if plus and extra == "python" and base in FORMATS:
            return CombinedParser(primary=FORMATS[base]())
    return PARSERS.find(parser, known=parser_names())()


def get_format(parser: str | ToolCallParser) -> ToolCallParser:
    """A model's tool-call format by name (one of FORMATS), as `--tool-parser` and `rollout.tool_parser` take it."""
    if isinstance(parser, ToolCallParser) and parser.is_format:
        return parser
    if isinstance(parser, str) and parser in FORMATS:
        return FORMATS[parser]()
    from toolgym.errors import ConfigError, unknown

    raise ConfigError(unknown("tool-call format", parser, FORMATS))


__all__ = [
    "FORMATS",
    "MAX_CALLS_PER_TURN",
    "PARSERS",
    "CombinedParser",
    "DeepSeekV3Parser",
    "GptOssParser",
    "HermesParser",
    "Llama3JsonParser",
    "MistralParser",
    "NoToolParser",
    "ParseError",
    "ParsedTurn",
    "PythonBlockParser",
    "PythonicParser",
    "Qwen3CoderParser",
    "ToolCall",
    "ToolCallParser",
    "coerce_arguments",
    "detect_parser",
    "get_format",
    "get_parser",
    "parser_names",
    "strip_thinking",
]
