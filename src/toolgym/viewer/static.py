"""`--out page.html`: a page that opens from disk, with no server and no network.

A small file's episodes go inside the page (one file to keep or send). Past `inline_limit` bytes of episode
data they go into `<page>_files/chunk-NNNNN.js` beside it, which the page loads one chunk at a time as the
list needs them (a page opened from disk may load scripts beside it, but not fetch files): the page then
holds only the index, and the folder must travel with it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from toolgym.errors import ConfigError
from toolgym.viewer.index import Index
from toolgym.viewer.page import PAGE_SIZE, boot_data, json_for_html, new_nonce, payload, render_page

INLINE_LIMIT = 8 << 20  # bytes of episode data a page holds itself


@dataclass
class StaticPage:
    page: Path
    data_dir: Path | None  # the chunk folder, when the episodes did not fit in the page
    chunks: int
    episodes: int


def data_dir_for(page: Path) -> Path:
    return page.with_name(page.stem + "_files")


def _chunk_file(d: Path, c: int) -> Path:
    return d / f"chunk-{c:05d}.js"


def write_static(index: Index, page: str | Path, pieces: dict[int, str] | None, inline_limit: int = INLINE_LIMIT,
                 page_size: int = PAGE_SIZE) -> StaticPage:
    """Write the page (and its chunk folder when needed); reads the rollout file once more, chunk by chunk."""
    page = Path(page)
    if page.suffix.lower() not in (".html", ".htm"):
        raise ConfigError(f"--out must name an .html file, got {page}")
    if page.resolve() == index.path.resolve():
        raise ConfigError(f"--out must differ from the rollout file {index.path}")
    page.parent.mkdir(parents=True, exist_ok=True)
    ddir = data_dir_for(page)
    held: dict[int, str] = {}  # chunk texts while they still fit in the page
    size, spilled = 0, False
    for c in range(len(index.chunks)):
        text = json_for_html(payload(index, index.chunk_range(c), pieces))
        size += len(text)
        if not spilled and size > inline_limit:  # from here on, every chunk goes to the folder
            spilled = True
            shutil.rmtree(ddir, ignore_errors=True)  # no stale chunk of an earlier, longer file survives
            ddir.mkdir()
            for k, t in held.items():
                _chunk_file(ddir, k).write_text(f"tgChunk({k},{t});\n", encoding="ascii")
            held.clear()
        if spilled:
            _chunk_file(ddir, c).write_text(f"tgChunk({c},{text});\n", encoding="ascii")
        else:
            held[c] = text
    if not spilled and ddir.is_dir():
        shutil.rmtree(ddir, ignore_errors=True)
    note = "" if not spilled else f"episodes load from {ddir.name}/ beside this page: keep the folder with it"
    boot = boot_data(index, "files" if spilled else "inline", pieces, page_size,
                     chunk_base=quote(ddir.name) + "/", note=note)
    html = render_page(boot, new_nonce(), server=False, inline_chunks=None if spilled else held)
    tmp = page.with_name(page.name + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(page)
    return StaticPage(page=page, data_dir=ddir if spilled else None, chunks=len(index.chunks), episodes=len(index))
