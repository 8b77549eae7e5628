"""Starting a vLLM engine as a newcomer would, with nothing set by hand.

Two things made the CPU build fail there. Its memory share (``gpu_memory_utilization``, default 0.92 of all RAM)
is refused when free memory, page cache counted, is lower, and when it does start it sizes its KV cache to that
share (a 20 GiB cache on a 24 GiB machine, killed for memory at the first weight push). And the reason for a
failed start is logged by the engine's worker process, a hundred lines above "Engine core initialization failed.
See root cause above". So: on CPU, unless the run sets the KV cache or the memory share itself, the KV cache is
sized from the model and the machine (:func:`cpu_kv_cache_bytes`), and a failed start is one line quoting the
worker's own error (:class:`EngineLog`).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from toolgym.errors import ToolgymError

#: the KV cache's share of the memory available when the engine starts (the trainer's optimizer state, the
#: engine's weights and the sandboxes need the rest)
KV_SHARE = 0.25
GIB = 1 << 30
_ERROR_LINE = re.compile(r"(?:\] |^)((?:[A-Za-z_][\w.]*)?(?:Error|Exception): .+)$")
_WRAPPED = re.compile(r"Worker failed with error '(.+)', please check")


class EngineStartError(ToolgymError):
    """The inference engine did not start; the message is the engine's own reason."""


def available_memory_bytes() -> int:
    """MemAvailable (what can be allocated without swapping, page cache that can be dropped included)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise OSError("no MemAvailable in /proc/meminfo")


def kv_bytes_per_token(config: Any, dtype_bytes: int) -> int:
    """Keys and values of one token over every layer."""
    text = getattr(config, "text_config", None) or config
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return 2 * text.num_hidden_layers * kv_heads * head_dim * dtype_bytes


def cpu_kv_cache_bytes(config: Any, engine_kwargs: dict[str, Any], available: int) -> int:
    """A KV cache for the CPU build: what ``max_num_seqs`` sequences of ``max_model_len`` tokens can use, at most
    ``KV_SHARE`` of the available memory, at least one whole sequence."""
    dtype = str(engine_kwargs.get("dtype", "float32"))
    per_token = kv_bytes_per_token(config, 2 if ("16" in dtype or dtype in ("half", "bfloat16")) else 4)
    text = getattr(config, "text_config", None) or config
    max_len = int(engine_kwargs.get("max_model_len") or getattr(text, "max_position_embeddings", 4096))
    seqs = int(engine_kwargs.get("max_num_seqs") or 64)
    one = per_token * max_len
    return int(max(one, min(KV_SHARE * available, one * seqs)))


def sized_for_this_machine(model: str, engine_kwargs: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Engine kwargs with a machine-sized KV cache on CPU when the run sets none of the KV cache, the memory share
    and VLLM_CPU_KVCACHE_SPACE; and the one line that says what was chosen (None: nothing was)."""
    if any(k in engine_kwargs for k in ("kv_cache_memory_bytes", "gpu_memory_utilization")) or \
            os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        return engine_kwargs, None
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model)
    available = available_memory_bytes()
    size = cpu_kv_cache_bytes(config, engine_kwargs, available)
    note = (f"vLLM CPU build: KV cache {size / GIB:.2f} GiB ({available / GIB:.1f} GiB available; set "
            "rollout.sampler_kwargs.kv_cache_memory_bytes or VLLM_CPU_KVCACHE_SPACE to choose)")
    return {**engine_kwargs, "kv_cache_memory_bytes": size}, note


def root_cause(lines: list[str]) -> str | None:
    """The last exception line an engine process logged (``... ERROR ... [file.py:N] ValueError: ...``), without
    its log prefix; None when there is none."""
    found = None
    for line in lines:
        if "Engine core initialization failed" in line:
            continue
        m = _ERROR_LINE.search(line.rstrip())
        if m:
            found = m.group(1)
            inner = _WRAPPED.search(found)  # vLLM re-raises a worker's error inside a RuntimeError's text
            if inner:
                found = inner.group(1)
    return found


class EngineLog:
    """This process's stderr passed through a pipe while an engine starts, the last lines kept.

    The engine's worker processes inherit the pipe as their stderr, so a forwarding thread keeps copying it to
    the real stderr for as long as they run; this process's own stderr is restored as soon as the start ends."""

    def __init__(self, keep: int = 400) -> None:
        self.lines: deque[str] = deque(maxlen=keep)
        self._lock = threading.Lock()
        self._last = time.monotonic()

    @contextlib.contextmanager
    def capture(self) -> Iterator[EngineLog]:
        import sys

        sys.stderr.flush()
        read_fd, write_fd = os.pipe()
        saved = os.dup(2)
        os.dup2(write_fd, 2)
        os.close(write_fd)
        threading.Thread(target=self._forward, args=(read_fd, saved), name="toolgym-engine-log", daemon=True).start()
        try:
            yield self
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)  # the children keep the pipe; this process writes to the terminal again

    def _forward(self, read_fd: int, out_fd: int) -> None:
        out = os.dup(out_fd)
        pending = b""
        while True:
            try:
                chunk = os.read(read_fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            with contextlib.suppress(OSError):
                os.write(out, chunk)
            pending += chunk
            *done, pending = pending.split(b"\n")
            with self._lock:
                self.lines.extend(d.decode(errors="replace") for d in done)
                self._last = time.monotonic()

    def settle(self, quiet_s: float = 0.3, limit_s: float = 3.0) -> list[str]:
        """The kept lines once the pipe has been quiet for ``quiet_s`` (the dying workers' last words in)."""
        start = time.monotonic()
        while time.monotonic() - start < limit_s:
            with self._lock:
                if time.monotonic() - self._last >= quiet_s:
                    break
            time.sleep(0.05)
        with self._lock:
            return list(self.lines)


def start_engine(factory: Any, **kwargs: Any) -> Any:
    """``factory(**kwargs)`` (``vllm.LLM``), with a failed start raised as one line: the engine's own reason."""
    log = EngineLog()
    try:
        with log.capture():
            return factory(**kwargs)
    except RuntimeError as exc:
        if "initialization failed" not in str(exc):
            raise
        cause = root_cause(log.settle()) or str(exc)
        raise EngineStartError(f"the vLLM engine did not start: {cause}") from None
