"""On-policy distillation: MOPD (peer-conditioned EMA self-teacher) and its SDPO / OPD relatives
(docs/algorithms/mopd.md). ``options`` is torch-free (the config loader reads it); the rest uses torch."""
