"""ToolEnv: a Gymnasium environment for multi-turn tool use.

An action is the assistant's text for one turn; observations are chat messages (the prompt
at reset, tool results after each step). The episode ends when a turn makes no tool call
(its final answer is scored by the rubric) or is truncated at `max_turns` / `max_tokens`.
`areset`/`astep` are the async primitives (sandbox calls go through `arun`); `reset`/`step`
run them on a private event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import copy
import json
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium

from toolgym.envs.parsing import NoToolParser, ParsedTurn, ToolCallParser, get_parser
from toolgym.envs.rubric import Rubric, RubricResult
from toolgym.envs.sources import TaskSource, load_source, partition_source
from toolgym.envs.spaces import AnyText, Messages
from toolgym.envs.tools import Tool, ToolContext
from toolgym.envs.types import Task
from toolgym.errors import ConfigError, ToolgymError

_NO_TOOLS = NoToolParser()


class EnvStateError(ToolgymError):
    """step() was called before reset() or after the episode ended."""


def exact_match(answer: str | None, task: Task) -> float:
    """Default correctness: the stated answer equals the ground truth (whitespace and case ignored)."""
    if answer is None or task.ground_truth is None:
        return 0.0
    return float(" ".join(str(answer).split()).lower() == " ".join(str(task.ground_truth).split()).lower())


def approx_tokens(text: str) -> int:
    """A cheap token estimate (about 4 characters per token) for budgets when no tokenizer is given."""
    return (len(text) + 3) // 4


def jsonable(x: Any) -> Any:
    """x as plain JSON data (tuples become lists, unknown objects their str)."""
    return json.loads(json.dumps(x, default=str, ensure_ascii=False))


class ToolEnv(gymnasium.Env):
    """Multi-turn tool environment. Subclasses usually only set tasks, tools, parser and rubric."""

    metadata: dict[str, Any] = {"render_modes": []}
    #: The documented reward range; subclasses narrow or widen it. Checked by `toolgym envs check`.
    reward_range: tuple[float, float] = (0.0, 1.0)

    def __init__(
        self,
        tasks: Any = None,
        *,
        tools: Sequence[Tool] = (),
        parser: str | ToolCallParser = "hermes",
        rubric: Rubric | Sequence[Any] | None = None,
        system_prompt: str | None = None,
        max_turns: int = 4,
        max_tool_calls: int = 8,
        max_tokens: int | None = None,
        token_counter: Callable[[str], int] | None = None,
        sandbox: Any = "auto",
        limits: Any = None,
        turn_reward: Callable[..., float] | None = None,
        split: str | None = None,
        dataset: Any = None,
        partition: str | None = None,
        seed: int = 0,
    ) -> None:
        """Args:
        tasks: a TaskSource, a list of Tasks or records, a file/folder path, or an asset name.
        tools: Tool objects (see `@tool` and builtin_tools); their schemas go to info["tools"].
        parser: a parser name ("hermes", "python", "hermes+python", "none", or any of
            `toolgym.envs.parsing.parser_names()`) or a ToolCallParser instance. Its call format is the
            default only: runs swap in the model's format (`use_tool_format`).
        rubric: a Rubric or a list of reward functions (default: exact match with the ground truth);
            the env's reward_range is the rubric's unless a subclass documents its own.
        max_turns / max_tool_calls / max_tokens: episode budgets (truncation, or an error observation
            for calls over budget); token_counter counts tokens of each action (default ~4 chars/token).
        sandbox: a sandbox object to borrow (never closed here), a backend name ("auto", "local",
            "docker") opened on first tool use and closed by close(), or None for no sandbox.
        limits: sandbox Limits for owned sandboxes and built-in tools.
        turn_reward: optional shaping hook called after each tool turn with (parsed, observations, turn, task, state).
        split: the file or asset split `tasks` is read from (e.g. "test").
        dataset: tasks that replace `tasks` (same forms): what a suite or a config points this environment at.
        partition: "train" or "test" keeps one deterministic part of the tasks (`partition_source`): the
            trainer rolls out on "train" and evaluates on "test", so held-out rewards are held out.
        seed: the seed of that partition's hash.
        toolgym builds every environment through `toolgym.envs.make_env`, which may pass `sandbox`,
        `partition`, `dataset` and `seed`: a subclass takes `**kwargs` and hands them on here.
        """
        if max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1, got {max_turns}")
        data = tasks if dataset is None else dataset
        self.source: TaskSource | None = None if data is None else partition_source(
            load_source(data, split=split), partition, seed=seed)
        self.tools: dict[str, Tool] = {}
        for t in tools:
            if not isinstance(t, Tool):
                raise ConfigError(f"tools must be Tool objects (use @toolgym.envs.tool), got {t!r}")
            self.tools[t.name] = t
        self.parser = get_parser(parser)
        if rubric is None:
            rubric = Rubric([exact_match])
        self.rubric = rubric if isinstance(rubric, Rubric) else Rubric(list(rubric))
        if type(self) is ToolEnv or "reward_range" not in type(self).__dict__:  # subclasses may document their own
            self.reward_range = self.rubric.range
        self.system_prompt = system_prompt
        self.max_turns = max_turns
        self.max_tool_calls = max_tool_calls
        self.max_tokens = max_tokens
        self.token_counter = token_counter or approx_tokens
        self.turn_reward = turn_reward
        self.limits = limits
        self.observation_space = Messages()
        self.action_space = AnyText()
        # sandbox: an object we borrow (never closed here), or a backend name we open lazily and own
        self._sandbox_spec = sandbox
        self._sandbox: Any = None if isinstance(sandbox, str) or sandbox is None else sandbox
        self._owned_sandbox: Any = None
        self._sandbox_lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: Task | None = None
        self._done = True
        self._ctx = ToolContext(env=self)

    # ------------------------------------------------------------------ sandbox
    async def aget_sandbox(self) -> Any:
        """The sandbox, opened on first use when the env was given a backend name."""
        if self._sandbox is not None:
            return self._sandbox
        if self._sandbox_spec is None:
            raise ConfigError("this environment was created with sandbox=None but a tool needs one")
        if self._sandbox_lock is None:
            self._sandbox_lock = asyncio.Lock()
        async with self._sandbox_lock:
            if self._sandbox is None:
                from toolgym.sandbox import open_sandbox

                kw = {"backend": self._sandbox_spec, "pool_size": 1}
                if self.limits is not None:
                    kw["limits"] = self.limits
                opened = await asyncio.to_thread(open_sandbox, **kw)
                sb = opened
                if not hasattr(opened, "run") and hasattr(opened, "__enter__"):
                    sb = await asyncio.to_thread(opened.__enter__)
                self._owned_sandbox = opened
                self._sandbox = sb
        return self._sandbox

    def _close_episode(self) -> None:
        for obj in reversed(self._ctx.state.get("closers", [])):
            try:
                closer = getattr(obj, "close", None)
                closer() if closer is not None else obj.__exit__(None, None, None)
            except Exception:
                pass
        self._ctx.state.clear()

    async def _aclose_episode(self) -> None:
        """Release per-episode resources (sessions) off the event loop."""
        if self._ctx.state.get("closers"):
            await asyncio.to_thread(self._close_episode)
        else:
            self._ctx.state.clear()

    def close(self) -> None:
        """End the episode's sessions; close the sandbox only if this env opened it."""
        self._close_episode()
        owned, self._owned_sandbox = self._owned_sandbox, None
        if owned is not None:
            self._sandbox = None
            closer = getattr(owned, "close", None)
            if closer is not None:
                closer()
            elif hasattr(owned, "__exit__"):
                owned.__exit__(None, None, None)
        if self._loop is not None and not self._loop.is_running():
            self._loop.close()
            self._loop = None
        super().close()

    async def aclose(self) -> None:
        """close() off the event loop (closing a sandbox joins its workers)."""
        await asyncio.to_thread(self.close)

    # ------------------------------------------------------------------ tasks and prompts
    def sample_task(self, options: dict[str, Any]) -> Task:
        """The task for this episode: options["task"], options["index"], or a seeded draw from the source."""
        if "task" in options:
            t = options["task"]
            try:
                return copy.deepcopy(t) if isinstance(t, Task) else Task.from_dict(t)
            except (ValueError, TypeError, AttributeError) as exc:
                raise ConfigError(f"options['task'] is not a valid task: {exc}") from None
        if self.source is None:
            raise ConfigError(f"{type(self).__name__} has no task source; pass tasks= or options={{'task': ...}}")
        if "index" in options:
            return self.source.get(int(options["index"]))
        n = self.source.size
        index = int(self.np_random.integers(0, n if n else 2**31 - 1))
        return self.source.get(index)

    def build_prompt(self, task: Task) -> list[dict[str, Any]]:
        """System prompt (if any) followed by the task's messages."""
        msgs = [dict(m) for m in task.prompt]
        if self.system_prompt and not (msgs and msgs[0].get("role") == "system"):
            msgs.insert(0, {"role": "system", "content": self.system_prompt})
        return msgs

    def use_tool_format(self, parser: str | ToolCallParser) -> None:
        """Read tool calls in the model's format (the rollout runner calls this with the format its chat
        template writes): the format part of this env's parser is replaced, fenced-python fallbacks and
        tool-less parsers stay."""
        self.parser = self.parser.with_format(get_parser(parser))

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        return [t.schema for t in self.tools.values()]

    @property
    def task(self) -> Task | None:
        return self._task

    # ------------------------------------------------------------------ async API
    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        super().reset(seed=seed)
        await self._aclose_episode()
        task = self.sample_task(options or {})
        self._task = task
        self._ctx.task = task
        self._turn = 0
        self._calls_used = 0
        self._tokens_used = 0
        self._done = False
        obs = self.build_prompt(task)
        self._messages = [dict(m) for m in obs]
        info = {
            "task_id": task.id,
            "tools": self.tool_schemas,
            "turn": 0,
            "max_turns": self.max_turns,
            "metadata": jsonable(task.metadata),
        }
        return obs, info

    async def astep(self, action: Any) -> tuple[list[dict[str, Any]], float, bool, bool, dict[str, Any]]:
        if self._done:
            raise EnvStateError("the episode is over (or never started): call reset() before step()")
        text = action.get("content", "") if isinstance(action, dict) else action
        if not isinstance(text, str):
            text = "" if text is None else str(text)
        self._turn += 1
        self._tokens_used += self.token_counter(text)
        parsed = (self.parser if self.tools else _NO_TOOLS).parse(text, self._turn, self.tool_schemas)
        assistant: dict[str, Any] = {"role": "assistant", "content": text}
        if parsed.calls:
            assistant["tool_calls"] = [c.to_dict() for c in parsed.calls]
        self._messages.append(assistant)
        info: dict[str, Any] = {"task_id": self._task.id, "turn": self._turn}

        if parsed.has_tool_activity:
            obs = await self._run_calls(parsed)
            self._messages.extend(obs)
            info["tool_calls"] = len(parsed.calls)
            info["tool_errors"] = sum(1 for m in obs if m["content"].startswith("error:"))
            reward = 0.0
            if self.turn_reward is not None:
                try:
                    reward = float(self.turn_reward(parsed=parsed, observations=obs, turn=self._turn, task=self._task, state=self._ctx.state))
                except Exception as exc:
                    info["turn_reward_error"] = f"{type(exc).__name__}: {exc}"
            truncated = False
            if self._turn >= self.max_turns:
                info["finish_reason"] = "max_turns"
                truncated = True
            elif self.max_tokens is not None and self._tokens_used >= self.max_tokens:
                info["finish_reason"] = "max_tokens"
                truncated = True
            if truncated:
                result = await self._score(text, None)
                reward += result.total
                await self._finish(info, result, None)
            return obs, reward, False, truncated, info

        if self._turn < self.max_turns:
            follow_up = await self.on_final(text, parsed)
            if follow_up:
                self._messages.extend(follow_up)
                info["feedback"] = True
                return follow_up, 0.0, False, False, info
        answer = self.final_answer(text, parsed)
        result = await self._score(text, answer)
        info["finish_reason"] = "answer" if answer is not None else "no_answer"
        await self._finish(info, result, answer)
        return [], result.total, True, False, info

    def final_answer(self, text: str, parsed: ParsedTurn) -> str | None:
        """Hook: what the final message submits; None is "no answer". Default: the parsed answer line."""
        return parsed.answer

    async def on_final(self, text: str, parsed: ParsedTurn) -> list[dict[str, Any]] | None:
        """Hook: messages that continue the episode instead of ending it (e.g. public-test feedback)."""
        return None

    async def _run_calls(self, parsed: ParsedTurn) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for err in parsed.errors:
            out.append({"role": "tool", "name": "invalid_tool_call", "tool_call_id": err.id, "content": f"error: {err.message}"})
        for call in parsed.calls:
            if self._calls_used >= self.max_tool_calls:
                content = f"error: tool-call budget of {self.max_tool_calls} calls is used up; give your final answer"
            elif call.name not in self.tools:
                avail = ", ".join(self.tools) or "none"
                content = f"error: unknown tool {call.name!r}; available tools: {avail}"
            else:
                self._calls_used += 1
                content, _ = await self.tools[call.name].acall(call.arguments, self._ctx)
            out.append({"role": "tool", "name": call.name, "tool_call_id": call.id, "content": content})
        return out

    async def _score(self, completion: str, answer: str | None) -> RubricResult:
        return await self.rubric.ascore(completion=completion, answer=answer, task=self._task,
                                        messages=self._messages, state=self._ctx.state)

    async def _finish(self, info: dict[str, Any], result: RubricResult, answer: str | None) -> None:
        self._done = True
        info["answer"] = answer
        info["reward_components"] = dict(result.components)
        info["reward_breakdown"] = {n: result.components[n] * w for n, _, w in self.rubric.items}
        if result.errors:
            info["reward_errors"] = dict(result.errors)
        info["tool_calls_total"] = self._calls_used
        extra = self._ctx.state.get("info")  # details reward functions left for the agent (e.g. judge counts)
        if isinstance(extra, dict):
            info.update(jsonable(extra))
        await self._aclose_episode()

    # ------------------------------------------------------------------ sync API
    def _run(self, coro: Any) -> Any:
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._loop.run_until_complete(coro)
        # called from inside a running loop: drive our private loop on a helper thread, in this context (the
        # episode a sandbox call belongs to, toolgym.sandbox.tenancy, and the wait clock travel with it)
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            return ex.submit(contextvars.copy_context().run, self._loop.run_until_complete, coro).result()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return self._run(self.areset(seed=seed, options=options))

    def step(self, action: Any) -> tuple[list[dict[str, Any]], float, bool, bool, dict[str, Any]]:
        return self._run(self.astep(action))
