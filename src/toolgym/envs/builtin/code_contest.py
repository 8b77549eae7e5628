"""toolgym/CodeContest-v0: write a program; optional public-test feedback; reward on hidden tests.

Tasks: HumanEval and MBPP (function mode) and LeetCode from the asset cache, or local
LiveCodeBench / CodeContests-format files (stdio mode; `dataset="livecodebench:PATH"` /
`"codecontests:PATH"` with `source_options` such as `trust_pickle`), or Kattis/ICPC problem packages
(`dataset="kattis:DIR"`, or a folder holding problem.yaml packages): judged with each package's
output validator (interactive ones too) and its time/memory limits. A task's own time limit (a
package's, a CodeContests record's) wins; `time_limit_s` and `memory_mb` are for tasks that state none.
The submission is the final message's program (`code_task.extract_program`: the fenced block defining
the entry point, else the last python block; an unterminated block or bare code is judged as it is).
With `feedback_turns > 0` a failing submission gets the public-test results back and may be revised;
with `tools=True` the model can also call `run_tests`.
Reward: the fraction of hidden tests passed (`reward_mode="fraction"`) or 1/0 (`"all"`).
"""

from __future__ import annotations

import logging
from typing import Any

from toolgym.envs.builtin.code_records import code_adapter
from toolgym.envs.builtin.datasets import build_source
from toolgym.envs.builtin.run_tests import run_tests_tool, summarize_report
from toolgym.envs.core import ToolEnv
from toolgym.envs.parsing import ParsedTurn
from toolgym.envs.rubric import Rubric
from toolgym.envs.sources import ListSource
from toolgym.envs.tasks import catalog
from toolgym.envs.tasks.code_task import (
    hidden_test_cases,
    judge_options,
    public_test_cases,
    run_judge,
    submitted_program,
)
from toolgym.envs.tasks.kattis import is_package_source, package_tasks
from toolgym.envs.types import Task
from toolgym.envs.verifiers import extract_code
from toolgym.errors import ConfigError

log = logging.getLogger(__name__)
SYSTEM_PROMPT = "You are an expert programmer. Reply with your complete solution in one ```python code block."
TOOL_PROMPT = SYSTEM_PROMPT + " Before answering you may call the run_tests tool to check a program on the public tests."


class CodeContestEnv(ToolEnv):
    """Programming problems judged in the sandbox."""

    reward_range = (0.0, 1.0)

    def __init__(self, dataset: Any = "mbpp", *, split: str | None = None, partition: str | None = None,
                 limit: int | None = None, reward_mode: str = "fraction", feedback_turns: int = 0, tools: bool = False,
                 max_turns: int | None = None, system_prompt: str | None = None, seed: int = 0,
                 time_limit_s: float = 2.0, memory_mb: int | None = None,
                 source_options: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if reward_mode not in ("fraction", "all"):
            raise ConfigError(f"reward_mode must be 'fraction' or 'all', got {reward_mode!r}")
        if feedback_turns < 0:
            raise ConfigError(f"feedback_turns must be >= 0, got {feedback_turns}")
        self.reward_mode = reward_mode
        self.feedback_turns = feedback_turns
        self.time_limit_s = time_limit_s
        self.memory_mb = memory_mb  # None: the judge's default (256 MiB)
        self._warned_je: set[str] = set()
        if is_package_source(dataset) and not catalog.is_source_string(dataset):  # a plain folder of Kattis packages
            found = package_tasks(dataset, time_limit_s)
            dataset = ListSource(found[:limit] if limit else found, str(dataset))
        tasks = build_source(dataset, code_adapter, kind="code", split=split, partition=partition, seed=seed,
                             limit=limit, options={"time_limit_s": time_limit_s, **(source_options or {})})
        tool_list = [run_tests_tool(limits=kwargs.get("limits"))] if tools else []
        turns = max_turns or (1 + feedback_turns + (3 if tools else 0))
        super().__init__(tasks, tools=tool_list, parser="hermes", rubric=Rubric([self.hidden_tests_reward]),
                         system_prompt=system_prompt or (TOOL_PROMPT if tools else SYSTEM_PROMPT),
                         max_turns=turns, **kwargs)

    def judge_settings(self, task: Task) -> dict[str, Any]:
        """The `judge` keywords for `task`: this env's time limit and memory, then the task's own (which win).
        The reward, the public-test feedback and the run_tests tool all judge with these."""
        return {"time_limit_s": self.time_limit_s, **({"memory_mb": self.memory_mb} if self.memory_mb else {}),
                **judge_options(task)}

    async def hidden_tests_reward(self, completion: str, task: Task, state: dict[str, Any]) -> float:
        """Judge the submitted program on the hidden tests."""
        tests = hidden_test_cases(task)
        sb = await self.aget_sandbox()
        report = await run_judge(sb, submitted_program(completion, task), tests, task.ground_truth["mode"],
                                 options=self.judge_settings(task))
        statuses = [v.status for v in report.verdicts]
        info = {"passed": report.passed, "total": report.total, "statuses": statuses[:50]}
        if "JE" in statuses:  # the task's own validator failed (not the program): say it, once per task
            info["error"] = next((n for n in report.notes if n), "judge error")
            if task.id not in self._warned_je:
                self._warned_je.add(task.id)
                log.warning("%s: %s", task.id, info["error"])
        state.setdefault("info", {})["judge"] = info
        if report.passed < report.total:
            state["info"]["feedback_text"] = judge_feedback(report)
        if report.total == 0:
            return 0.0
        if self.reward_mode == "all":
            return float(report.passed == report.total)
        return report.passed / report.total

    def final_answer(self, text: str, parsed: ParsedTurn) -> str | None:
        """The answer is the submitted ```python block, not an "Answer:" line; None when the message has
        none (it is still judged, as bare code)."""
        return extract_code(text)

    async def on_final(self, text: str, parsed: ParsedTurn) -> list[dict[str, Any]] | None:
        """Public-test feedback: a failing submission is shown its results while feedback turns remain."""
        used = self._ctx.state.get("feedback_used", 0)
        if used >= self.feedback_turns or self._task is None:
            return None
        tests = public_test_cases(self._task)
        if not tests or extract_code(text) is None:
            return None
        sb = await self.aget_sandbox()
        report = await run_judge(sb, submitted_program(text, self._task), tests, self._task.ground_truth["mode"],
                                 options=self.judge_settings(self._task))
        if report.passed == report.total:
            return None
        self._ctx.state["feedback_used"] = used + 1
        msg = summarize_report(report) + "\nFix the program and reply with the complete corrected solution."
        return [{"role": "user", "content": msg}]


def judge_feedback(report: Any) -> str:
    """What a failed submission's own judging on the HIDDEN tests says, for self-distillation's feedback
    context (it reaches training): statuses only, i.e. the verdict counts and the first failing test's index
    and kind. Never a message: a checker's message quotes the expected output, a traceback the test's input."""
    counts: dict[str, int] = {}
    for v in report.verdicts:
        counts[v.status] = counts.get(v.status, 0) + 1
    head = f"{report.passed}/{report.total} tests passed (" + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) + ")"
    first = next((v for v in report.verdicts if not v.passed), None)
    if first is not None:
        return head + f"; first failure: test {first.index + 1} ({first.status})"
    return head
