"""Final-answer detection: `<answer>...</answer>`, `\\boxed{...}`, and "Answer: ..." lines.

Scans from the end with str.rfind, a brace counter and one regular expression without overlapping
quantifiers, so any input is linear and safe; each finder reads a bounded tail of the text
(`<answer>` and `\\boxed` the last MAX_SCAN_CHARS, "Answer:" lines the last 20,000 characters).
"""

from __future__ import annotations

import re

from toolgym._text import MAX_ANSWER_CHARS, MAX_SCAN_CHARS, last_boxed

__all__ = ["MAX_ANSWER_CHARS", "answer_line", "extract_answer", "last_boxed", "tagged_answer"]

# no two adjacent quantifiers match the same character (the blanks after "is" and after the colon
# used to be two runs that could trade spaces): one run of blanks, then "is" and/or a colon
_ANSWER_LINE = re.compile(
    r"\b(?:final\s+answer|answer)\b\**\s*(?:is\b\s*(?:[:：][ \t]*)?|[:：][ \t]*)(?P<ans>[^\n]{1,300})",
    re.IGNORECASE,
)


def tagged_answer(text: str) -> str | None:
    """Content of the last `<answer>...</answer>`; an unclosed last tag runs to the end of the text
    (a stop sequence on `</answer>` removes the closing tag)."""
    text = text[-MAX_SCAN_CHARS:]
    i = text.rfind("<answer>")
    if i == -1:
        return None
    body = text[i + len("<answer>") :]
    j = body.find("</answer>")
    if j != -1:
        body = body[:j]
    body = body.strip()
    return body[:MAX_ANSWER_CHARS] if body else None


def answer_line(text: str) -> str | None:
    """The value after the last "answer is" / "Answer:" phrase, trimmed of markdown and a final period."""
    tail = text[-20000:]
    last = None
    for m in _ANSWER_LINE.finditer(tail):
        last = m
    if last is None:
        return None
    ans = last.group("ans").strip().strip("*").strip()
    ans = ans.rstrip(".").strip().strip("*").strip()
    if ans.startswith("$") and ans.endswith("$") and len(ans) > 1:
        ans = ans.strip("$").strip()
    return ans or None


def extract_answer(text: str) -> str | None:
    """The model's final answer, or None when the message states none."""
    if not isinstance(text, str) or not text:
        return None
    for finder in (tagged_answer, last_boxed, answer_line):
        ans = finder(text)
        if ans:
            return ans
    return None
