"""Per-task records of a benchmark run: one JSON line per finished task, appended as tasks finish,
so an interrupted run resumes where it stopped (finished tasks are skipped)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolgym._jsonl import read_jsonl
from toolgym.errors import ConfigError

RECORDS = "records.jsonl"
CONFIG = "config.json"
# Fields that must match for a resumed run to mix with earlier records.
RESUME_KEYS = ("suite", "model", "mode", "samples", "temperature", "top_p", "max_tokens", "seed", "sampler",
               "tool_parser")


class RecordStore:
    """Append-only per-task records in `out_dir/records.jsonl`."""

    def __init__(self, out_dir: str | Path) -> None:
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / RECORDS

    def check_config(self, config: dict[str, Any]) -> None:
        """Write config.json, or check that a resumed run uses the same settings."""
        cfg_path = self.dir / CONFIG
        if cfg_path.exists() and self.path.exists():
            old = json.loads(cfg_path.read_text(encoding="utf-8"))
            diff = [k for k in RESUME_KEYS if old.get(k) != config.get(k)]
            if diff:
                raise ConfigError(
                    f"{self.dir} holds a run with different {', '.join(diff)} "
                    f"({', '.join(f'{k}={old.get(k)!r}' for k in diff)}); use another --out folder"
                )
        cfg_path.write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")

    def load(self) -> list[dict[str, Any]]:
        """All records; a torn last line (a crash mid-write) is dropped."""
        if not self.path.exists():
            return []
        return read_jsonl(self.path, skip_invalid=True)

    def done(self, entry: str) -> set[str]:
        return {r["id"] for r in self.load() if r.get("entry") == entry}

    def append(self, records: list[dict[str, Any]]) -> None:
        torn = self.path.exists() and self.path.stat().st_size > 0 and not self.path.read_bytes().endswith(b"\n")
        with self.path.open("a", encoding="utf-8") as fh:
            if torn:  # start on a fresh line after a half-written one
                fh.write("\n")
            for r in records:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
            fh.flush()
