"""Runs under .venv-vllm's Python (see tests/envs/test_parser_crosscheck.py): feeds strings to vLLM's
own tool parsers and prints the calls they extract as JSON.

Input (a JSON file named on the command line): {"cases": {format: [text, ...]}, "tools": [...],
"qwen3_tokenizer": path}. Output on stdout: {format: [[[name, arguments], ...] or {"error": ...}, ...]},
arguments as vLLM returns them (a JSON string).

Tokenizers, per format (vLLM's parsers need one to look up their marker tokens):
  hermes, qwen3_coder   the real Qwen3 tokenizer (toolgym's qwen3-tokenizer asset)
  mistral               the real Mistral tekken tokenizer shipped inside mistral_common (pre-v11: the
                        [TOOL_CALLS][...] list) and, for the v11 `name[ARGS]{...}` form, a vocabulary-only
                        stand-in holding [TOOL_CALLS] and [ARGS] (no v11 tokenizer ships here; vLLM only
                        looks the markers up in get_vocab())
  gpt_oss               the real harmony encoding (openai_harmony, the gpt-oss tokenizer): the strings are
                        encoded to ids, since vLLM's HarmonyParser reads ids
  llama3_json, pythonic, deepseek_v3
                        a vocabulary-only stand-in with the format's marker tokens (no Llama or DeepSeek
                        tokenizer ships here; these parsers only call get_vocab())
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class VocabOnly:
    """A stand-in tokenizer: just the marker tokens a parser looks up."""

    def __init__(self, tokens: list[str]) -> None:
        self._vocab = {t: i for i, t in enumerate(tokens)}

    def get_vocab(self) -> dict[str, int]:
        return dict(self._vocab)

    def __len__(self) -> int:
        return len(self._vocab)


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    logging.disable(logging.CRITICAL)
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers import ToolParserManager

    logging.disable(logging.CRITICAL)  # vLLM logs every malformed call it meets; the results are what count
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=spec["tools"])
    qwen3 = AutoTokenizer.from_pretrained(spec["qwen3_tokenizer"])

    def tool_parser(name: str, tokenizer: object):
        cls = ToolParserManager.get_tool_parser(name)
        return lambda text: cls(tokenizer, request.tools).extract_tool_calls(text, request)

    parsers = {
        "hermes": tool_parser("hermes", qwen3),
        "qwen3_coder": tool_parser("qwen3_coder", qwen3),
        "llama3_json": tool_parser("llama3_json", VocabOnly(["<|python_tag|>", "<|eot_id|>", "<|eom_id|>"])),
        "pythonic": tool_parser("pythonic", VocabOnly(["<|python_tag|>"])),
        "deepseek_v3": tool_parser("deepseek_v3", VocabOnly(
            ["<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
             "<｜tool▁sep｜>"])),
    }
    mistral_v3 = tool_parser("mistral", _mistral_tokenizer())
    mistral_v11 = tool_parser("mistral", VocabOnly(["[TOOL_CALLS]", "[ARGS]", "</s>"]))
    # one parser for both generations in toolgym; in vLLM the tokenizer decides, so each string goes to the
    # tokenizer of the generation whose form it is written in
    parsers["mistral"] = lambda text: (mistral_v11 if _v11_form(text) else mistral_v3)(text)
    parsers["gpt_oss"] = _harmony(request)

    out: dict[str, list] = {}
    for fmt, texts in spec["cases"].items():
        results = []
        for text in texts:
            try:
                info = parsers[fmt](text)
                calls = info if isinstance(info, list) else (
                    [[c.function.name, c.function.arguments] for c in info.tool_calls] if info.tools_called else [])
                results.append(calls)
            except Exception as exc:  # recorded: a parser that raises differs from one that returns
                results.append({"error": f"{type(exc).__name__}: {exc}"[:300]})
        out[fmt] = results
    print(json.dumps(out))


def _v11_form(text: str) -> bool:
    """`[TOOL_CALLS]name...` (v11) rather than `[TOOL_CALLS][...]` / `[TOOL_CALLS] {...}` (pre-v11)."""
    at = text.find("[TOOL_CALLS]")
    rest = text[at + len("[TOOL_CALLS]") :].replace("[TOOL_CALLS]", "").lstrip() if at != -1 else ""
    return bool(rest) and rest[0] not in "[{"


def _mistral_tokenizer():
    import mistral_common
    from vllm.tokenizers.mistral import MistralTokenizer

    folder = tempfile.mkdtemp()
    shutil.copy(Path(mistral_common.__file__).parent / "data" / "tekken_240911.json", Path(folder) / "tekken.json")
    return MistralTokenizer.from_pretrained(folder)


def _harmony(request):
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding
    from vllm.parser.parser_manager import ParserManager

    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    cls = ParserManager.get_parser(tool_parser_name="openai", reasoning_parser_name="openai_gptoss",
                                   enable_auto_tools=True, is_harmony=True)
    class HarmonyTokenizer(VocabOnly):
        """The harmony encoding behind the tokenizer interface HarmonyParser uses (decode)."""

        def decode(self, ids: list[int], **_: object) -> str:
            return enc.decode(list(ids))

    tokenizer = HarmonyTokenizer([])

    def parse(text: str) -> list:
        ids = enc.encode(text, allowed_special="all")
        _, _, calls = cls(tokenizer, request.tools).parse(text, request, enable_auto_tools=True,
                                                          model_output_token_ids=ids)
        return [[c.name, c.arguments] for c in calls or []]

    return parse


if __name__ == "__main__":
    main()
