"""Answer checkers. False negatives poison training, so every checker normalizes generously
(boxes, fractions, separators, units, letters in many formats) and false positives are tested too.

`math_equal` tries an exact numeric comparison first and falls back to math-verify (+ sympy).
math-verify's timeout uses signal.alarm, which only works in the main thread: off the main
thread the check runs in the scorer worker (`toolgym.envs.scoring.scorer_worker`), a child interpreter
killed past its deadline.
"""

from __future__ import annotations

import math
import re
import threading
from fractions import Fraction
from typing import Any

from toolgym._text import extract_code as _extract_code
from toolgym.envs.answers import MAX_ANSWER_CHARS, extract_answer, last_boxed

__all__ = ["math_equal", "choice_equal", "extract_choice", "normalize_math", "extract_code", "rg_score"]

# ----------------------------------------------------------------------------------- math

_UNIT_WORDS = (
    r"dollars?|cents?|units?|meters?|metres?|cm|km|mm|m|kg|g|grams?|pounds?|lbs?|miles?|feet|foot|ft|inches|inch|"
    r"hours?|hrs?|minutes?|mins?|seconds?|secs?|s|days?|weeks?|months?|years?|degrees?|people|students?|"
    r"apples?|items?|points?|percent|marbles?|cookies?|books?|pages?|liters?|litres?|ml|gallons?|ounces?|oz|sq|square"
)
_TRAILING_UNITS = re.compile(rf"^(?P<num>-?[\d.,/]+)\s*(?:(?:{_UNIT_WORDS})\b\.?\s*)+$", re.IGNORECASE)
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_ASSIGN = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\s*=\s*(?P<rhs>[^=<>\s][^=<>]*)$")  # rhs starts past the blanks
_TEXT_CMD = re.compile(r"\\(?:text|textbf|mathrm|mbox|textrm|operatorname)\s*\{([^{}]*)\}")


def _strip_wrappers(s: str) -> str:
    s = s.strip()
    for a, b in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(a) and s.endswith(b) and len(s) >= len(a) + len(b):
            s = s[len(a) : len(s) - len(b)].strip()
    return s


def normalize_math(s: Any) -> str:
    """A canonical string for an answer: boxed content, no $ or spacing macros, units and `x =` dropped."""
    s = "" if s is None else str(s)
    boxed = last_boxed(s)
    if boxed is not None:
        s = boxed
    elif len(s) > 40 or "answer" in s.lower() or "<answer>" in s:
        s = extract_answer(s) or s
    if len(s) > MAX_ANSWER_CHARS:  # no answer was found in a long message: nothing to normalize
        return s.strip()
    s = _strip_wrappers(s)
    for a, b in (("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\left", ""), ("\\right", ""), ("\\!", ""),
                 ("\\,", ""), ("\\;", ""), ("\\:", ""), ("\\ ", " "), ("{,}", ","), ("\\displaystyle", ""),
                 ("^\\circ", ""), ("^{\\circ}", ""), ("°", ""), ("\\%", "%"), ("\\$", ""), ("−", "-")):
        s = s.replace(a, b)
    s = _TEXT_CMD.sub(lambda m: " " + m.group(1) + " ", s).strip()
    s = s.rstrip(".").strip()
    m = _ASSIGN.match(s)
    if m:
        s = m.group("rhs").strip()
    if s.startswith("$"):
        s = s[1:].strip()
    if s.endswith("%"):
        s = s[:-1].strip()
    m = _TRAILING_UNITS.match(s)
    if m:
        s = m.group("num")
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    return s.strip()


_FRAC = re.compile(r"^(-?)\\frac\s*\{\s*(-?\d+)\s*\}\s*\{\s*(-?\d+)\s*\}$|^(-?)\\frac(\d)(\d)$")
_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")
_SLASH = re.compile(r"^([+-]?\d+)\s*/\s*([+-]?\d+)$")


def _as_number(s: str) -> Fraction | float | None:
    """An exact number for plain numeric forms (ints, decimals, a/b, \\frac{a}{b}); None otherwise."""
    s = s.replace(" ", "")
    if not s or len(s) > 200:
        return None
    try:
        if _NUMBER.match(s):
            return Fraction(s) if "e" not in s.lower() else float(s)
        m = _SLASH.match(s)
        if m and int(m.group(2)) != 0:
            return Fraction(int(m.group(1)), int(m.group(2)))
        m = _FRAC.match(s)
        if m:
            if m.group(2) is not None:
                sign, a, b = m.group(1), int(m.group(2)), int(m.group(3))
            else:
                sign, a, b = m.group(4), int(m.group(5)), int(m.group(6))
            if b == 0:
                return None
            v = Fraction(a, b)
            return -v if sign == "-" else v
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return None


