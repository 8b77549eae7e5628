"""Limits that more than one place uses, each defined once. Stdlib only, no imports.

The defaults of a call are the host's (``toolgym.sandbox.types.Limits``, which imports this file
as ``toolgym.sandbox.injected.limits``) and the executor's for a request that leaves one out; the
others are shared by the scripts in the sandbox (imported there as ``limits``). The frame limit
is ``frames.MAX_FRAME``.
"""

# a call's defaults (toolgym.sandbox.Limits)
TIMEOUT_S = 10.0
MEMORY_MB = 512
OUTPUT_BYTES = 1 << 20  # stdout and stderr, each
FILE_BYTES = 16 << 20  # the largest file a call (or a test process of the judge) may write

# the judge's (toolgym.sandbox.judging: the spec it sends, and the time budget it allows a job)
CHECKER_TIME_S = 10.0  # a custom checker's or an output validator's time per test
COMPILE_TIME_S = 60.0  # compiling a C++ program or validator

COMPILE_MEMORY_MB = 2048  # g++, for a call's program, a judged program and a Kattis validator
TRUSTED_MEMORY_MB = 1024  # the judge's evaluator and Kattis validators: trusted; it only guards the sandbox
MESSAGE_CHARS = 400  # a verdict's message from a checker, a validator or an exception of the program
