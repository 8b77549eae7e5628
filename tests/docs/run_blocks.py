"""Runs one page's code blocks in order, in the current folder (tests/docs/test_commands.py starts it).

Python blocks share one namespace, as a reader running the page top to bottom would; shell blocks run in bash
with -e -o pipefail. The first failing block ends the run with its page and line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import traceback


def main(path: str) -> int:
    blocks = json.loads(open(path).read())
    namespace: dict = {"__name__": "__main__"}
    for b in blocks:
        where = f"{b['file']}:{b['line']}"
        print(f"\n=== {where} [{b['lang']}]\n{b['code']}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        if b["lang"] == "python":
            try:
                exec(compile(b["code"], where, "exec"), namespace)
            except BaseException:
                traceback.print_exc()
                print(f"FAILED: the Python block at {where}", file=sys.stderr, flush=True)
                return 1
        else:
            sys.stdout.flush()
            rc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", b["code"]]).returncode
            if rc != 0:
                print(f"FAILED: the shell block at {where} exited with {rc}", file=sys.stderr, flush=True)
                return 1
        print(f"=== {where}: ok in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
