"""Published numbers to print beside a run's own, so a reader sees at once how far a score is from the
figure the model's authors reported, and under which protocol that figure was measured.

A reference is looked up by the model's name (asset name, folder name or the last part of a Hub id,
case-insensitive) and the suite entry. Only numbers with a citable source belong here; each says how
its protocol differs from toolgym's, because a prompt format or a test set variant moves pass@1 by
several points.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import PurePath
from typing import Any

QWEN_CODER_REPORT = ("Qwen2.5-Coder Technical Report (Hui et al., arXiv:2409.12186), "
                     "code-generation table of the instruct models")


@dataclass(frozen=True)
class Reference:
    """A published score in percent, with where it comes from and how it was measured."""

    value: float
    metric: str
    source: str
    protocol: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_EVALPLUS_HE = "EvalPlus HumanEval prompt (base tests), greedy, the authors' bf16 weights"
_EVALPLUS_MBPP = "EvalPlus MBPP (base tests of its 378 sanitized tasks), greedy, the authors' bf16 weights"

PUBLISHED: dict[str, dict[str, Reference]] = {
    "qwen2.5-coder-0.5b-instruct": {
        "humaneval": Reference(61.6, "pass@1", QWEN_CODER_REPORT, _EVALPLUS_HE),
        "mbpp": Reference(52.4, "pass@1", QWEN_CODER_REPORT, _EVALPLUS_MBPP),
    },
    "qwen2.5-coder-1.5b-instruct": {
        "humaneval": Reference(70.7, "pass@1", QWEN_CODER_REPORT, _EVALPLUS_HE),
        "mbpp": Reference(69.2, "pass@1", QWEN_CODER_REPORT, _EVALPLUS_MBPP),
    },
}


def model_key(model: str) -> str:
    """``Qwen/Qwen2.5-Coder-0.5B-Instruct``, ``~/.cache/toolgym/qwen2.5-coder-0.5b-instruct/`` and the asset
    name all give ``qwen2.5-coder-0.5b-instruct``."""
    return PurePath(str(model).rstrip("/\\")).name.lower()


def reference_for(model: str, entry: str, metric: str) -> Reference | None:
    """The published figure for this model and entry, only when it is for the same metric."""
    ref = PUBLISHED.get(model_key(model), {}).get(entry)
    return ref if ref is not None and ref.metric == metric else None
