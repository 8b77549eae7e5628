"""The `run_tests` tool of the code tasks: a program against the task's public tests only (hidden
tests stay hidden), judged by the task's own judge; failures come back as text."""

from __future__ import annotations

from typing import Any

from toolgym.envs.tasks.code_task import assemble_program, judge_options, public_test_cases, run_judge
from toolgym.envs.tools import Tool, ToolContext, truncate


def run_tests_tool(limits: Any = None, max_shown: int = 3) -> Tool:
    """The `run_tests` tool: runs the task's public tests only (hidden tests stay hidden)."""

    async def run_tests(code: str, ctx: ToolContext) -> str:
        """Run your program against the public example tests and report which pass.

        Args:
            code: the complete program (or function definitions) to test.
        """
        task = ctx.task
        tests = public_test_cases(task)
        if not tests:
            return "no public tests are available for this problem"
        sb = await ctx.get_sandbox()
        # public tests are judged as the hidden ones: the environment's limits, then the task's own judge
        # (a Kattis package's validator and limits)
        env = getattr(ctx.env, "unwrapped", ctx.env)
        settings = env.judge_settings(task) if hasattr(env, "judge_settings") else judge_options(task)
        report = await run_judge(sb, assemble_program(code, task), tests, task.ground_truth.get("mode", "stdio"),
                                 options=settings)
        return summarize_report(report, max_shown)

    return Tool(run_tests)


def summarize_report(report: Any, max_shown: int = 3) -> str:
    """A few lines for the model: the count, then the first failing verdicts with excerpts."""
    lines = [f"passed {report.passed}/{report.total} public tests"]
    shown = 0
    for v in report.verdicts:
        if v.passed:
            continue
        if shown >= max_shown:
            lines.append("...")
            break
        line = f"test {v.index + 1}: {v.status}"
        if v.message:
            line += f": {truncate(v.message, 300)}"
        if v.expected is not None or v.got is not None:
            line += f"\n  expected: {truncate(str(v.expected), 200)}\n  got: {truncate(str(v.got), 200)}"
        lines.append(line)
        shown += 1
    return "\n".join(lines)
