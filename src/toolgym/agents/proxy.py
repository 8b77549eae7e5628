"""The recording proxy: OpenAI chat completions in front of any toolgym sampler, recorded as trajectories.

Why: agent programs already written against the OpenAI API (a plain ``openai`` client loop with tools,
or a framework on top of one) train unmodified when they talk to this proxy instead of a server. Each
request is rendered with the model's chat template and sampled; what the trainer needs is recorded as it
goes: the prompt ids, the response ids with a loss mask (1 = sampled here, 0 = template and tool tokens)
and the behaviour log-probs, as a :class:`~toolgym.agents.trajectory.Trajectory`.

The training tokens are the sampled tokens: a request whose history is an earlier request of this proxy
plus the assistant turn returned to it plus new tool/user messages continues that trajectory by APPENDING
ids (the sampled ids verbatim, then ``ChatTemplate.continuation_ids`` for the new messages), exactly as
the rollout runner does. A request whose assistant turns are not ones this proxy returned (the program
rewrote, summarized or truncated its history) starts a new trajectory (a split) whose prompt holds that
history: those tokens were never sampled, so they are never trained on.

The HTTP side lives in :mod:`toolgym.agents.proxy_server`; this module needs no server to test.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from toolgym.agents._openai_messages import RequestError, key, normalize, tools_of
from toolgym.agents.sampling import ContextOverflow, SamplerError, SamplingParams
from toolgym.agents.trajectory import Trajectory

#: the most stop strings a request may give (the API's own limit)
MAX_STOP = 4


@dataclass
class _Thread:
    """One trajectory being recorded: the message keys it has seen and the ids it has so far."""

    traj: Trajectory
    tools_key: str
    seen: list[str]
    context: list[int]
    last_sampled: list[int] = field(default_factory=list)
    busy: bool = False


class RecordingProxy:
    """Answers OpenAI chat-completion requests with ``sampler`` and records each conversation.

    ``template``: the model's :class:`~toolgym.agents.chat.ChatTemplate` (its tool parser reads the calls).
    ``max_tokens``: the cap on a request's ``max_tokens`` (and its default). ``task_id``/``group_id``: what
    the recorded trajectories are filed under (an ``episode`` passed per request overrides the task id)."""

    def __init__(self, sampler: Any, template: Any, *, model_name: str = "toolgym", max_tokens: int = 256,
                 task_id: str = "proxy", group_id: str = "proxy", params: SamplingParams | None = None,
                 tool_parser: Any = None) -> None:
        """``params``: a training run's sampling (temperature, top_p): the policy the trainer scores is sampled
        whatever temperature the program asks for (its ``max_tokens``, ``stop`` and ``seed`` still apply).
        ``tool_parser``: what reads calls out of the model's text (default the template's, the model's format;
        e.g. ``CombinedParser`` also reads fenced ```python blocks, as the built-in environments do)."""
        self.params = params
        self.tool_parser = tool_parser if tool_parser is not None else template.tool_parser
        self.sampler_failures = 0  # requests the sampler failed (not the program's fault: its episode is masked)
        self.sampler = sampler
        self.template = template
        self.model_name = model_name
        self.max_tokens = int(max_tokens)
        self.task_id = task_id
        self.group_id = group_id
        self._threads: list[_Thread] = []
        self._lock = threading.Lock()  # take() may run on another thread than the server's loop
        self._ids = itertools.count()

    # -- what the trainer reads -------------------------------------------------------------------------------

    def take(self) -> list[Trajectory]:
        """The trajectories recorded so far (in the order they started), handed over once: those with a
        request in flight stay until it ends."""
        with self._lock:
            done = [t for t in self._threads if not t.busy]
            self._threads = [t for t in self._threads if t.busy]
        return [t.traj for t in done]

    # -- one request --------------------------------------------------------------------------------------------

    async def complete(self, body: Any, episode: str | None = None) -> dict[str, Any]:
        """The OpenAI response to one ``/v1/chat/completions`` body (``stream`` is the server's business: it
        sends this response as chunks). Raises RequestError (one line for the client) for a request it
        refuses; a sampler failure is a SamplerError."""
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        messages = normalize(body.get("messages"))
        tools = tools_of(body.get("tools"))
        params = self._params(body)
        thread, prompt, mark = self._claim(messages, tools, episode)
        try:
            self.sampler.check_prompt(prompt, params)
            version = getattr(self.sampler, "policy_version", None)
            t0 = time.perf_counter()
            out = await self.sampler.agenerate([list(prompt)], params)
            gen_s = time.perf_counter() - t0
            if not out or not out[0]:
                raise SamplerError("the sampler returned no sample")
            sample = out[0][0]
        except ContextOverflow as exc:
            self._release(thread, mark)
            raise RequestError(f"context_length_exceeded: {exc}") from None
        except BaseException as exc:
            self._release(thread, mark)
            if not isinstance(exc, asyncio.CancelledError):  # a client gone away is no sampler failure
                self.sampler_failures += 1
            raise
        text = self.template.decode_turn(sample.token_ids)
        message, calls = self._message(text, tools, len(thread.traj.turns))
        with self._lock:
            traj = thread.traj
            _append(traj, sample.token_ids, sample.logprobs, model=True, version=version)
            thread.context.extend(sample.token_ids)
            thread.last_sampled = list(sample.token_ids)
            thread.seen.append(key(normalize([message])[0]))
            traj.turns.append({"role": "assistant", "content": text, "finish_reason": sample.finish_reason})
            traj.timings["generate_s"] = traj.timings.get("generate_s", 0.0) + gen_s
            traj.metadata["requests"] = traj.metadata.get("requests", 0) + 1
            traj.metadata.setdefault("sampling", params.to_dict())  # the first request's, as the runner records
            if sample.logprob_kind != traj.metadata.get("logprob_kind"):
                traj.metadata["logprob_kind"] = sample.logprob_kind
            traj.finish_reason = "tool_calls" if calls else ("length" if sample.finish_reason == "length" else "stop")
            thread.busy = False
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": self.model_name,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": traj.finish_reason}],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(sample.token_ids),
                      "total_tokens": len(prompt) + len(sample.token_ids)},
        }

    def models(self) -> dict[str, Any]:
        """The ``/v1/models`` answer: the one model this proxy serves."""
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "created": 0,
                                            "owned_by": "toolgym"}]}

    # -- internals -----------------------------------------------------------------------------------------------

    def _params(self, body: dict[str, Any]) -> SamplingParams:
        n = body.get("n", 1)
        if n not in (1, None):
            raise RequestError("only n = 1 is supported (send one request per sample)")
        mt = body.get("max_completion_tokens", body.get("max_tokens"))
        if mt is None:
            mt = self.max_tokens
        if not isinstance(mt, int) or isinstance(mt, bool) or mt < 1:
            raise RequestError("max_tokens must be a positive integer")
        stop = body.get("stop") or ()
        if isinstance(stop, str):
            stop = (stop,)
        if not isinstance(stop, (list, tuple)) or len(stop) > MAX_STOP or not all(isinstance(s, str) and s for s in stop):
            raise RequestError(f"stop must be a string or a list of at most {MAX_STOP} non-empty strings")
        seed = body.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise RequestError("seed must be an integer")
        try:
            asked = SamplingParams(temperature=_number(body, "temperature", 1.0), top_p=_number(body, "top_p", 1.0),
                                   max_tokens=min(mt, self.max_tokens), stop=tuple(stop), seed=seed)
        except ValueError as exc:
            raise RequestError(str(exc)) from None
        if self.params is None:
            return asked
        return asked.with_(temperature=self.params.temperature, top_p=self.params.top_p)

    def _claim(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
               episode: str | None) -> tuple[_Thread, list[int], tuple[int, ...] | None]:
        """The trajectory this request continues (its prompt: its ids plus the new messages' template ids),
        or a new one; and what `_release` restores if the request fails (None: a new trajectory). Marks it
        busy so a concurrent request cannot continue it too."""
        keys = [key(m) for m in messages]
        tkey = json.dumps(tools, sort_keys=True)
        with self._lock:
            best: _Thread | None = None
            for th in self._threads:
                n = len(th.seen)
                if th.busy or th.tools_key != tkey or len(keys) <= n or keys[:n] != th.seen:
                    continue
                if any(m["role"] == "assistant" for m in messages[n:]):
                    continue
                if best is None or n > len(best.seen):
                    best = th
            if best is not None:
                tr = best.traj
                mark = (len(tr.response_ids), len(tr.token_versions), len(best.seen), len(tr.turns), len(best.context))
                new = messages[len(best.seen):]
                cont = self.template.continuation_ids(best.last_sampled, new)
                version = getattr(self.sampler, "policy_version", None)
                _append(best.traj, cont, [0.0] * len(cont), model=False, version=version)
                best.context.extend(cont)
                best.seen.extend(keys[len(best.seen):])
                best.traj.turns.extend(new)
                best.busy = True
                return best, list(best.context), mark
        prompt = self.template.prompt_ids(messages, tools)  # outside the lock: rendering can take a while
        idx = next(self._ids)
        traj = Trajectory(task_id=episode or self.task_id, group_id=self.group_id, prompt_ids=list(prompt))
        traj.turns.extend(messages)
        traj.metadata.update(proxy_index=idx, sampler=getattr(self.sampler, "name", "sampler"),
                             tool_parser=getattr(self.tool_parser, "name", None))
        if tools:
            traj.metadata["tools"] = tools
        if any(m["role"] == "assistant" for m in messages):
            # history this proxy did not sample (or sampled differently): a split, trained from here on only
            traj.metadata["split"] = "history not sampled by this proxy"
        thread = _Thread(traj, tkey, keys, list(prompt), busy=True)
        with self._lock:
            self._threads.append(thread)
        return thread, list(prompt), None

    def _release(self, thread: _Thread, mark: tuple[int, ...] | None) -> None:
        """Undo a claim whose request failed: nothing of a request that sampled nothing is recorded."""
        with self._lock:
            thread.busy = False
            if mark is None:
                self._threads.remove(thread)
                return
            n, nv, seen, turns, ctx = mark
            tr = thread.traj
            del tr.response_ids[n:], tr.loss_mask[n:], tr.behavior_logprobs[n:], tr.token_versions[nv:]
            del thread.seen[seen:], tr.turns[turns:], thread.context[ctx:]

    def _message(self, text: str, tools: list[dict[str, Any]] | None,
                 turn: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The OpenAI assistant message for a sampled turn: tool calls read by the model's parser (only when
        the request offered tools), the text before the first call as its content."""
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if not tools:
            return message, []
        parser = self.tool_parser
        parsed = parser.parse(text, turn=turn, tools=tools)
        if not parsed.calls:
            return message, []
        calls = [{"id": c.id, "type": "function",
                  "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                 for c in parsed.calls]
        cut = min((i for i in (text.find(m) for m in parser.special_markers) if i >= 0), default=-1)
        content = text[:cut].strip() if cut >= 0 else ""
        message["content"] = content or None
        message["tool_calls"] = calls
        return message, calls


def _number(body: dict[str, Any], name: str, default: float) -> float:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise RequestError(f"{name} must be a number")
    return float(v)


def _append(traj: Trajectory, ids: list[int], lps: list[float], *, model: bool, version: int | None) -> None:
    """Extend a trajectory's response by ``ids`` (sampled when ``model``), its versions kept aligned."""
    if version is not None and len(traj.token_versions) == len(traj.response_ids):
        traj.token_versions.extend([int(version)] * len(ids))
    elif traj.token_versions:
        traj.token_versions.clear()
    traj.response_ids.extend(ids)
    traj.loss_mask.extend([1 if model else 0] * len(ids))
    traj.behavior_logprobs.extend(float(x) if model else 0.0 for x in lps)
