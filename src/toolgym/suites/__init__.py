"""toolgym.suites."""
