"""The Sampler interface: token ids in, token ids + behaviour log-probs out.

Every backend (transformers, in-process vLLM, an OpenAI-compatible server) speaks token ids only, so
the trainer trains on exactly the sampled tokens. Text never round-trips through a tokenizer here.
"""

from __future__ import annotations

import abc
import asyncio
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from toolgym.errors import ToolgymError


class SamplerError(ToolgymError):
    """A sampler backend failed (server down, bad response, engine crash). Recorded on the trajectory."""


class ContextOverflow(SamplerError):
    """The prompt does not fit the model's context window."""


@dataclass(frozen=True)
class SamplingParams:
    """What to sample. top_k <= 0 and top_p >= 1 mean "no truncation"."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None
    #: the group a request belongs to (its episodes share a prompt): a router in front of several servers
    #: keeps a group on one server, for its prefix cache. Not a sampling setting (left out of ``to_dict``).
    affinity: str | None = None

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError("SamplingParams.n must be >= 1")
        if self.temperature < 0:
            raise ValueError("SamplingParams.temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("SamplingParams.top_p must be in (0, 1]")
        if self.max_tokens < 1:
            raise ValueError("SamplingParams.max_tokens must be >= 1")
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))

    @property
    def truncated(self) -> bool:
        """True when top-k/top-p cut the distribution, so behaviour log-probs are of a renormalized one."""
        return self.top_k > 0 or self.top_p < 1.0

    def logprob_kind(self) -> str:
        """Which distribution the behaviour log-probs belong to (recorded on each trajectory).

        "model": the model's own softmax (temperature 1, no truncation) - the trainer can use them as-is.
        "processed": temperature-scaled and/or top-k/top-p renormalized - the trainer should recompute.
        "greedy": temperature 0; log-probs are of the model's softmax but the sampling was deterministic.
        """
        if self.temperature == 0:
            return "greedy"
        if self.truncated or abs(self.temperature - 1.0) > 1e-9:
            return "processed"
        return "model"

    def with_(self, **changes: Any) -> SamplingParams:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stop"] = list(self.stop)
        d["stop_token_ids"] = list(self.stop_token_ids)
        d.pop("affinity")
        return d


@dataclass
class Sample:
    """One generated continuation.

    token_ids: the sampled ids, verbatim (a stop token or stop string's tokens included when they were sampled).
    logprobs: one per token, under the distribution the token was drawn from (see logprob_kind).
    finish_reason: "stop" (EOS, stop id or stop string), "length" (max_tokens or context end), "error".
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    logprob_kind: str = "model"
    stop_reason: str | int | None = None
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    #: the policy version of each token, when the engine tags them itself (a server whose weights can change
    #: during a request); None: the caller's ``policy_version`` at the call holds for every token
    token_versions: list[int] | None = None

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(f"sample has {len(self.token_ids)} tokens but {len(self.logprobs)} log-probs")
        if self.token_versions is not None and len(self.token_versions) != len(self.token_ids):
            raise ValueError(f"sample has {len(self.token_ids)} tokens but {len(self.token_versions)} versions")


class Sampler(abc.ABC):
    """Generates continuations of token-id prompts. Subclasses implement `agenerate` (asyncio-safe)."""

    #: the longest prompt + completion the model accepts, in tokens (None = unknown)
    max_model_len: int | None = None
    #: a short name for records ("hf", "vllm", "openai")
    name: str = "sampler"
    #: the version of the weights it samples with, set by whoever loads them (a rollout worker, the trainer's
    #: weight sync); the runner records it per token (``Trajectory.token_versions``). None: not tracked.
    policy_version: int | None = None

    @abc.abstractmethod
    async def agenerate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Sample]]:
        """For each prompt, `params.n` samples. Raises SamplerError (ContextOverflow for a too-long prompt)."""

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Sample]]:
        """Blocking form of `agenerate` for scripts and tests outside an event loop."""
        return asyncio.run(self.agenerate(prompts, params))

    def check_prompt(self, prompt: list[int], params: SamplingParams) -> int:
        """Return how many new tokens fit after `prompt`; raise ContextOverflow when none do."""
        if not prompt:
            raise SamplerError("empty prompt: a prompt needs at least one token")
        if self.max_model_len is None:
            return params.max_tokens
        room = self.max_model_len - len(prompt)
        if room < 1:
            raise ContextOverflow(
                f"prompt of {len(prompt)} tokens leaves no room in the context of {self.max_model_len} tokens"
            )
        return min(room, params.max_tokens)

    async def aclose(self) -> None:
        """Release engines, threads and connections (nothing to release by default)."""
        return None

    def close(self) -> None:
        asyncio.run(self.aclose())
