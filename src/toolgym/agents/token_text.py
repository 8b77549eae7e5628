"""Token pieces beside a rollout file: `<file>.tokens.json` maps each token id its episodes contain to the
text that id decodes to on its own.

Why: a trajectory stores token ids, not text per token, and the viewer colours tokens (behaviour
log-prob, advantage, clipping) without a tokenizer, transformers or torch. Only the ids a file uses are
written, once per file: a few KB where the episodes take MBs. A piece that is part of a multi-byte
character decodes to U+FFFD on its own; the turns' text is unaffected.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from toolgym.errors import ToolgymError

TOKENS_SUFFIX = ".tokens.json"
KIND = "toolgym.token_text"


def token_text_path(path: str | os.PathLike) -> Path:
    """The pieces sidecar of a rollout file: `<file>.tokens.json` beside it."""
    return Path(os.fspath(path) + TOKENS_SUFFIX)


def piece_table(tokenizer: Any, ids: Iterable[int]) -> dict[int, str]:
    """Each distinct id decoded alone, special tokens kept (a Hugging Face tokenizer's `batch_decode`)."""
    uniq = sorted({int(i) for i in ids})
    texts = tokenizer.batch_decode([[i] for i in uniq], skip_special_tokens=False,
                                   clean_up_tokenization_spaces=False)
    return dict(zip(uniq, texts, strict=True))


def write_token_text(path: str | os.PathLike, pieces: dict[int, str], tokenizer: str = "") -> Path:
    """Write the sidecar of rollout file `path` atomically; returns its path."""
    side = token_text_path(path)
    tmp = side.with_name(side.name + ".tmp")
    doc = {"kind": KIND, "tokenizer": tokenizer, "pieces": {str(k): v for k, v in sorted(pieces.items())}}
    tmp.write_text(json.dumps(doc, ensure_ascii=True) + "\n", encoding="utf-8")
    os.replace(tmp, side)
    return side


def read_token_text(path: str | os.PathLike) -> dict[int, str] | None:
    """The pieces of rollout file `path`, or None when it has no sidecar."""
    side = token_text_path(path)
    if not side.exists():
        return None
    try:
        doc = json.loads(side.read_text(encoding="utf-8"))
        if doc.get("kind") != KIND:
            raise ValueError(f"kind must be {KIND!r}")
        return {int(k): str(v) for k, v in doc["pieces"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ToolgymError(f"{side}: not a token-pieces sidecar ({exc}); delete it to view the file "
                           "without per-token colours") from exc
