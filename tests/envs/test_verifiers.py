"""Verifiers: false-negative traps (equal answers written differently) and false-positive traps."""

from __future__ import annotations

import threading

import pytest

from toolgym.envs.verifiers import (
    choice_equal,
    extract_choice,
    extract_code,
    math_equal,
    normalize_math,
    rg_score,
)

EQUAL = [
    ("\\frac{1}{2}", "0.5"),
    ("0.5", "\\frac{1}{2}"),
    ("1/2", "0.5"),
    ("1/2", "\\frac{1}{2}"),
    ("\\dfrac{1}{2}", "1/2"),
    ("\\frac12", "0.50"),
    ("\\boxed{x=3}", "3"),
    ("x = 3", "3"),
    ("1,000", "1000"),
    ("1{,}000", "1000"),
    ("$1,234.50", "1234.5"),
    ("-3", "-3"),
    ("-\\frac{3}{4}", "-0.75"),
    ("\\boxed{-\\frac{3}{4}}", "-3/4"),
    ("The answer is \\boxed{42}.", "42"),
    ("So the final answer is 42.", "42"),
    ("42 apples", "42"),
    ("18 dollars", "18"),
    ("\\$18", "18"),
    ("5\\text{ cm}", "5"),
    ("10\\%", "10"),
    ("90^\\circ", "90"),
    ("3.0", "3"),
    ("1e3", "1000"),
    ("\\sqrt{2}/2", "\\frac{\\sqrt{2}}{2}"),
    ("x^2+2x+1", "(x+1)^2"),
    ("(0,1]", "(0, 1]"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("\\left( 1, 2 \\right)", "(1,2)"),
    ("\\pi/2", "\\frac{\\pi}{2}"),
    ("<answer>7</answer>", "7"),
    ("0.3333333333", "1/3"),  # within the default relative tolerance of 1e-6
    ("−5", "-5"),  # Unicode minus
    ("Yes", "yes"),
]

NOT_EQUAL = [
    ("-3", "3"),
    ("3", "-3"),
    ("1/2", "2"),
    ("2/1", "1/2"),
    ("0.333", "1/3"),
    ("1,000", "100"),
    ("1000", "100"),
    ("\\boxed{x=3}", "4"),
    ("0.5", "0.51"),
    ("[0,1]", "(0,1)"),
    ("\\{1,2\\}", "\\{1,3\\}"),
    ("x^2+1", "(x+1)^2"),
    ("", "0"),
    ("no answer here at all, just words and more words", "7"),
    ("12", "1,2"),
    ("\\frac{1}{0}", "0"),
    ("no", "yes"),
]


@pytest.mark.parametrize("pred, gold", EQUAL)
def test_math_equal_true(pred, gold):
    assert math_equal(pred, gold), (pred, gold)


@pytest.mark.parametrize("pred, gold", NOT_EQUAL)
def test_math_equal_false(pred, gold):
    assert not math_equal(pred, gold), (pred, gold)


def test_math_equal_none_and_garbage():
    assert not math_equal(None, "1")
    assert not math_equal("1", None)
    assert not math_equal("\\boxed{" * 10000, "1")
    assert not math_equal("x" * (1 << 20), "1")
    assert math_equal(7, "7")


def test_math_equal_tolerance_knob():
    assert not math_equal("3.1416", "3.14159265", rel_tol=1e-9)
    assert math_equal("3.1416", "3.14159265", rel_tol=1e-4)


def test_normalize_math_strips_decoration():
    assert normalize_math("$\\boxed{x = 1,000\\text{ meters}}$.") == "1000"


def test_math_equal_off_the_main_thread():
    """math-verify's alarm-based timeout cannot run off the main thread: the worker process takes over."""
    results = {}

    def work():
        results["sym"] = math_equal("x^2+2x+1", "(x+1)^2")
        results["neg"] = math_equal("x^2+1", "(x+1)^2")
        results["num"] = math_equal("\\frac{1}{2}", "0.5")

    t = threading.Thread(target=work)
    t.start()
    t.join(timeout=120)
    assert results == {"sym": True, "neg": False, "num": True}


LETTERS = [
    ("B", "B"),
    ("b", "B"),
    ("(B)", "B"),
    ("B.", "B"),
    ("B)", "B"),
    ("[B]", "B"),
    ("**B**", "B"),
    ("The answer is (B).", "B"),
    ("The answer is B", "B"),
    ("Answer: B", "B"),
    ("answer: b", "B"),
    ("\\boxed{B}", "B"),
    ("\\boxed{\\text{B}}", "B"),
    ("<answer>B</answer>", "B"),
    ("I'd say the correct option is C because...", "C"),
    ("A good argument: the answer is D.", "D"),
    ("B. Paris", "B"),
    ("Final answer: (A) the mitochondria", "A"),
]


@pytest.mark.parametrize("pred, gold", LETTERS)
def test_choice_equal_true(pred, gold):
    assert choice_equal(pred, gold), pred


@pytest.mark.parametrize(
    "pred, gold",
    [
        ("The answer is (B).", "C"),
        ("A good argument: the answer is D.", "A"),  # the article "A" is not a choice
        ("I am not sure.", "A"),
        ("(A) or (B)", "A"),  # two options, no decision
        ("", "A"),
        ("The answer is E", "A"),
    ],
)
def test_choice_equal_false(pred, gold):
    assert not choice_equal(pred, gold), pred


def test_choice_by_option_text_and_index():
    choices = ["Berlin", "Paris", "Rome", "Madrid"]
    assert choice_equal("The answer is Paris.", "B", choices=choices)
    assert choice_equal("Paris", "B", choices=choices)
    assert not choice_equal("The answer is Rome.", "B", choices=choices)
    assert choice_equal("(B)", 1, choices=choices)
    assert choice_equal("(B)", "Paris", choices=choices)
    assert extract_choice("It must be Madrid, clearly.", choices=choices) == "D"


def test_choice_custom_labels():
    assert extract_choice("Answer: (E)", labels="ABCDE") == "E"
    assert extract_choice("Answer: (E)", labels="ABCD") is None


def test_extract_code_prefers_last_python_block():
    text = "```python\nold\n```\n```\nplain\n```\n```python\nnew\n```"
    assert extract_code(text) == "new\n"
    assert extract_code("```\nonly plain\n```") == "only plain\n"
    assert extract_code("no code") is None
    assert extract_code("<think>```python\nhidden\n```</think>```python\nshown\n```") == "shown\n"


def test_rg_score_never_raises():
    class Boom:
        def score_answer(self, answer, entry):
            raise RuntimeError("bad")

    class Half:
        def score_answer(self, answer, entry):
            return 0.5

    assert rg_score(Boom(), "x", {}) == 0.0
    assert rg_score(Half(), "x", {}) == 0.5


def test_verify_worker_recovers_after_its_process_dies():
    """The off-main-thread worker is restarted when its child interpreter has died."""
    from toolgym.envs.scoring.scorer_worker import worker

    def compare():
        out["v"] = math_equal("2x+2x", "4x")

    out: dict = {}
    t = threading.Thread(target=compare)
    t.start()
    t.join(120)
    assert out["v"] is True
    proc = worker()._proc
    proc.kill()
    proc.wait()
    out.clear()
    t = threading.Thread(target=compare)
    t.start()
    t.join(120)
    assert out["v"] is True and worker()._proc is not proc


def test_a_reply_with_a_long_run_of_spaces_is_read_at_once():
    # red team, issue 36: "I do not know the answer" + 230 spaces + "?" took 7-9 s in _LETTER_PHRASE (about n^4
    # steps, the GIL held, the trainer frozen); at 1,000 spaces about an hour. Now one linear pass.
    from tests.envs.test_linear_time import ran_to_end

    reply = "I do not know the answer" + " " * 1000 + "?"
    assert ran_to_end(lambda: choice_equal(reply, "B"), 5.0)
    assert extract_choice(reply) is None
    assert extract_choice("The answer" + " " * 1000 + "is :  option   (C)") == "C"  # the blanks still allowed
    assert extract_choice("answer would be choice: B.") == "B"


def test_an_answer_line_and_an_assignment_with_long_blank_runs_are_linear():
    from tests.envs.test_linear_time import ran_to_end

    assert ran_to_end(lambda: math_equal("x = " + " " * 50_000 + "=", "5"), 5.0)
    assert normalize_math("x =   7") == "7"
    assert ran_to_end(lambda: math_equal("The final answer is" + " " * 50_000, "5"), 5.0)
    assert math_equal("The final answer is   \n  42", "42")
