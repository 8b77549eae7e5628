"""Model text is parsed in linear time: every extractor, tool-call parser and built-in reward function,
on adversarial strings (whitespace runs, nested brackets, unclosed fences and tags, near-misses of each
pattern and of each format's own call) at 1, 10 and 100 KB. A case fails when its time grows faster than
linearly: t(100KB)/t(10KB) or t(10KB)/t(1KB) over RATIO, where linear is 10 and quadratic 100. Ratios of
the same process's CPU times (the least of a few runs), not absolute timings; times under FLOOR_S count as
FLOOR_S (timer noise), and a case over RATIO is measured again before it fails.

The functions are enumerated: every public function of the extractor modules, every parser name and every
module-level reward function of the built-in environments, so a new one is covered without an edit here.
A runaway (the backtracking this guards against) is stopped by SIGALRM after GUARD_S and fails its case:
CPython's regex engine checks for signals while it matches.

`python -m tests.envs.test_linear_time` prints the whole timing table.
"""

from __future__ import annotations

import gc
import importlib
import inspect
import pkgutil
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

import toolgym._text
import toolgym.envs.answers
import toolgym.envs.builtin
import toolgym.envs.judge_prompt
import toolgym.envs.parsing.base
import toolgym.envs.tasks
import toolgym.envs.verifiers
import toolgym.suites.grading
from toolgym.envs.parsing import FORMATS, get_parser, parser_names
from toolgym.envs.types import Task

SIZES = (1_000, 10_000, 100_000)
RATIO = 30.0
FLOOR_S = 2e-4
GUARD_S = float(__import__("os").environ.get("LINEAR_GUARD_S", "10"))
REPS = {1_000: 5, 10_000: 3, 100_000: 2}


def _fill(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n]


