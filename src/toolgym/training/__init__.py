"""toolgym.training."""
