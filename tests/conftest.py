"""Shared pytest configuration. Per-area fixtures live in each tests/<area>/conftest.py."""
