"""The Trajectory record: what a rollout produced and what the trainer consumes.

Token ids are the exact sampled ids (token-in/token-out); the trainer never re-tokenizes text.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA_VERSION = 1


@dataclass
class Trajectory:
    """One episode. response_ids interleave model and tool/template tokens; loss_mask marks model tokens."""

    task_id: str
    group_id: str
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)  # 1 = sampled by the model, 0 = prompt/tool/template
    behavior_logprobs: list[float] = field(default_factory=list)  # per response token, 0.0 where mask == 0
    reward: float = 0.0
    reward_breakdown: dict[str, float] = field(default_factory=dict)
    turns: list[dict[str, Any]] = field(default_factory=list)  # text view: messages incl. tool calls
    finish_reason: str = ""  # "answer", "max_turns", "max_tokens", "time_limit", "timeout", "error", ...
    error: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    #: per response token, the policy (weights) version of the sampler call that produced it; tool and template
    #: tokens take their turn's. Empty: not recorded (a sampler without a ``policy_version``, older records).
    #: The staleness of a trajectory is measured from its oldest token.
    token_versions: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.response_ids)
        if len(self.loss_mask) != n or len(self.behavior_logprobs) != n:
            raise ValueError(
                f"trajectory {self.task_id}/{self.group_id}: response_ids ({n}), loss_mask "
                f"({len(self.loss_mask)}) and behavior_logprobs ({len(self.behavior_logprobs)}) must align"
            )
        if self.token_versions and len(self.token_versions) != n:
            raise ValueError(f"trajectory {self.task_id}/{self.group_id}: token_versions "
                             f"({len(self.token_versions)}) must be empty or align with response_ids ({n})")

    @property
    def num_model_tokens(self) -> int:
        return sum(self.loss_mask)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["schema_version"] = SCHEMA_VERSION
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        data = dict(data)
        version = data.pop("schema_version", SCHEMA_VERSION)
        if version > SCHEMA_VERSION:
            raise ValueError(f"trajectory schema version {version} is newer than this toolgym ({SCHEMA_VERSION})")
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)
