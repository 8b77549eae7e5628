"""The judge's verdicts (see harness.py): how a test's output is compared with the expected one (exact,
tokens, floats within a tolerance, a custom checker, a Kattis validator), how a crash is named, and when
two values of function mode are equal. Stdlib only; runs in the harness."""

import json
import os
import signal
import time

import kattis_validation
from common import EVAL_UID
from judge_procs import Run

EXCERPT = 160


def excerpt(text, limit=EXCERPT):
    if text is None:
        return None
    return text if len(text) <= limit else text[:limit] + "..."


class Checks:
    """The harness's verdicts, as a part of it (class Harness)."""

    def crash_verdict(self, run, status, stderr_text, pid=None):
        """Verdict for a program run that did not end normally; None if it ended normally."""
        if run.timed_out:
            return "TLE", f"time limit exceeded ({self.limit_s:.2f}s)"
        if run.over is not None and run.over.endswith(("stdout", "stderr")):
            return "OLE", f"output limit exceeded ({self.output_bytes} bytes)"
        if status is None or status < 0:
            return "RE", "the program ended abnormally"
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        if sig == signal.SIGXCPU:
            return "TLE", "CPU time limit exceeded"
        if "MemoryError" in stderr_text[-2000:] or "bad_alloc" in stderr_text[-2000:]:
            return "MLE", f"memory limit exceeded ({self.memory_mb} MiB)"
        if sig == signal.SIGKILL and pid in run.killed:
            return "RE", "the program broke off the test (its call channel ended)"
        if sig == signal.SIGKILL:
            return "MLE", "killed (likely out of memory)"
        if sig is not None:
            return "RE", f"killed by signal {sig}"
        code = os.WEXITSTATUS(status)
        if code != 0:
            return "RE", f"exit code {code}: {excerpt(stderr_text.strip()[-300:])}"
        return None

    # ---- checkers ------------------------------------------------------------------
    def compare(self, inp, expected, got):
        kind = self.spec["checker"]
        if kind == "exact":
            if got == expected:
                return True, ""
            return False, self.first_diff(expected.split("\n"), got.split("\n"), "line")
        if kind == "custom":
            return self.custom_check(inp, expected, got)
        if kind == "kattis":
            return kattis_validation.compare_default(expected, got, self.spec["kattis_flags"])
        if kind == "validator":
            return kattis_validation.validate(self, self.validator, {"input": inp, "output": expected}, got)
        et, gt = expected.split(), got.split()
        if kind == "tokens":
            if et == gt:
                return True, ""
            return False, self.first_diff(et, gt, "token")
        import math

        if len(et) != len(gt):
            return False, f"expected {len(et)} tokens, got {len(gt)}"
        for i, (a, b) in enumerate(zip(et, gt, strict=False)):
            if a == b:
                continue
            try:
                fa, fb = float(a), float(b)
            except ValueError:
                return False, f"token {i + 1}: expected {excerpt(a, 40)!r}, got {excerpt(b, 40)!r}"
            if not math.isclose(fa, fb, rel_tol=self.spec["rel_tol"], abs_tol=self.spec["abs_tol"]):
                return False, (f"token {i + 1}: expected {a}, got {b} "
                               f"(abs_tol={self.spec['abs_tol']:g}, rel_tol={self.spec['rel_tol']:g})")
        return True, ""

    @staticmethod
    def first_diff(exp, got, unit):
        for i, (a, b) in enumerate(zip(exp, got, strict=False)):
            if a != b:
                return f"{unit} {i + 1}: expected {excerpt(a, 60)!r}, got {excerpt(b, 60)!r}"
        if len(exp) != len(got):
            return f"expected {len(exp)} {unit}s, got {len(got)}"
        return "outputs differ"

    def custom_check(self, inp, expected, got):
        """A dataset's checker, trusted but run as uid 65533 in its own process."""
        job = json.dumps({"checker": self.spec["checker_program"], "input": inp, "expected": expected,
                          "got": got}).encode()
        run = Run()
        limit = self.spec["checker_time_limit_s"]
        self.start(run, "checker", EVAL_UID, self.job_dir(EVAL_UID), limit, 0, stdin=job, outputs=("answer",))
        (pid,) = self.started(run)
        self.supervise(run, pid, time.monotonic() + limit)
        try:
            ans = json.loads(bytes(run.out.get("checker.answer", b"")).decode())
        except ValueError:
            ans = {"ok": False, "error": "checker produced no answer: " + excerpt(
                bytes(run.out.get("checker.stderr", b"")).decode("utf-8", "replace")[-300:])}
        if "error" in ans:
            self.checker_errors.append(ans["error"])
            return False, "checker failed: " + ans["error"]
        return bool(ans["ok"]), str(ans.get("message", ""))


    def values_equal(self, a, b):
        if self.spec["checker"] == "float" and isinstance(a, (int, float)) and isinstance(b, (int, float)) \
                and not isinstance(a, bool) and not isinstance(b, bool):
            import math

            try:
                return math.isclose(a, b, rel_tol=self.spec["rel_tol"], abs_tol=self.spec["abs_tol"])
            except OverflowError:  # an int no float can hold: only the very same int is close to it
                return a == b
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(self.values_equal(x, y) for x, y in zip(a, b, strict=False))
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(self.values_equal(a[k], b[k]) for k in a)
        return type(a) is type(b) and a == b or (
            isinstance(a, (int, float)) and isinstance(b, (int, float))
            and not isinstance(a, bool) and not isinstance(b, bool) and a == b)
