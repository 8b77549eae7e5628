"""toolgym.suites: benchmark suites (code, science, math), metrics and reports.

Modules (each loads lazily; none is imported by `import toolgym`):
  metrics     unbiased pass@k, avg@k, maj@k, bootstrap intervals, paired tests
  loglik      lm-evaluation-harness-style multiple-choice log-likelihood scoring (torch)
  registry    suites as (environment, task source, metric) entries; YAML suites
  sources     task sources (asset cache, LiveCodeBench, CodeContests, GPQA, AIME files)
  runner      `run_benchmark`: modes loglik / generate / tools, per-task records, resume
  report      JSON, Markdown and PNG reports;  compare: paired deltas with significance
"""
