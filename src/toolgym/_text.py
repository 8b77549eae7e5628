"""Text extractors every layer shares: the last `\\boxed{...}` and fenced code blocks.

Why here: the asset builders (the lowest layer) read MATH answers with the same boxed extractor that
the environments and suites grade with, so it sits below them all. Standard library only; each scan
is linear (str.find/rfind, one brace pass, and regular expressions in which no two adjacent
quantifiers can match the same character), so hostile model text cannot make it hang, and each
reads at most the last MAX_SCAN_CHARS characters (an answer and the submitted program come last).
tests/envs/test_linear_time.py drives every extractor with adversarial text at 1, 10 and 100 KB.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

MAX_ANSWER_CHARS = 2000
MAX_SCAN_CHARS = 1 << 18  # 262,144 characters (about 64K tokens): more than any reply a sampler returns
_BARE = re.compile(r"[ \t]+([^\s$]+)")
# "```", an optional tag, the newline: the tag must start with a non-blank, so the two runs of blanks
# cannot trade characters (the old `[ \t]*([...]*)[ \t]*` backtracked quadratically on "```" + spaces)
_FENCE_OPEN = re.compile(r"```[ \t]*(?:([A-Za-z0-9_+-]+)[ \t]*)?\n")
_BRACE = re.compile(r"[{}]")
PYTHON_TAGS = ("python", "py", "python3")


def _brace_matches(text: str) -> dict[int, int]:
    """Position of each '{' -> position of its matching '}', in one linear pass over the braces."""
    stack: list[int] = []
    match: dict[int, int] = {}
    for m in _BRACE.finditer(text):
        i = m.start()
        if text[i] == "{":
            stack.append(i)
        elif stack:
            match[stack.pop()] = i
    return match


def last_boxed(text: str) -> str | None:
    """Content of the last complete `\\boxed{...}` / `\\fbox{...}` (nested braces, spaces before the
    brace allowed) or bare `\\boxed 5`; an unclosed last box falls back to the one before it. Reads the
    last MAX_SCAN_CHARS characters; the content is cut to MAX_ANSWER_CHARS."""
    text = text[-MAX_SCAN_CHARS:]
    if "\\boxed" not in text and "\\fbox" not in text:
        return None
    match: dict[int, int] | None = None
    best: tuple[int, str] | None = None
    for macro in ("\\boxed", "\\fbox"):
        pos = len(text)
        while True:
            i = text.rfind(macro, 0, pos)
            if i == -1 or (best is not None and i < best[0]):
                break
            j = i + len(macro)
            k = j
            while k < len(text) and k - j < MAX_ANSWER_CHARS and text[k] in " \t":
                k += 1
            if k < len(text) and text[k] == "{":
                if match is None:
                    match = _brace_matches(text)
                close = match.get(k)
                if close is not None:
                    best = (i, text[k + 1 : close])
                    break
            elif k > j:
                m = _BARE.match(text[j : j + MAX_ANSWER_CHARS])
                if m:
                    best = (i, m.group(1))
                    break
            pos = i
    return None if best is None else best[1].strip()[:MAX_ANSWER_CHARS]


@dataclass(frozen=True)
class Fence:
    """One fenced block: its tag (lower-cased, "" when untagged), body, and whether it was closed."""

    lang: str
    body: str
    closed: bool


def iter_fences(text: str) -> Iterator[Fence]:
    """The ``` blocks of text in order, each opening paired with the next closing (a closing fence
    with a tag glued to it, as in "```output", also opens the next block); an unclosed last block
    is yielded with closed=False and runs to the end of the text. Reads the last MAX_SCAN_CHARS characters."""
    text = text[-MAX_SCAN_CHARS:]
    pos = 0
    while True:
        m = _FENCE_OPEN.search(text, pos)
        if m is None:
            return
        end = text.find("```", m.end())
        if end == -1:
            yield Fence((m.group(1) or "").lower(), text[m.end() :], False)
            return
        yield Fence((m.group(1) or "").lower(), text[m.end() : end], True)
        glued = _FENCE_OPEN.match(text, end)  # "```output\n" right after a close: it also opens a block
        pos = end if glued and glued.group(1) else end + 3


def extract_code(text: str, language: str = "python", entry_point: str = "") -> str | None:
    """The submitted program: among closed non-empty blocks tagged `language` (python: also py,
    python3, any case) or untagged, the last that defines `entry_point` (or a class); else the last
    tagged one; else the last untagged one; None when there is none. Models often follow the
    solution with an "example usage" block or an untagged output block."""
    tags = PYTHON_TAGS if language == "python" else (language.lower(),)
    blocks = [(f.lang, f.body) for f in iter_fences(text) if f.closed and f.body.strip() and f.lang in tags + ("",)]
    if entry_point:
        pat = re.compile(rf"(def\s+{re.escape(entry_point)}\s*\(|^class\s+\w+)", re.MULTILINE)
        defining = [b for _, b in blocks if pat.search(b)]
        if defining:
            return defining[-1]
    tagged = [b for lang, b in blocks if lang]
    if tagged:
        return tagged[-1]
    plain = [b for lang, b in blocks if not lang]
    return plain[-1] if plain else None


# C0 controls but \t and \n, DEL, and C1: ESC opens cursor moves, erases, window titles and OSC 52
# clipboard writes; 0x9b (CSI) and 0x9d (OSC) open them alone on terminals that read 8-bit controls
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), *range(0x7F, 0xA0)) if c not in (0x09, 0x0A)}


def printable(text: str) -> str:
    """`text` safe to print on a terminal: every control character but tab and newline (ESC, BEL, CR,
    backspace, DEL, the C1 range) written out as a visible `\\xNN`, so model or program text can neither
    drive the terminal nor forge or hide a line; printable text, tabs and newlines stay as they are."""
    return text.translate(_CONTROLS)