def _generators() -> dict[str, Callable[[int], str]]:
    gens: dict[str, Callable[[int], str]] = {
        "letter phrase + spaces": lambda n: "I do not know the answer" + " " * n + "?",
        "answer is + spaces": lambda n: "The answer is" + " " * n,
        "answer is + newlines": lambda n: "The answer is" + "\n" * n,
        "final + spaces": lambda n: "final" + " " * n + "x",
        "answer option choice": lambda n: _fill("answer option choice is : ", n),
        "answer: ( runs": lambda n: "answer:" + "(" * n,
        "fence + spaces": lambda n: "```" + " " * n,
        "fence + tabs, tag, tabs": lambda n: "```" + "\t" * (n // 2) + "py" + "\t" * (n // 2),
        "fences, no newline": lambda n: _fill("``` ", n),
        "unclosed python fences": lambda n: _fill("```python\nx=1\n", n),
        "whitespace mix": lambda n: _fill(" \t\n\r\f", n),
        "open braces": lambda n: "\\boxed{" + "{" * n,
        "nested brackets": lambda n: "[" * (n // 3) + "{" * (n // 3) + "(" * (n // 3),
        "unclosed boxes": lambda n: _fill("\\boxed{", n),
        "bare box + spaces": lambda n: "\\boxed" + " " * n,
        "text commands": lambda n: _fill("\\text{ ", n),
        "assignment + spaces": lambda n: "x = " + " " * n + "=",
        "digits then a letter": lambda n: "1" * n + "x",
        "digits, dots, commas": lambda n: _fill("1.,/", n) + " dollars" * 3 + "!",
        "lone letters": lambda n: _fill("A B ", n),
        "unclosed answer tags": lambda n: _fill("<answer>", n),
        "unclosed think": lambda n: "<think>" + " " * n,
        "think closes": lambda n: _fill("</think>", n),
    }
    for name, cls in FORMATS.items():
        call = cls().format_call("python", {"code": "print(1)"})
        gens[f"{name}: unclosed calls"] = lambda n, c=call: _fill(c[: len(c) // 2], n)
        gens[f"{name}: calls minus last char"] = lambda n, c=call: _fill(c[:-1], n)
        gens[f"{name}: call + spaces"] = lambda n, c=call: c[: len(c) // 2] + " " * n
    return gens


# Extractors: every public function of these modules, called as fn(text) unless said here.
EXTRACTOR_MODULES = (toolgym._text, toolgym.envs.answers, toolgym.envs.verifiers, toolgym.envs.parsing.base,
                     toolgym.suites.grading, toolgym.envs.judge_prompt)
_TASK = Task("t", [], ground_truth="B", metadata={"labels": ["A", "B", "C", "D"],
                                                  "choices": ["one", "two", "three", "four"]})
CALLS: dict[str, Callable[[Callable[..., Any], str], Any]] = {
    "toolgym._text.iter_fences": lambda f, s: list(f(s)),
    "toolgym._text.extract_code": lambda f, s: f(s, "python", "solve"),
    "toolgym.envs.verifiers.choice_equal": lambda f, s: f(s, "B", choices=["one", "two", "three", "four"]),
    "toolgym.envs.verifiers.extract_choice": lambda f, s: f(s, choices=["one", "two", "three", "four"]),
    "toolgym.envs.verifiers.math_equal": lambda f, s: f(s, "5"),
    "toolgym.suites.grading.answer_key": lambda f, s: (f("mc", _TASK, s, None), f("mc", _TASK, s, s)),
    "toolgym.envs.parsing.base.json_at": lambda f, s: f(s, 0),
    "toolgym.envs.judge_prompt.judge_messages": lambda f, s: f(s, s, s, "0" * 16),
    "toolgym.envs.judge_prompt.parse_verdict": lambda f, s: _verdict(f, s),
}
NOT_TEXT = {  # public functions of those modules that read no model text, or read it elsewhere
    "toolgym.envs.verifiers.rg_score": "a reasoning-gym scorer, run only in the scorer worker (killed past its deadline)",
    "toolgym.envs.parsing.base.object_arguments": "checks an already decoded value",
    "toolgym.envs.parsing.base.coerce_arguments": "types already parsed arguments",
    "toolgym.suites.grading.grade_all": "runs an environment's rubric (its reward functions are covered below)",
    "toolgym.suites.grading.agrade": "runs an environment's rubric (its reward functions are covered below)",
    "toolgym.suites.grading.records": "builds records from grades",
    "toolgym.envs.judge_prompt.new_nonce": "draws a nonce, reads no text",
}
_ARGS = ("completion", "answer", "task", "messages", "state")


def _verdict(parse: Callable[..., Any], reply: str) -> Any:
    """A judge's reply: a verdict, or the one-line failure most adversarial replies are."""
    try:
        return parse(reply, "0" * 16)
    except toolgym.envs.judge_prompt.JudgeVerdictError:
        return None


def _extractors() -> dict[str, Callable[[str], Any]]:
    out: dict[str, Callable[[str], Any]] = {}
    for mod in EXTRACTOR_MODULES:
        for name, fn in vars(mod).items():
            key = f"{mod.__name__}.{name}"
            if name.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != mod.__name__ or key in NOT_TEXT:
                continue
            call = CALLS.get(key, lambda f, s: f(s))
            out[key] = lambda s, f=fn, c=call: c(f, s)
    return out


def _rewards() -> dict[str, Callable[[str], Any]]:
    """Module-level reward functions of the built-in environments: public functions whose parameters are
    rubric arguments (or defaulted) and that read the completion or the answer."""
    mods = [importlib.import_module("toolgym.envs.rubric"), importlib.import_module("toolgym.envs.core")]
    mods += [importlib.import_module(f"{pkg.__name__}.{m.name}") for pkg in (toolgym.envs.tasks, toolgym.envs.builtin)
             for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_")]
    out: dict[str, Callable[[str], Any]] = {}
    for mod in mods:
        for name, fn in vars(mod).items():
            if name.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != mod.__name__:
                continue
            params = inspect.signature(fn).parameters
            if not params or not ({"completion", "answer"} & set(params)) or any(
                    p not in _ARGS and params[p].default is inspect.Parameter.empty for p in params):
                continue
            kw = {"completion": None, "answer": None, "task": _TASK, "messages": [], "state": {}}

            def run(s: str, f: Callable[..., Any] = fn, ps: Any = params, kw: dict[str, Any] = kw) -> Any:
                args = {k: v for k, v in kw.items() if k in ps}
                args.update({k: s for k in ("completion", "answer") if k in ps})
                return f(**args)

            out[f"{mod.__name__}.{name}"] = run
    return out


def _parsers() -> dict[str, Callable[[str], Any]]:
    return {f"parser {n}": (lambda s, p=get_parser(n): p.parse(s)) for n in parser_names()}


def functions() -> dict[str, Callable[[str], Any]]:
    return {**_extractors(), **_parsers(), **_rewards()}


class Runaway(Exception):
    pass


def _raise(*_: Any) -> None:
    raise Runaway


def _time(fn: Callable[[str], Any], text: str, reps: int, guard_s: float | None = None) -> float:
    """The least of `reps` CPU times of fn(text); inf when one ran past the guard (GUARD_S)."""
    best = float("inf")
    old = signal.signal(signal.SIGALRM, _raise)
    gc.disable()  # a collection is amortized linear work, but lands on one size's call at random
    try:
        for _ in range(reps):
            signal.setitimer(signal.ITIMER_REAL, guard_s or GUARD_S)
            t0 = time.process_time()  # this process's CPU time: other processes on the machine do not count
            try:
                fn(text)
            except Runaway:
                return float("inf")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            best = min(best, time.process_time() - t0)
            if best > 0.2:  # noise is small next to this; more runs would only add minutes (math-verify's 5 s bound)
                break
    finally:
        gc.enable()
        signal.signal(signal.SIGALRM, old)
    return best


def ran_to_end(fn: Callable[[], Any], guard_s: float = GUARD_S) -> bool:
    """fn() returned before the runaway guard (other tests' check that a red-team input cannot hang)."""
    return _time(lambda _: fn(), "", 1, guard_s) != float("inf")


def _growth(times: list[float]) -> float:
    if float("inf") in times:
        return float("inf")
    return max(times[i + 1] / max(times[i], FLOOR_S) for i in range(len(times) - 1))


def measure(fn: Callable[[str], Any], gen: Callable[[int], str], reps: int = 1) -> list[float]:
    """Times at each size; a size after a runaway is not tried (it would only run longer)."""
    times: list[float] = []
    for n in SIZES:
        text = gen(n)
        t = _time(fn, text, REPS[n] * reps)
        times.append(t)
        if t == float("inf"):
            times += [float("inf")] * (len(SIZES) - len(times))
            break
    return times


def _row(fname: str, gname: str, times: list[float]) -> str:
    cells = " ".join(f"{t * 1e3:>9.2f}" if t != float("inf") else f"{'>' + str(int(GUARD_S)) + 's':>9}" for t in times)
    return f"{fname[:44]:<44} {gname[:30]:<30} {cells} {_growth(times):>7.1f}"


HEADER = f"{'function':<44} {'input':<30} {'1KB ms':>9} {'10KB ms':>9} {'100KB ms':>9} {'growth':>7}"


def check(fname: str, fn: Callable[[str], Any]) -> tuple[list[str], list[str]]:
    """(table rows, failures) for one function over every generator."""
    rows, bad = [], []
    for gname, gen in _generators().items():
        times = measure(fn, gen)
        if _growth(times) > RATIO:  # once more with more repetitions before calling it superlinear
            times = [min(a, b) for a, b in zip(times, measure(fn, gen, reps=3), strict=True)]
        rows.append(_row(fname, gname, times))
        if _growth(times) > RATIO:
            bad.append(rows[-1])
    return rows, bad


FUNCTIONS = functions()


def test_every_text_function_is_enumerated() -> None:
    # the enumeration itself can fail silently: these must be in it
    for key in ("toolgym.envs.verifiers.extract_choice", "toolgym._text.iter_fences", "toolgym.envs.answers.answer_line",
                "parser hermes+python", "parser qwen3_coder", "toolgym.envs.builtin.science_qa.choice_correct",
                "toolgym.envs.builtin.math_tir.correct", "toolgym.envs.core.exact_match", "toolgym.envs.rubric.format_reward",
                "toolgym.envs.judge_prompt.parse_verdict"):
        assert key in FUNCTIONS


# these reach math-verify on the 1 KB inputs (longer answers are not compared): its parses of nested brackets
# take seconds, bounded by its own timeout (and, in a trainer, by the scorer worker's kill)
MATH_VERIFY = ("verifiers.math_equal", "arith.arith_correct", "arith.arith_all_correct", "math_tir.correct")


@pytest.mark.parametrize("fname", [pytest.param(f, marks=pytest.mark.slow) if f.endswith(MATH_VERIFY) else f
                                   for f in sorted(FUNCTIONS)])
def test_time_grows_linearly_on_adversarial_text(fname: str) -> None:
    rows, bad = check(fname, FUNCTIONS[fname])
    print("\n" + HEADER + "\n" + "\n".join(rows))
    assert not bad, "superlinear on adversarial text:\n" + HEADER + "\n" + "\n".join(bad)


if __name__ == "__main__":  # the table: each function's worst input (--all: every input); a NAME part filters
    import sys

    args = sys.argv[1:]
    every = "--all" in args
    only = [a for a in args if not a.startswith("--")]
    print(HEADER)
    for fname, fn in FUNCTIONS.items():
        if only and not any(o in fname for o in only):
            continue
        rows, bad = check(fname, fn)
        shown = rows if every else [max(rows, key=lambda r: float(r.split()[-1]))]
        print("\n".join(shown), flush=True)
