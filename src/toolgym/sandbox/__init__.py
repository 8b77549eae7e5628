"""toolgym.sandbox."""
