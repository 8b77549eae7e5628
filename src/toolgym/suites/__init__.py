"""toolgym.suites: benchmark suites (code, science, math), metrics and reports.

Modules (each loads lazily; none is imported by `import toolgym`):
  metrics     unbiased pass@k, avg@k, maj@k, bootstrap intervals, paired tests
  loglik      lm-evaluation-harness-style multiple-choice log-likelihood scoring (torch)
  registry    suites as (environment, task source, metric) entries; YAML suites
  entries     an entry's tasks (the environment's, `toolgym.envs.tasks.catalog`) and environment per mode
  runner      `run_benchmark`: modes loglik / generate / tools, per-task records, resume
  generate_mode, grading, loglik_mode, tools_mode, sampling: the three modes and their sampler
  report      JSON, Markdown and PNG reports;  compare: paired deltas with significance
"""
