"""Task families: one module each (its record parser, its prompts for each use, what its tasks are, so how they
are graded, and which assets or local files hold them), ending in one :func:`~toolgym.envs.tasks.family.register_family`
call. Environments and suites find a family by its source string (:mod:`toolgym.envs.tasks.catalog`).
The environments themselves are in :mod:`toolgym.envs.builtin`."""

from toolgym._moved import alias_modules

# old import paths: the environment classes and their helpers lived here
alias_modules({f"toolgym.envs.tasks.{old}": f"toolgym.envs.builtin.{new}" for old, new in {
    "math_tir": "math_tir", "code_contest": "code_contest", "science_qa": "science_qa",
    "reasoning_gym": "reasoning_gym", "arith": "arith", "run_tests": "run_tests",
    "_code": "code_records", "_common": "datasets"}.items()})
