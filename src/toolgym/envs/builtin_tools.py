"""Built-in tools: `python` (stateless or a stateful session), `calculator` (sympy, evaluated in
the sandbox). All sandbox calls are async (`arun`) so a tool never blocks the rollout loop; all
failures come back as text. `run_tests` judges a code task, so it lives with the code environment
(:mod:`toolgym.envs.builtin.run_tests`): this module imports nothing of ``envs.builtin``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from toolgym.envs.tools import Tool, ToolContext, truncate


def format_exec(result: Any, limit: int = 4000) -> str:
    """The model's view of an ExecResult: stdout, then stderr and a status line when not ok."""
    out = (getattr(result, "stdout", "") or "").rstrip("\n")
    err = (getattr(result, "stderr", "") or "").rstrip("\n")
    status = getattr(result, "status", "ok")
    parts = []
    if out:
        parts.append(out)
    if err:
        parts.append(("stderr:\n" if out else "") + err)
    if status != "ok":
        note = {"timeout": "timed out", "oom": "ran out of memory", "output_limit": "output limit reached",
                "killed": "killed", "sandbox_error": "sandbox error"}.get(status, f"exit code {getattr(result, 'exit_code', None)}")
        parts.append(f"[{note}]")
    if getattr(result, "stdout_truncated", False):
        parts.append("[stdout truncated]")
    return truncate("\n".join(parts) if parts else "(no output; use print() to see values)", limit)


async def _run_in(obj: Any, code: str, **kw: Any) -> Any:
    arun = getattr(obj, "arun", None)
    if arun is not None:
        return await arun(code, **kw)
    return await asyncio.to_thread(obj.run, code, **kw)


def python_tool(stateful: bool = False, limits: Any = None) -> Tool:
    """The `python` tool. Stateful: one interpreter session per episode, variables persist."""

    async def python(code: str, ctx: ToolContext) -> str:
        """Run Python 3 code and return what it prints (stdout and stderr).

        Args:
            code: Python source; print() the values you need.
        """
        sb = await ctx.get_sandbox()
        if stateful:
            session = ctx.state.get("python_session")
            if session is None:
                session = await asyncio.to_thread(sb.session)  # acquiring a worker may wait: off the loop
                ctx.state["python_session"] = session
                ctx.state.setdefault("closers", []).append(session)
            kw = {"limits": limits} if limits is not None else {}
            result = await _run_in(session, code, **kw)
        else:
            kw = {"language": "python"}
            if limits is not None:
                kw["limits"] = limits
            result = await _run_in(sb, code, **kw)
        ctx.state["tool_time_s"] = ctx.state.get("tool_time_s", 0.0) + float(getattr(result, "duration_s", 0.0) or 0.0)
        return format_exec(result)

    return Tool(python)


_CALC_PROGRAM = r'''
import ast, operator, sys
expr = sys.stdin.read()
try:
    import sympy
except ImportError:
    sympy = None
if sympy is not None:
    v = sympy.sympify(expr, rational=True)
    v = sympy.simplify(v)
    if v.is_Integer or v.free_symbols or not v.is_number:
        print(v)
    else:
        print(f"{v} = {v.evalf(15)}")
else:
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.USub: operator.neg, ast.UAdd: operator.pos}
    def ev(n):
        if isinstance(n, ast.Expression): return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)): return n.value
        if isinstance(n, ast.BinOp) and type(n.op) in ops: return ops[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and type(n.op) in ops: return ops[type(n.op)](ev(n.operand))
        raise ValueError("only numbers and + - * / // % ** are supported here")
    print(ev(ast.parse(expr.replace("^", "**"), mode="eval")))
'''


def calculator_tool(limits: Any = None) -> Tool:
    """The `calculator` tool: exact symbolic evaluation with sympy, run inside the sandbox."""

    async def calculator(expression: str, ctx: ToolContext) -> str:
        """Evaluate a math expression exactly (sympy syntax, e.g. "2**100 - 1", "sqrt(8)", "Rational(1, 3) + 1").

        Args:
            expression: the expression to evaluate.
        """
        sb = await ctx.get_sandbox()
        kw: dict[str, Any] = {"language": "python", "stdin": expression}
        if limits is not None:
            kw["limits"] = limits
        result = await _run_in(sb, _CALC_PROGRAM, **kw)
        if getattr(result, "status", "ok") == "ok":
            return (result.stdout or "").strip() or "(no result)"
        err = (getattr(result, "stderr", "") or "").strip().splitlines()
        return "error: " + (err[-1] if err else f"calculator failed ({result.status})")

    return Tool(calculator)


BUILTIN_TOOLS = {"python": python_tool, "calculator": calculator_tool}
