"""One progress display for every long command (SFT, training, rollouts, benchmarks, asset builds).

On a terminal: a rich bar with done/total and an ETA. Elsewhere (a log file, a pipe, CI): plain lines, one when
the work starts, the first update at once and then at most one every ``every_s`` seconds plus the last, each with
the ETA once there is a rate to go by, so a log shows that work is moving without a line per item.
`TOOLGYM_PROGRESS_EVERY_S` overrides that interval for every command (0: a line per item).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO


def _clock(seconds: float) -> str:
    s = max(0, int(round(seconds)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def eta_text(done: int, total: int, elapsed_s: float) -> str:
    """``12 s, ETA 0:01:00`` for a line of a loop that logs as it goes (no ETA before the first item or after
    the last)."""
    text = f"{elapsed_s:.0f} s"
    if 0 < done < total:
        text += f", ETA {_clock(elapsed_s / done * (total - done))}"
    return text


class Bar:
    """``update(done, info)`` / ``advance(n, info)``; ``say(text)`` prints above the bar; ``close()`` ends it.
    ``done`` may start above 0 (a resumed run): the ETA counts only the items done here."""

    def __init__(self, label: str, total: int, *, done: int = 0, stream: TextIO | None = None,
                 enabled: bool = True, every_s: float = 10.0, unit: str = "") -> None:
        self.label, self.total, self.done, self.unit = label, total, done, unit
        self.stream = stream if stream is not None else sys.stdout
        self.enabled = enabled
        env_every = os.environ.get("TOOLGYM_PROGRESS_EVERY_S")
        self.every_s = float(env_every) if env_every not in (None, "") else every_s
        self._start_done = done
        self._t0 = time.perf_counter()
        self._last_line = float("-inf")
        self._updated = False
        self._rich: Any = None
        if enabled and self.stream.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._rich = Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
                                  TextColumn("{task.fields[info]}"), TimeRemainingColumn(),
                                  console=Console(file=self.stream), transient=False)
            self._rich.start()
            self._task = self._rich.add_task(label, total=total, completed=done, info="")
        elif enabled:
            self._line("starting")

    def eta_s(self) -> float | None:
        """Seconds left at the rate of the items done in this process; None before the first one."""
        did = self.done - self._start_done
        if did <= 0:
            return None
        return (time.perf_counter() - self._t0) / did * max(0, self.total - self.done)

    def update(self, done: int, info: str = "") -> None:
        self.done = done
        if not self.enabled:
            return
        if self._rich is not None:
            self._rich.update(self._task, completed=done, info=info)
            return
        now = time.perf_counter()
        if self._updated and now - self._last_line < self.every_s and done < self.total:
            return
        self._updated = True
        self._last_line = now
        eta = self.eta_s()
        tail = f", ETA {_clock(eta)}" if eta is not None and done < self.total else ""
        self._line(f"{info + ' ' if info else ''}({_clock(now - self._t0)} elapsed{tail})")

    def _line(self, tail: str) -> None:
        unit = f" {self.unit}" if self.unit else ""
        print(f"{self.label} {self.done}/{self.total}{unit} {tail}", file=self.stream, flush=True)

    def advance(self, n: int = 1, info: str = "") -> None:
        self.update(self.done + n, info)

    def say(self, text: str) -> None:
        if self._rich is not None:
            self._rich.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
