"""CLI command groups, loaded by toolgym.cli; each keeps heavy imports inside its commands."""
