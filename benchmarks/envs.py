"""Benchmark: the overhead toolgym's env.step adds around the model's text, without sandbox time.

Text-only steps (no sandbox involved) are timed side by side with a baseline that does the
minimum any environment must do with the same text (a bare parse). With --sandbox BACKEND,
a python-tool step is also timed against a bare sandbox.run of the same code, alternating
the two, so the difference is the env's overhead around the sandbox call.

    .venv/bin/python benchmarks/envs.py [--n 2000] [--sandbox local]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def median_us(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--sandbox", default=None, help="also time a python-tool step on this backend")
    args = ap.parse_args()

    import toolgym
    from toolgym.envs.answers import extract_answer
    from toolgym.envs.parsing import CombinedParser

    env = toolgym.make("toolgym/Arith-v0", sandbox=None, max_turns=10**9)
    parser = CombinedParser()
    reasoning = "Let me think step by step about the multiplication. " * 20
    tool_text = reasoning + '<tool_call>{"name": "calculator", "arguments": {"expression": "12*34"}}</tool_call>'
    answer_text = reasoning + "Answer: 12345"

    env.reset(seed=0)
    rows = []
    # 1. a non-final text-only turn: parse, an error observation (unknown tool), bookkeeping
    step_us = median_us(lambda: env.step(tool_text), args.n)
    base_us = median_us(lambda: parser.parse(tool_text), args.n)
    rows.append(("text step (tool-call error observation)", step_us, "bare parse", base_us))

    # 2. the final turn: parse, answer detection, rubric (exact integer check), info
    def final_step() -> None:
        env.reset(seed=0)  # not timed separately: reset is part of an episode's bookkeeping too
        env.step(answer_text)

    final_us = median_us(final_step, args.n)
    base2_us = median_us(lambda: extract_answer(parser.parse(answer_text).answer or answer_text), args.n)
    rows.append(("reset + final answer step (scored)", final_us, "bare parse + answer detection", base2_us))

    # 3. optional: a python-tool step minus the sandbox call's own time
    if args.sandbox:
        from toolgym.sandbox import open_sandbox

        with open_sandbox(args.sandbox, pool_size=1) as sb:
            tenv = toolgym.make("toolgym/Arith-v0", sandbox=sb, max_turns=10**9, max_tool_calls=10**9)
            tenv.reset(seed=0)
            code = "```python\nprint(48213 * 9172)\n```"
            for _ in range(3):
                tenv.step(code)  # warm the pool
            steps, raw = [], []
            for _ in range(min(args.n, 60)):  # alternate, so both see the same machine load
                t0 = time.perf_counter()
                assert sb.run("print(48213 * 9172)").ok
                raw.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                tenv.step(code)
                steps.append(time.perf_counter() - t0)
            rows.append((f"python-tool step ({args.sandbox} sandbox)", statistics.median(steps) * 1e6,
                         "bare sandbox.run of the same code", statistics.median(raw) * 1e6))
            tenv.close()

    print(f"{'measurement':<52} {'median':>10}   {'baseline':<34} {'median':>10} {'overhead':>10}")
    out = []
    for name, us, bname, bus in rows:
        print(f"{name:<52} {us:>8.1f}us   {bname:<34} {bus:>8.1f}us {us - bus:>8.1f}us")
        out.append({"measurement": name, "median_us": round(us, 1), "baseline": bname, "baseline_median_us": round(bus, 1)})
    text_step = rows[0][1]
    print(f"text-only env.step median: {text_step / 1000:.3f} ms (target < 1 ms): {'OK' if text_step < 1000 else 'SLOW'}")
    print(json.dumps(out))
    env.close()


if __name__ == "__main__":
    main()
