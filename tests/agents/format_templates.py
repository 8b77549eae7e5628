"""Stand-in chat templates, one per tool-call format, for the formats whose real tokenizer is not among
the assets here (only Qwen's are: Qwen3 and Qwen2.5-Coder write Hermes tags, and the tests use those real
templates for `hermes`). Each mimics how its family's official template renders tools, a tool-calling
assistant turn and the tool results (Llama 3.1's one call per turn and `ipython` role, Mistral's 9-character
call ids and [TOOL_RESULTS], gpt-oss naming the function a result comes from, DeepSeek's tool-output blocks
and its generation prompt after them), with a small BPE tokenizer trained on the fly that holds the format's
markers as special tokens."""

from __future__ import annotations

from typing import Any

_LLAMA_HEAD = (
    "{{- bos_token }}"
    "{%- if messages[0].role == 'system' %}{%- set sys = messages[0].content %}{%- set msgs = messages[1:] %}"
    "{%- else %}{%- set sys = '' %}{%- set msgs = messages %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + sys }}"
)
_LLAMA_TAIL = (
    "{%- elif m.role == 'tool' %}{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + m.content + '<|eot_id|>' }}"
    "{%- else %}{{- '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' + m.content + '<|eot_id|>' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

LLAMA3_JSON = (
    _LLAMA_HEAD
    + "{%- if tools %}{{- '\\nTo call a function, reply with {\"name\": function name, \"parameters\": dictionary of "
    "argument name and its value}. Functions:\\n' }}{%- for t in tools %}{{- t | tojson + '\\n' }}{%- endfor %}"
    "{%- endif %}{{- '<|eot_id|>' }}"
    "{%- for m in msgs %}"
    "{%- if m.role == 'assistant' and m.tool_calls %}"
    "{%- if m.tool_calls | length != 1 %}{{- raise_exception('This model only supports single tool-calls at once!') }}"
    "{%- endif %}{%- set f = m.tool_calls[0].function %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n{\"name\": \"' + f.name + '\", \"parameters\": ' "
    "+ f.arguments | tojson + '}<|eot_id|>' }}"
    + _LLAMA_TAIL
)

PYTHONIC = (
    _LLAMA_HEAD
    + "{%- if tools %}{{- '\\nTo call functions reply with [func_name1(params_name1=params_value1, "
    "params_name2=params_value2...), func_name2(params)]. Functions:\\n' }}{%- for t in tools %}"
    "{{- t | tojson + '\\n' }}{%- endfor %}{%- endif %}{{- '<|eot_id|>' }}"
    "{%- for m in msgs %}"
    "{%- if m.role == 'assistant' and m.tool_calls %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n[' }}"
    "{%- for tc in m.tool_calls %}{{- tc.function.name + '(' }}"
    "{%- for k, v in tc.function.arguments.items() %}{{- k + '=' + v | tojson }}{%- if not loop.last %}{{- ', ' }}"
    "{%- endif %}{%- endfor %}{{- ')' }}{%- if not loop.last %}{{- ', ' }}{%- endif %}{%- endfor %}"
    "{{- ']<|eot_id|>' }}"
    + _LLAMA_TAIL
)

MISTRAL = (
    "{{- bos_token }}"
    "{%- if tools %}{{- '[AVAILABLE_TOOLS]' + tools | tojson + '[/AVAILABLE_TOOLS]' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'system' %}{{- '[SYSTEM_PROMPT]' + m.content + '[/SYSTEM_PROMPT]' }}"
    "{%- elif m.role == 'user' %}{{- '[INST]' + m.content + '[/INST]' }}"
    "{%- elif m.role == 'assistant' %}{{- m.content }}"
    "{%- for tc in (m.tool_calls or []) %}"
    "{%- if tc.id | length != 9 %}{{- raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}"
    "{%- endif %}{{- '[TOOL_CALLS]' + tc.function.name + '[ARGS]' + tc.function.arguments | tojson }}{%- endfor %}"
    "{{- eos_token }}"
    "{%- elif m.role == 'tool' %}"
    "{%- if (m.tool_call_id or '') | length != 9 %}{{- raise_exception('Tool call IDs should be alphanumeric strings "
    "with length 9!') }}{%- endif %}{{- '[TOOL_RESULTS]' + m.content + '[/TOOL_RESULTS]' }}"
    "{%- endif %}{%- endfor %}"
)

QWEN3_CODER = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0].role == 'system' %}"
    "{{- messages[0].content + '\\n\\n' }}{%- endif %}{{- '# Tools\\n<tools>' }}{%- for t in tools %}"
    "{{- '\\n' + t | tojson }}{%- endfor %}{{- '\\n</tools>\\nCall one as <tool_call>\\n<function=NAME>\\n"
    "<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' %}{{- '<|im_start|>user\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + m.content }}"
    "{%- for tc in (m.tool_calls or []) %}{{- '\\n<tool_call>\\n<function=' + tc.function.name + '>\\n' }}"
    "{%- for k, v in tc.function.arguments.items() %}{{- '<parameter=' + k + '>\\n' }}"
    "{%- if v is string %}{{- v }}{%- else %}{{- v | tojson }}{%- endif %}{{- '\\n</parameter>\\n' }}{%- endfor %}"
    "{{- '</function>\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}{%- if loop.first or loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}"
    "{%- endif %}{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

