"""The Task record every task source yields."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Task:
    """One problem: prompt messages, hidden ground truth, and metadata (source, split, difficulty)."""

    id: str
    prompt: list[dict[str, Any]]
    ground_truth: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        missing = [k for k in ("id", "prompt") if k not in data]
        if missing:
            raise ValueError(f"task is missing field(s): {', '.join(missing)}")
        return cls(
            id=str(data["id"]),
            prompt=list(data["prompt"]),
            ground_truth=data.get("ground_truth"),
            metadata=dict(data.get("metadata") or {}),
        )
