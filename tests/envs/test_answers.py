"""Final-answer detection."""

from __future__ import annotations

import pytest

from toolgym.envs.answers import extract_answer, last_boxed


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so \\boxed{42}.", "42"),
        ("\\boxed{\\frac{1}{2}} and later \\boxed{3}", "3"),
        ("nested \\boxed{\\{1, \\{2\\}\\}}", "\\{1, \\{2\\}\\}"),
        ("\\boxed{x=3}", "x=3"),
        ("\\fbox{7}", "7"),
        ("\\boxed 5", "5"),
        ("<answer> 12 </answer>", "12"),
        ("<answer>first</answer> ... <answer>second</answer>", "second"),
        ("<answer>B", "B"),  # a stop sequence removed the closing tag
        ("Final answer: 17", "17"),
        ("The answer is 1,000.", "1,000"),
        ("**Answer:** C", "C"),
        ("The final answer is $\\frac{3}{4}$.", "\\frac{3}{4}"),
        ("Answer: first\nthen Answer: second", "second"),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "Let me answer this carefully", "\\boxed{unclosed", "I answered the call", "no marker at all 42"],
)
def test_no_answer(text):
    assert extract_answer(text) is None


def test_answer_tag_beats_boxed():
    assert extract_answer("\\boxed{1} <answer>2</answer>") == "2"


def test_hostile_boxes_do_not_hang():
    assert last_boxed("\\boxed{" * 50000) is None
    assert extract_answer("{" * 100000 + "\\boxed{1}") == "1"
