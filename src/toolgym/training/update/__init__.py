"""The update engine: trajectories to padded batches (:mod:`.batch`), micro-batches (:mod:`.micro_batches`),
per-token log-probs (:mod:`.logprobs`, :mod:`.lm_head`, :mod:`.shared_prompt`), data parallelism
(:mod:`.data_parallel`), and what a step measures on the device (:mod:`.step_metrics`, :mod:`.peak_memory`,
:mod:`.cuda_precision`)."""
