"""Prompt styles: which of a dataset's prompts a Task carries, one per use.

  env       the environment's prompt (training, `toolgym rollout`, the suites' tools mode); the
            environment adds its system prompt and tools around it
  generate  the suites' generate mode: one user message that asks for the answer in the form the
            grader reads (the prompts the published generate-mode numbers were measured with)
  loglik    generate's prompt, plus lm-evaluation-harness's context and continuations in
            `metadata["loglik"]` (multiple choice only)

Each task family module under `toolgym.envs.tasks` writes its dataset's prompts for every style.
"""

from __future__ import annotations

from typing import Literal

from toolgym.errors import ConfigError

PromptStyle = Literal["env", "generate", "loglik"]
STYLES: tuple[str, ...] = ("env", "generate", "loglik")


def check_style(style: str) -> str:
    """`style`, or ConfigError naming the styles there are."""
    if style not in STYLES:
        raise ConfigError(f"prompt style must be one of {', '.join(STYLES)}, got {style!r}")
    return style
