"""Renew tests/durations.json from a pytest run's ``--durations=0`` report, so the fast tier
(``pytest -m "not slow"``) leaves out what the last full run measured as slow.

    .venv/bin/python -m pytest -q --durations=0 | tee run.log
    .venv/bin/python scripts/test_durations.py run.log
"""

from __future__ import annotations

import collections
import datetime
import json
import re
import sys
from pathlib import Path

LINE = re.compile(r"^([\d.]+)s (setup|call|teardown)\s+(.+?)\s*$")
OUT = Path(__file__).resolve().parents[1] / "tests" / "durations.json"


def parse(lines: list[str]) -> dict[str, float]:
    """Each test's setup + call + teardown seconds."""
    seconds: dict[str, float] = collections.defaultdict(float)
    for line in lines:
        m = LINE.match(line)
        if m:
            seconds[m.group(3)] += float(m.group(1))
    return {k: round(v, 2) for k, v in sorted(seconds.items())}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: test_durations.py PYTEST_LOG (a run with --durations=0)", file=sys.stderr)
        return 2
    seconds = parse(Path(argv[0]).read_text(errors="replace").splitlines())
    if not seconds:
        print(f"{argv[0]}: no duration lines (run pytest with --durations=0)", file=sys.stderr)
        return 1
    OUT.write_text(json.dumps({"measured": datetime.date.today().isoformat(), "seconds": seconds}, indent=0) + "\n")
    print(f"{OUT}: {len(seconds)} tests, {sum(seconds.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
