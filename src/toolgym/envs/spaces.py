"""Gymnasium spaces for chat environments: actions are any text, observations are chat messages."""

from __future__ import annotations

from typing import Any

from gymnasium import spaces


class AnyText(spaces.Space):
    """Any Python string up to `max_length` characters (all of Unicode)."""

    def __init__(self, max_length: int = 1 << 22) -> None:
        super().__init__(shape=None, dtype=None)
        self.max_length = max_length

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        n = int(self.np_random.integers(0, 64))
        return "".join(chr(int(c)) for c in self.np_random.integers(32, 0x2FFF, size=n))

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"AnyText({self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AnyText) and other.max_length == self.max_length


class Messages(spaces.Space):
    """A list of chat messages: dicts with a string `role` and string `content`."""

    ROLES = ("system", "user", "assistant", "tool")

    def __init__(self) -> None:
        super().__init__(shape=None, dtype=None)

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(
            isinstance(m, dict) and m.get("role") in self.ROLES and isinstance(m.get("content"), str) for m in x
        )

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, str]]:
        return [{"role": "user", "content": AnyText().sample()}]

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "Messages()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Messages)
