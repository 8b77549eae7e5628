"""A rubric term graded by a model: ``Rubric([LLMJudge(backend), ...])``.

Why the term takes a *backend* and builds none: environments sit below the samplers in toolgym's layers
(``agents -> envs``), so this module never imports one. A backend is any object with
``async ajudge(chats) -> list[JudgeReply]`` (:class:`JudgeBackend`): ``toolgym.agents.judge.SamplerJudge``
wraps any registered sampler (``hf``, ``vllm``, ``openai`` on loopback) with its model's chat template; a
test or a plug-in may bring its own.

Each call renders the judge's prompt (``toolgym.envs.judge_prompt``: the answer escaped and fenced by a
per-call nonce), and awaits the verdict, never blocking the event loop:

- batched: calls made within ``batch_window_s`` of each other (the episodes of a rollout batch finish
  together) go to the backend as one list, up to ``batch_size`` chats;
- cached by content: the same (criteria, task, reference, answer) is judged once; a second episode with it,
  at once or later, reuses the verdict (a cache hit, no call). Failed verdicts are not cached;
- a reply with no valid verdict raises :class:`JudgeVerdictError` (the Rubric scores the term 0 and reports
  the one line in ``reward_errors``) and counts as a failure; a backend that fails raises InfrastructureError,
  so the episode is masked rather than scored on a fault that is not its own.

Cost: each episode's share goes to ``state["info"]["llm_judge"]`` (the runner keeps it on the trajectory as
``metadata["env_info"]["llm_judge"]``: calls, cache_hits, failures, prompt_tokens, completion_tokens,
wait_s), and each judge keeps process totals (``stats()``, or ``take_metrics()`` over every judge alive).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

from toolgym.envs.judge_prompt import (
    DEFAULT_CRITERIA,
    JudgeVerdictError,
    judge_messages,
    new_nonce,
    parse_verdict,
    task_text,
)
from toolgym.errors import ConfigError, InfrastructureError
from toolgym.sandbox import waiting

__all__ = ["JudgeBackend", "JudgeReply", "JudgeStats", "JudgeVerdictError", "LLMJudge", "take_metrics"]

Chat = list[dict[str, str]]
COST_KEYS = ("calls", "cache_hits", "failures", "prompt_tokens", "completion_tokens")


@dataclass
class JudgeReply:
    """One judge reply: its text and what it cost in tokens."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


@runtime_checkable
class JudgeBackend(Protocol):
    """What an LLMJudge calls: one reply per chat, in order; raises on a failure of its own."""

    async def ajudge(self, chats: list[Chat]) -> list[JudgeReply]: ...


@dataclass
class JudgeStats:
    """A judge's totals: chats sent (calls) in how many backend batches, verdicts reused, verdicts that
    failed to parse, backend failures, tokens, and the seconds the backend took (batch wall time)."""

    calls: int = 0
    batches: int = 0
    cache_hits: int = 0
    failures: int = 0
    backend_errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def add(self, other: JudgeStats) -> None:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)


_LIVE: weakref.WeakSet[LLMJudge] = weakref.WeakSet()


def take_metrics(reset: bool = True) -> dict[str, float]:
    """Totals of every judge alive in this process since the last call (``reset``), as ``judge/KEY``
    metrics; empty when no judge ran. For a trainer step that ran its rollouts in this process."""
    total = JudgeStats()
    for judge in list(_LIVE):
        total.add(judge.stats(reset=reset))
    if total == JudgeStats():
        return {}
    return {f"judge/{k}": float(v) for k, v in asdict(total).items()}


class _Queue:
    """The calls of one event loop waiting for their batch, and the verdicts in flight there."""

    def __init__(self) -> None:
        self.pending: list[tuple[Chat, str, asyncio.Future]] = []
        self.inflight: dict[str, asyncio.Future] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.tasks: set[asyncio.Task] = set()


