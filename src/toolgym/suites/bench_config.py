"""BenchConfig: everything that determines a benchmark run's numbers (stored in its report)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from toolgym.errors import ConfigError, unknown

MODES = ("tools", "generate", "loglik")


@dataclass
class BenchConfig:
    """Everything that determines a run's numbers (stored in the report)."""

    suite: str
    model: str
    mode: str = "generate"
    subset: str | None = None
    limit: int | None = None
    seed: int = 0
    samples: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    sampler: str = "hf"
    base_url: str | None = None
    tokenizer: str | None = None
    batch: int = 8
    concurrency: int = 64
    sandbox_backend: str = "auto"
    trust_pickle: bool = False
    completions: str | None = None
    max_turns: int = 4
    device: str = "auto"  # hf sampler and loglik model: auto | cpu | cuda | cuda:N (not a resume key)
    tool_parser: str | None = None  # tools mode: the model's tool-call format; None: from the chat template

    def __post_init__(self) -> None:
        from toolgym.devices import check_device

        self.device = check_device(self.device, "--device")
        if self.device.startswith("cuda") and self.completions is None:  # no CUDA: one line now, not after loading
            from toolgym.devices import resolve_device

            resolve_device(self.device, what="--device", local_rank=None)
        if self.mode not in MODES:
            raise ConfigError(unknown("mode", self.mode, MODES, "from --mode"))
        if self.samples < 1:
            raise ConfigError("--samples must be >= 1")
        if self.limit is not None and self.limit < 1:
            raise ConfigError("--limit must be >= 1")
        if self.tool_parser is not None:
            from toolgym.envs.parsing import get_format

            get_format(self.tool_parser)
        if self.samples > 1 and self.temperature == 0:
            raise ConfigError("--samples > 1 needs --temperature > 0 (greedy samples would all be equal)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Log = Callable[[str], None]
