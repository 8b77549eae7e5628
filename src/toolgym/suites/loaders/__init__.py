"""Loaders for benchmark files kept locally in their published formats."""
