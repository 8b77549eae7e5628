"""A tiny model taught (in seconds) one tool-calling conversation: call the tool, then answer from its result.
The proxy tests use it as a real policy that writes tool calls, trained on exactly the ids the proxy builds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolgym.agents.chat import ChatTemplate
from toolgym.agents.hf_sampler import HFSampler


def train_tool_caller(tiny_dir: Path, out: Path, *, question: str, tool: dict[str, Any], call: str,
                      tool_name: str, result: str = "5", answer: str = "The answer is 5.") -> HFSampler:
    """A Qwen2 of two layers that writes ``call``, reads the tool's ``result`` and says ``answer``."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    tpl = ChatTemplate(tok)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    turn1 = tpl.encode(call) + [im_end]
    turn2 = tpl.encode(answer) + [im_end]
    reply = [{"role": "tool", "tool_call_id": "call_0_0", "name": tool_name, "content": result}]
    prompt = tpl.prompt_ids([{"role": "user", "content": question}], [tool])
    cont = tpl.continuation_ids(turn1, reply)
    ids = torch.tensor([prompt + turn1 + cont + turn2])
    labels = torch.tensor([[-100] * len(prompt) + turn1 + [-100] * len(cont) + turn2])  # the model's turns only
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=1024, tie_word_embeddings=True,
                                         eos_token_id=im_end, pad_token_id=tok.pad_token_id))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small trains ten times faster on one thread of a shared machine
    try:
        for _ in range(300):
            loss = model(ids, labels=labels).loss
            if loss.item() < 0.005:
                break
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return HFSampler(str(out))
