"""Kattis / ICPC problem packages as code-suite tasks (`kattis:PATH` sources).

PATH is one package folder or a folder of them (see `toolgym.envs.kattis` for the format). Each
problem becomes a stdio EvalTask judged on its samples and secret tests with the package's own
output validator (or Kattis's default one with its flags), time and memory limits. A malformed
package is skipped with one line naming the file (logged, and returned by `load_kattis_report`);
the other packages load.
"""

from __future__ import annotations

from pathlib import Path

from toolgym.envs.kattis import KattisProblem, load_packages
from toolgym.errors import AssetError, ConfigError
from toolgym.suites.eval_task import CodeTest, EvalTask

DEFAULT_TIME_LIMIT_S = 2.0  # for packages that state none (the legacy format derives it from its solutions)


def kattis_task(problem: KattisProblem, default_time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> EvalTask:
    opts = problem.judge_options()
    time_limit = float(opts.pop("time_limit_s", default_time_limit_s))
    return EvalTask(
        id=problem.id, kind="code", prompt=problem.prompt(), test_mode="stdio", time_limit_s=time_limit,
        tests=[CodeTest(input=t.input, output=t.answer) for t in problem.tests()], judge_options=opts,
        metadata={"dataset": "kattis", "name": problem.name, "type": problem.type,
                  "interactive": problem.interactive, "samples": len(problem.samples)},
    )


def load_kattis_report(path: str | Path, default_time_limit_s: float = DEFAULT_TIME_LIMIT_S
                       ) -> tuple[list[EvalTask], list[str]]:
    """Tasks of every well-formed package under `path`, and one line per malformed package."""
    try:
        problems, errors = load_packages(path)
    except ConfigError as exc:  # no such folder, or no package in it
        raise AssetError(str(exc)) from None
    return [kattis_task(p, default_time_limit_s) for p in problems], errors


def load_kattis(path: str | Path, default_time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> list[EvalTask]:
    """Tasks of the packages under `path`; AssetError when not one of them is well-formed."""
    tasks, errors = load_kattis_report(path, default_time_limit_s)
    if not tasks:
        raise AssetError(f"{path}: no well-formed Kattis problem package ({len(errors)} malformed: "
                         f"{errors[0] if errors else 'none found'})")
    return tasks