GPT_OSS = (
    "{{- '<|start|>system<|message|>You are a helpful assistant.<|end|>' }}"
    "{%- if tools %}{{- '<|start|>developer<|message|># Tools\\n\\nnamespace functions {\\n' }}"
    "{%- for t in tools %}{{- '// ' + t.function.description + '\\ntype ' + t.function.name + ' = (_: ' "
    "+ t.function.parameters | tojson + ') => any;\\n' }}{%- endfor %}{{- '} // namespace functions<|end|>' }}"
    "{%- endif %}"
    "{%- set ns = namespace(last=none) %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'system' %}{{- '<|start|>developer<|message|>' + m.content + '<|end|>' }}"
    "{%- elif m.role == 'user' %}{{- '<|start|>user<|message|>' + m.content + '<|end|>' }}"
    "{%- elif m.role == 'assistant' and m.tool_calls %}"
    "{%- if m.content %}{{- '<|start|>assistant<|channel|>analysis<|message|>' + m.content + '<|end|>' }}{%- endif %}"
    "{%- for tc in m.tool_calls %}{{- '<|start|>assistant to=functions.' + tc.function.name "
    "+ '<|channel|>commentary json<|message|>' + tc.function.arguments | tojson + '<|call|>' }}"
    "{%- set ns.last = tc.function.name %}{%- endfor %}"
    "{%- elif m.role == 'assistant' %}{{- '<|start|>assistant<|channel|>final<|message|>' + m.content + '<|end|>' }}"
    "{%- elif m.role == 'tool' %}"
    "{%- if ns.last is none %}{{- raise_exception('Message has tool role, but there was no previous assistant "
    "message with a tool call!') }}{%- endif %}"
    "{{- '<|start|>functions.' + ns.last + ' to=assistant<|channel|>commentary<|message|>' + m.content + '<|end|>' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start|>assistant' }}{%- endif %}"
)

DEEPSEEK_V3 = (
    "{{- bos_token }}{%- if messages[0].role == 'system' %}{{- messages[0].content }}{%- endif %}"
    "{%- if tools %}{{- '\\n\\n## Tools\\n' }}{%- for t in tools %}{{- t | tojson + '\\n' }}{%- endfor %}"
    "{{- 'Call as <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\nARGS\\n```"
    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>' }}{%- endif %}"
    "{%- set ns = namespace(tool=false) %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' %}{{- '<｜User｜>' + m.content }}{%- set ns.tool = false %}"
    "{%- elif m.role == 'assistant' %}"
    "{%- if ns.tool %}{{- '<｜tool▁outputs▁end｜>' }}{%- else %}{{- '<｜Assistant｜>' }}{%- endif %}"
    "{%- set ns.tool = false %}{{- m.content }}"
    "{%- if m.tool_calls %}{{- '<｜tool▁calls▁begin｜>' }}{%- for tc in m.tool_calls %}"
    "{{- '<｜tool▁call▁begin｜>function<｜tool▁sep｜>' + tc.function.name + '\\n```json\\n' "
    "+ tc.function.arguments | tojson + '\\n```<｜tool▁call▁end｜>' }}{%- endfor %}{{- '<｜tool▁calls▁end｜>' }}"
    "{%- endif %}{{- '<｜end▁of▁sentence｜>' }}"
    "{%- elif m.role == 'tool' %}{%- if not ns.tool %}{{- '<｜tool▁outputs▁begin｜>' }}{%- endif %}"
    "{{- '<｜tool▁output▁begin｜>' + m.content + '<｜tool▁output▁end｜>' }}{%- set ns.tool = true %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{%- if ns.tool %}{{- '<｜tool▁outputs▁end｜>' }}{%- else %}"
    "{{- '<｜Assistant｜>' }}{%- endif %}{%- endif %}"
)

_LLAMA_TOKENS = ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|python_tag|>",
                 "<|python_start|>", "<|python_end|>", "<|finetune_right_pad_id|>"]

#: format -> (template, special tokens, bos, eos, pad)
STAND_INS: dict[str, tuple[str, list[str], str | None, str, str]] = {
    "llama3_json": (LLAMA3_JSON, _LLAMA_TOKENS, "<|begin_of_text|>", "<|eot_id|>", "<|finetune_right_pad_id|>"),
    "pythonic": (PYTHONIC, _LLAMA_TOKENS, "<|begin_of_text|>", "<|eot_id|>", "<|finetune_right_pad_id|>"),
    "mistral": (MISTRAL, ["<s>", "</s>", "<pad>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                          "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]", "[TOOL_RESULTS]",
                          "[/TOOL_RESULTS]"], "<s>", "</s>", "<pad>"),
    "qwen3_coder": (QWEN3_CODER, ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"],
                    None, "<|im_end|>", "<|endoftext|>"),
    "gpt_oss": (GPT_OSS, ["<|startoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                          "<|call|>", "<|return|>", "<|endoftext|>"], None, "<|return|>", "<|endoftext|>"),
    "deepseek_v3": (DEEPSEEK_V3, ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                                  "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                                  "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>",
                                  "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>",
                                  "<｜▁pad▁｜>"], "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"),
}

_CORPUS = [
    "What is 1 + 2? Use the add tool. The answer is \\boxed{3}. Add two numbers.",
    '{"name": "add", "parameters": {"a": 1, "b": 2}} [add(a=1, b=2)] <function=add> <parameter=a> </parameter>',
    "system user assistant ipython developer commentary analysis final functions to=assistant json ```json",
    "You add numbers carefully. Let me add them. 0123456789 + - * / = ( ) { } [ ] : , \" ' \n",
] * 20


def stand_in_tokenizer(fmt: str) -> Any:
    """A byte-level BPE tokenizer trained on the fly, with the format's markers as special tokens and its
    stand-in chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    template, specials, bos, eos, pad = STAND_INS[fmt]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos, pad_token=pad)
    fast.chat_template = template
    return fast
