"""The policy-gradient loss: importance ratios, the trust-region clip, aggregation (:mod:`.losses`, with its CPU
kernel :mod:`.fused_loss` and logged figures :mod:`.loss_metrics`), the built-in algorithms' settings
(:mod:`.loss_presets`) and group-relative advantages (:mod:`.advantages`). Pure tensor maths, tested exactly."""
