"""The one boxed extractor and the one code extractor that assets, environments and suites share."""

from __future__ import annotations

import pytest

from toolgym._text import extract_code, iter_fences, last_boxed
from toolgym.envs.answers import extract_answer as extract_final_answer
from toolgym.envs.parsing import PythonBlockParser
from toolgym.envs.tasks.code_task import extract_program
from toolgym.envs.verifiers import extract_code as env_extract_code


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so \\boxed{42}.", "42"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces
        ("\\boxed{1} then \\boxed{2}", "2"),  # the last one
        ("\\boxed{ 7 }", "7"),
        ("\\fbox{x+1}", "x+1"),
        ("\\boxed 5 and more", "5"),
        ("\\boxed {5}", "5"),  # a space before the brace (the old env copy read "{5}")
        ("\\boxed{3} and an unclosed \\boxed{4", "3"),  # the old asset copy gave None
        ("\\boxed{}", ""),
        ("no box", None),
        ("\\boxed{unclosed", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


def test_one_boxed_extractor_everywhere():
    # the suites once fell back to their own copy; now they read exactly what the environments read
    assert extract_final_answer("work \\boxed{\\{1, 2\\}} done") == "\\{1, 2\\}"
    assert extract_final_answer("\\boxed {5}") == "5"


def test_fences_pair_openings_with_closings():
    text = "```bash\nls\n```\nmid\n```python\nx = 1\n```output\n1\n```\n```py\nopen"
    assert [(f.lang, f.body, f.closed) for f in iter_fences(text)] == [
        ("bash", "ls\n", True), ("python", "x = 1\n", True), ("output", "1\n", True), ("py", "open", False)]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a\n```python\nx = 1\n```\nb\n```python\ny = 2\n```", "y = 2\n"),  # the last python block
        ("```Python\nz = 3\n```", "z = 3\n"),  # any case
        ("```\nplain\n```", "plain\n"),
        # a bash block's closing fence is not an opening (the old suites regex returned "Then:\n")
        ("Run:\n```bash\npip install x\n```\nThen:\n```python\nprint(1)\n```\n", "print(1)\n"),
        # a tagged block beats a later untagged output block (the old suites copy returned "1\n")
        ("```python\nprint(1)\n```\nOutput:\n```\n1\n```", "print(1)\n"),
        ("```python\n\n```\n```python\nkept\n```\n```python\n  \n```", "kept\n"),  # empty blocks skipped
        ("no code", None),
        ("```python\nunclosed", None),
    ],
)
def test_extract_code(text, expected):
    assert extract_code(text) == expected


def test_extract_code_prefers_the_block_defining_the_entry_point():
    usage = "```python\ndef f(a):\n    return a\n```\nExample usage:\n```python\nprint(f(1))\n```"
    assert extract_code(usage, entry_point="f") == "def f(a):\n    return a\n"
    assert extract_code(usage) == "print(f(1))\n"
    assert extract_code("```js\nx\n```\n```python\ny\n```", language="js") == "x\n"


def test_env_and_suite_read_the_same_program():
    text = "Run:\n```bash\npip install x\n```\n```python\ndef g():\n    return 2\n```\n```\n2\n```"
    assert env_extract_code(text) == extract_program(text) == "def g():\n    return 2\n"
    assert extract_program("```python\nprint(1)") == "print(1)"  # the suite's fallbacks stay
    assert extract_program("print(2)") == "print(2)"


def test_python_block_parser_uses_the_same_fences():
    calls = PythonBlockParser().parse("```python\nx = 2\n```output\n2\n```\n```py\nprint(3)\n```").calls
    assert [c.arguments["code"] for c in calls] == ["x = 2\n", "print(3)\n"]


def test_hostile_text_is_linear():
    assert last_boxed("\\boxed{" * 50000) is None
    assert extract_code("```python\n" * 20000) is None


def test_a_fence_followed_by_a_long_run_of_blanks_is_linear():
    # red team, issue 36: "```" + 30,000 spaces and no newline froze the event loop 2.2 s (_FENCE_OPEN backtracked
    # quadratically); 300,000 spaces took minutes. The tag between blanks is still read.
    from tests.envs.test_linear_time import ran_to_end

    assert ran_to_end(lambda: list(iter_fences("```" + " " * 300_000)), 5.0)
    assert ran_to_end(lambda: extract_code("```\t" + "\t" * 300_000 + "py"), 5.0)
    assert [(f.lang, f.body) for f in iter_fences("``` \t Python \t\nx = 1\n```")] == [("python", "x = 1\n")]
    assert [f.lang for f in iter_fences("```\nx\n```")] == [""]


def test_extractors_read_a_bounded_tail():
    from toolgym._text import MAX_ANSWER_CHARS, MAX_SCAN_CHARS

    assert last_boxed("\\boxed{1}" + " " * MAX_SCAN_CHARS) is None  # past the scanned tail
    assert last_boxed("\\boxed{" + "7" * (3 * MAX_ANSWER_CHARS) + "}") == "7" * MAX_ANSWER_CHARS