def _numbers_close(a: Fraction | float, b: Fraction | float, rel_tol: float) -> bool:
    if isinstance(a, Fraction) and isinstance(b, Fraction) and a == b:
        return True
    try:
        fa, fb = float(a), float(b)
    except OverflowError:
        return False
    return math.isclose(fa, fb, rel_tol=rel_tol, abs_tol=1e-12)


def _mv_compare(gold: str, pred: str, timeout_s: int) -> bool:
    """math-verify on two normalized answers. Uses signal.alarm when timeout_s > 0 (main thread only)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    t = timeout_s if timeout_s > 0 else None
    configs = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    try:
        g = parse("\\boxed{" + gold + "}", extraction_config=configs, parsing_timeout=t)
        p = parse("\\boxed{" + pred + "}", extraction_config=configs, parsing_timeout=t)
        if not g or not p:
            return False
        return bool(verify(g, p, float_rounding=6, timeout_seconds=t))
    except Exception:  # math-verify raises on pathological input; a failed check is "not equal"
        return False


def _mv_load() -> None:
    """Import math-verify (the scorer worker's setup for `_mv_compare`: its import is not an answer's time)."""
    import math_verify  # noqa: F401


_MV_SLACK_S = 10.0  # math-verify's own alarms end a comparison at timeout_s; the worker's kill is the backstop


def math_equal(pred: Any, gold: Any, *, rel_tol: float = 1e-6, timeout_s: int = 5) -> bool:
    """True when `pred` (an answer or a whole model message) states the same value as `gold`.

    Numbers compare exactly when both are exact (ints, decimals, a/b, \\frac) and within
    `rel_tol` otherwise; everything else (expressions, intervals, sets, tuples) goes to math-verify.
    """
    if pred is None or gold is None:
        return False
    p, g = normalize_math(pred), normalize_math(gold)
    if not p or not g:
        return False
    if p == g or (p.replace(" ", "").isalpha() and p.lower() == g.lower()):  # "Yes" / "yes"
        return True
    pn, gn = _as_number(p), _as_number(g)
    if pn is not None and gn is not None:
        return _numbers_close(pn, gn, rel_tol)
    if len(p) > 1000 or len(g) > 1000:
        return False
    if threading.current_thread() is threading.main_thread():
        return _mv_compare(g, p, timeout_s)
    from toolgym.envs.scoring import ScorerFailed, ScorerTimeout, worker

    try:
        return bool(worker().call(f"{__name__}:_mv_compare", [g, p, max(1, int(timeout_s))],
                                  deadline_s=timeout_s + _MV_SLACK_S, setup=(f"{__name__}:_mv_load", [], 120.0)))
    except (ScorerTimeout, ScorerFailed):  # a comparison that overran or crashed its worker is "not equal"
        return False


# ---------------------------------------------------------------------------- multiple choice

_LETTER_ONLY = re.compile(r"^[\s(\[{*_]*\(?([A-Za-z])\)?[\s)\]}.:*_]*$")
_LETTER_LEAD = re.compile(r"^[\s*_]*[(\[]?([A-Z])[)\].:][\s*_]")
# "answer", then blanks and colons, "is" / "would be", "option" / "choice", each followed by its own run of
# blanks and colons: every run is followed by a non-blank, so no two runs can trade characters (the old
# four adjacent `\s*` backtracked in about n^4 steps on "the answer" + 230 spaces + "?")
_LETTER_PHRASE = re.compile(
    r"(?:answer|option|choice)[\s:]*(?:(?:is|would be)[\s:]*)?(?:(?:option|choice)[\s:]*)?[(\[*]*([A-Z])\b(?![a-z'])",
    re.IGNORECASE,
)
_PAREN_LETTER = re.compile(r"\(([A-Z])\)")
_LONE_LETTER = re.compile(r"(?<![A-Za-z'’-])([A-Z])(?![A-Za-z'’-])")


def _norm_text(s: str) -> str:
    return re.sub(r"[\s.,;:!?*_`\"']+", " ", s).strip().lower()


def extract_choice(text: Any, labels: list[str] | str | None = None, choices: list[str] | None = None) -> str | None:
    """The option letter a model chose, or None when it names none (or several without an answer marker)."""
    if text is None:
        return None
    text = str(text)
    labels = list(labels) if labels else [chr(ord("A") + i) for i in range(len(choices) if choices else 4)]
    label_set = set(labels)
    stated = extract_answer(text)
    candidates = [stated, text[-5000:]] if stated else [text[-5000:]]
    for pos, s in enumerate(candidates):
        s = _strip_wrappers(s)
        s = _TEXT_CMD.sub(lambda m: m.group(1), s)
        m = _LETTER_ONLY.match(s)
        if m and m.group(1).upper() in label_set:
            return m.group(1).upper()
        m = _LETTER_LEAD.match(s)
        if m and m.group(1) in label_set and {h for h in _PAREN_LETTER.findall(s) if h in label_set} <= {m.group(1)}:
            return m.group(1)
        if choices:
            ns = _norm_text(s)
            for lab, ch in zip(labels, choices, strict=False):
                if ns and ns == _norm_text(str(ch)):
                    return lab
        hits = [m.group(1).upper() for m in _LETTER_PHRASE.finditer(s)]
        hits = [h for h in hits if h in label_set]
        if hits:
            return hits[-1]
        hits = [h for h in _PAREN_LETTER.findall(s) if h in label_set]
        if hits and len(set(hits)) == 1:
            return hits[-1]
        if pos == 0 and stated is not None:
            lone = {h for h in _LONE_LETTER.findall(s) if h in label_set}
            if len(lone) == 1:
                return lone.pop()
    if choices:  # the text names exactly one option's full text
        nt = _norm_text(text[-5000:])
        found = [lab for lab, ch in zip(labels, choices, strict=False) if len(_norm_text(str(ch))) > 3 and _norm_text(str(ch)) in nt]
        if len(found) == 1:
            return found[0]
    return None


def choice_equal(
    pred: Any, gold: Any, *, labels: list[str] | str | None = None, choices: list[str] | None = None
) -> bool:
    """True when the model's chosen option (letter in any common format, or the option text) is `gold`.

    `gold` may be a letter, an index into `choices`, or the option text.
    """
    if pred is None or gold is None:
        return False
    labs = list(labels) if labels else None
    if isinstance(gold, int) and not isinstance(gold, bool):
        if labs is None:
            labs = [chr(ord("A") + i) for i in range(max(len(choices or []), gold + 1, 4))]
        if not 0 <= gold < len(labs):
            return False
        gold_letter = labs[gold]
    else:
        g = str(gold).strip()
        letter = extract_choice(g, labels=labs or [chr(ord("A") + i) for i in range(26)]) if len(g) <= 4 else None
        if letter is not None:
            gold_letter = letter
        elif choices and _norm_text(g) in [_norm_text(str(c)) for c in choices]:
            idx = [_norm_text(str(c)) for c in choices].index(_norm_text(g))
            gold_letter = (labs or [chr(ord("A") + i) for i in range(len(choices))])[idx]
        else:
            return False
    if labs is None:
        n = max(len(choices or []), ord(gold_letter) - ord("A") + 1, 4)
        labs = [chr(ord("A") + i) for i in range(n)]
    return extract_choice(pred, labels=labs, choices=choices) == gold_letter


# --------------------------------------------------------------------------------- code, rg

def extract_code(text: Any, language: str = "python") -> str | None:
    """The last fenced code block outside <think> (preferring blocks tagged `language`), or None."""
    if not isinstance(text, str):
        return None
    from toolgym.envs.parsing import strip_thinking

    return _extract_code(strip_thinking(text), language)


def rg_score(dataset: Any, answer: str | None, entry: dict[str, Any]) -> float:
    """A reasoning-gym dataset's own scorer, clipped to [0, 1]; any exception scores 0.

    The scorer runs in the calling process, under `scorer_guard.guarded()`: one that tries to
    execute the answer (some `eval()` it or hand it to sympy's `parse_expr`) or to act on the host
    raises `ScorerRefused` (the answer scores 0, and the rubric reports why), whatever the scorer
    returned. The guard cannot stop a C call that holds the GIL, so toolgym calls this only inside
    the scorer worker (`toolgym.envs.scoring.scorer_worker`, through `builtin.reasoning_gym.rg_reward`), never
    in a trainer."""
    from toolgym.envs.scoring import ScorerRefused, guarded

    with guarded() as guard:
        try:
            v = float(dataset.score_answer(answer=answer, entry=entry))
        except Exception:  # a scorer's own failure scores 0; a refusal is read from the guard below
            v = 0.0
    if guard.tripped is not None:
        raise ScorerRefused(f"the {type(dataset).__name__} scorer tried {guard.tripped} on the answer; scored 0")
    if math.isnan(v):
        return 0.0
    return min(1.0, max(0.0, v))
