"""The built-in suites, imported when one is first named (toolgym.suites.registry.SUITES)."""

from __future__ import annotations

from toolgym.envs.tasks.multiple_choice import MMLU_STEM
from toolgym.suites.registry import CODE_ENV, MATH_ENV, SCIENCE_ENV, Suite, SuiteEntry

SCIENCE = Suite("science", [
    SuiteEntry("arc_challenge", SCIENCE_ENV, "asset:arc_challenge", "acc_norm"),
    SuiteEntry("arc_easy", SCIENCE_ENV, "asset:arc_easy", "acc_norm"),
    SuiteEntry("mmlu_stem", SCIENCE_ENV, "asset:mmlu", "acc", options={"subjects": list(MMLU_STEM)}),
    SuiteEntry("sciq", SCIENCE_ENV, "asset:sciq", "acc_norm"),
    SuiteEntry("openbookqa", SCIENCE_ENV, "asset:openbookqa", "acc_norm"),
    SuiteEntry("gpqa_diamond", SCIENCE_ENV, "gpqa:$TOOLGYM_GPQA_CSV", "acc", optional=True),
], "Science QA: ARC, MMLU STEM, SciQ, OpenBookQA; GPQA-Diamond when $TOOLGYM_GPQA_CSV is set.")
CODE = Suite("code", [
    SuiteEntry("humaneval", CODE_ENV, "asset:humaneval", "pass@1"),
    SuiteEntry("mbpp", CODE_ENV, "asset:mbpp", "pass@1"),
    SuiteEntry("leetcode", CODE_ENV, "asset:leetcode", "pass@1", optional=True),
    SuiteEntry("livecodebench", CODE_ENV, "livecodebench:$TOOLGYM_LCB_DIR", "pass@1", optional=True),
    SuiteEntry("codecontests", CODE_ENV, "codecontests:$TOOLGYM_CODECONTESTS", "pass@1", optional=True),
    SuiteEntry("kattis", CODE_ENV, "kattis:$TOOLGYM_KATTIS_DIR", "pass@1", optional=True),
], "Code: HumanEval, MBPP, LeetCode; LiveCodeBench / CodeContests / Kattis packages from local files when "
   "configured.")
MATH = Suite("math", [
    SuiteEntry("gsm8k", MATH_ENV, "asset:gsm8k", "pass@1"),
    SuiteEntry("math500", MATH_ENV, "asset:math500", "pass@1"),
    SuiteEntry("aime", MATH_ENV, "aime:$TOOLGYM_AIME_JSONL", "avg@1", optional=True),
], "Math: GSM8K, MATH-500; AIME when $TOOLGYM_AIME_JSONL is set.")