class LLMJudge:
    """A rubric term (async callable) scoring an answer in [0, 1] as the judge's SCORE / max_score.

    backend: a :class:`JudgeBackend`. criteria: what the judge grades (``{max}`` is max_score).
    field: "completion" (the final message) or "answer" (the detected answer; None grades as empty).
    reference: ``task -> str`` (default: ``str(task.ground_truth)``). name: the component's name.
    prefill: the judge's reply starts with ``SCORE NONCE:`` and it writes only the number (small judges).
    timeout_s: no verdict by then is a backend fault (InfrastructureError). The wait for a verdict is not the
    episode's own time (``EpisodeLimits.max_wall_s`` leaves it out): it depends on the judge and the batch."""

    def __init__(self, backend: JudgeBackend, *, criteria: str = DEFAULT_CRITERIA, max_score: int = 10,
                 field: str = "completion", reference: Callable[[Any], str] | None = None, name: str = "judge",
                 batch_size: int = 32, batch_window_s: float = 0.01, cache_size: int = 4096,
                 max_chars: int = 16_000, prefill: bool = False, timeout_s: float = 600.0) -> None:
        if not callable(getattr(backend, "ajudge", None)):
            raise ConfigError(f"LLMJudge needs a backend with an async ajudge(chats) method; got {backend!r} "
                              "(toolgym.agents.judge.SamplerJudge wraps any sampler)")
        if field not in ("completion", "answer"):
            raise ConfigError(f"LLMJudge field must be 'completion' or 'answer'; got {field!r}")
        if not 1 <= max_score <= 1000:
            raise ConfigError(f"LLMJudge max_score must be 1..1000; got {max_score}")
        if batch_size < 1 or batch_window_s < 0 or cache_size < 0:
            raise ConfigError("LLMJudge batch_size must be >= 1, batch_window_s and cache_size >= 0")
        self.backend = backend
        self.criteria, self.max_score, self.field = criteria, int(max_score), field
        self.reference = reference or _ground_truth
        self.__name__ = name
        self.batch_size, self.batch_window_s, self.cache_size, self.max_chars = (
            batch_size, batch_window_s, cache_size, max_chars)
        self.prefill, self.timeout_s = prefill, float(timeout_s)
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()
        self._stats = JudgeStats()
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Queue] = weakref.WeakKeyDictionary()
        _LIVE.add(self)

    def stats(self, reset: bool = False) -> JudgeStats:
        """This judge's totals (a copy); ``reset`` starts new ones."""
        with self._lock:
            out = JudgeStats(**asdict(self._stats))
            if reset:
                self._stats = JudgeStats()
            return out

    async def __call__(self, completion: str = "", answer: str | None = None, task: Any = None,
                       state: dict[str, Any] | None = None) -> float:
        graded = completion if self.field == "completion" else answer
        fields = (task_text(task), str(self.reference(task)), "" if graded is None else str(graded))
        key = hashlib.sha256(json.dumps([self.criteria, self.max_score, self.max_chars, self.prefill, *fields]).encode()).hexdigest()
        cost = dict.fromkeys(COST_KEYS, 0) | {"wait_s": 0.0}
        t0 = time.perf_counter()
        try:
            score = self._cached(key)
            if score is not None:
                cost["cache_hits"] = 1
                return score / self.max_score
            with self._lock:
                queue = self._queues.setdefault(asyncio.get_running_loop(), _Queue())
            shared = queue.inflight.get(key)
            if shared is not None:  # the same content is being judged for another episode right now
                cost["cache_hits"] = 1
                self._count(cache_hits=1)
                try:
                    score, _ = await self._await(shared)
                except JudgeVerdictError:
                    cost["failures"] = 1
                    raise
                return score / self.max_score
            fut = asyncio.get_running_loop().create_future()
            fut.add_done_callback(_retrieve)
            queue.inflight[key] = fut
            nonce = new_nonce()
            queue.pending.append((judge_messages(*fields, nonce, criteria=self.criteria, max_score=self.max_score,
                                                 max_chars=self.max_chars, prefill=self.prefill), nonce, fut))
            self._schedule(queue)
            cost["calls"] = 1
            try:
                score, reply = await self._await(fut)
            except JudgeVerdictError as exc:  # its tokens were spent all the same
                cost["failures"] = 1
                reply = getattr(exc, "reply", None)
                if isinstance(reply, JudgeReply):
                    cost["prompt_tokens"], cost["completion_tokens"] = reply.prompt_tokens, reply.completion_tokens
                raise
            finally:
                queue.inflight.pop(key, None)
            cost["prompt_tokens"], cost["completion_tokens"] = reply.prompt_tokens, reply.completion_tokens
            self._remember(key, score)
            return score / self.max_score
        finally:
            cost["wait_s"] = round(time.perf_counter() - t0, 6)
            _record(state, cost)

    async def _await(self, fut: asyncio.Future) -> tuple[int, JudgeReply]:
        with waiting.waiting():
            try:
                return await asyncio.wait_for(asyncio.shield(fut), self.timeout_s)
            except TimeoutError:
                raise InfrastructureError(f"judge gave no verdict in {self.timeout_s:g} s") from None

    # -- cache ---------------------------------------------------------------------------------------

    def _cached(self, key: str) -> int | None:
        with self._lock:
            score = self._cache.get(key)
            if score is not None:
                self._cache.move_to_end(key)
                self._stats.cache_hits += 1
            return score

    def _remember(self, key: str, score: int) -> None:
        with self._lock:
            self._cache[key] = score
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def _count(self, **deltas: float) -> None:
        with self._lock:
            for k, v in deltas.items():
                setattr(self._stats, k, getattr(self._stats, k) + v)

    # -- batching ------------------------------------------------------------------------------------

    def _schedule(self, queue: _Queue) -> None:
        if len(queue.pending) >= self.batch_size:
            self._flush(queue)
        elif queue.timer is None:
            queue.timer = asyncio.get_running_loop().call_later(self.batch_window_s, self._flush, queue)

    def _flush(self, queue: _Queue) -> None:
        if queue.timer is not None:
            queue.timer.cancel()
            queue.timer = None
        while queue.pending:
            batch, queue.pending = queue.pending[:self.batch_size], queue.pending[self.batch_size:]
            task = asyncio.get_running_loop().create_task(self._run_batch(batch))
            queue.tasks.add(task)
            task.add_done_callback(queue.tasks.discard)

    async def _run_batch(self, batch: list[tuple[Chat, str, asyncio.Future]]) -> None:
        t0 = time.perf_counter()
        try:
            replies = list(await self.backend.ajudge([chat for chat, _, _ in batch]))
            if len(replies) != len(batch):
                raise InfrastructureError(f"judge backend answered {len(replies)} chats of {len(batch)}")
        except asyncio.CancelledError:  # the loop is closing: no waiter may hang on this batch
            for _, _, fut in batch:
                if not fut.done():
                    fut.set_exception(InfrastructureError("judge batch cancelled"))
            raise
        except Exception as exc:  # the backend's fault, not the answer's: the episodes are masked
            self._count(batches=1, calls=len(batch), backend_errors=len(batch), seconds=time.perf_counter() - t0)
            err = exc if isinstance(exc, InfrastructureError) else InfrastructureError(
                f"judge backend failed: {type(exc).__name__}: {_one_line(exc)}")
            for _, _, fut in batch:
                if not fut.done():
                    fut.set_exception(err)
            return
        failures = 0
        for (_, nonce, fut), reply in zip(batch, replies, strict=True):
            if fut.done():
                continue
            try:
                fut.set_result((parse_verdict(reply.text, nonce, self.max_score), reply))
            except JudgeVerdictError as exc:
                failures += 1
                exc.reply = reply  # type: ignore[attr-defined]
                fut.set_exception(exc)
        self._count(batches=1, calls=len(batch), failures=failures, seconds=time.perf_counter() - t0,
                    prompt_tokens=sum(r.prompt_tokens for r in replies),
                    completion_tokens=sum(r.completion_tokens for r in replies))


def _ground_truth(task: Any) -> str:
    gt = getattr(task, "ground_truth", None)
    return "(no reference given)" if gt is None else str(gt)


def _record(state: dict[str, Any] | None, cost: dict[str, float]) -> None:
    """Add this call's cost to the episode's ``info["llm_judge"]`` (summed over judge terms)."""
    if not isinstance(state, dict):
        return
    info = state.setdefault("info", {})
    if not isinstance(info, dict):
        return
    mine = info.setdefault("llm_judge", {})
    for k, v in cost.items():
        mine[k] = mine.get(k, 0) + v


def _retrieve(fut: asyncio.Future) -> None:
    """Mark a verdict's exception seen: its episode may have gone (cancelled) before reading it."""
    if not fut.cancelled():
        fut.exception()


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300]
