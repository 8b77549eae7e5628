"""The viewer's HTML: one page from the template, stylesheet and script shipped as package data, with the
episode index (and, for a small static page, the episodes) as inert JSON inside it.

Why this is safe with hostile episodes: data enters the page only as JSON in `<script type="application/json">`
blocks (never executed), with `<`, `>` and `&` written as `\\u003c`-style escapes so no text can close the
block; the script puts every string into the document through `textContent`; and the Content-Security-Policy
lets only the page's own scripts (a fresh nonce per page) run and loads no image, frame or remote resource.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Sequence
from importlib import resources
from typing import Any

from toolgym.viewer.episode import episode_view
from toolgym.viewer.index import Index, finite

PAGE_SIZE = 20  # episodes per page of the list


def asset(name: str) -> str:
    """A file of toolgym/viewer/assets (package data)."""
    return (resources.files("toolgym.viewer") / "assets" / name).read_text(encoding="utf-8")


def json_for_html(obj: Any) -> str:
    """JSON that is safe inside an HTML <script> block and a JS file: ASCII only (U+2028 and lone surrogates
    escaped too), no `<`, `>` or `&` (so no `</script>` or `<!--`), and no NaN (JSON.parse rejects it)."""
    text = json.dumps(obj, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def new_nonce() -> str:
    return secrets.token_urlsafe(18)


def csp(nonce: str, server: bool) -> str:
    """The page's policy: its own nonce-carrying scripts and style, requests only to the serving process."""
    connect = "'self'" if server else "'none'"
    return (f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; img-src 'none'; "
            f"connect-src {connect}; base-uri 'none'; form-action 'none'")


def payload(index: Index, ids: Sequence[int], pieces: dict[int, str] | None) -> dict[str, Any]:
    """Episodes `ids` as the page draws them, with the token pieces they use."""
    eps = [episode_view(rec, i, pieces is not None) for rec, i in zip(index.read(ids), ids, strict=True)]
    used = {t for e in eps for t in (e.get("tokens") or {}).get("ids", [])}
    return {"episodes": eps, "pieces": {str(t): pieces[t] for t in sorted(used) if t in pieces} if pieces else {}}


def boot_data(index: Index, mode: str, pieces: dict[int, str] | None, page_size: int = PAGE_SIZE,
              chunk_base: str = "", note: str = "") -> dict[str, Any]:
    """What the page starts from: the file's name and metadata, the episode index, and where episodes come
    from (`mode`: "server", "inline" or "files" beside the page, under `chunk_base`)."""
    meta = json.loads(json.dumps(index.meta, default=str), parse_constant=lambda _: None)
    cols = dict(index.columns)
    cols["r"] = [finite(r) for r in cols.get("r", [])]
    return {"file": index.path.name, "meta": meta, "index": cols, "total": len(index), "chunks": index.chunks,
            "mode": mode, "chunkBase": chunk_base, "pageSize": page_size, "tokens": pieces is not None,
            "warnings": list(index.warnings), "note": note}


def render_page(boot: dict[str, Any], nonce: str, server: bool, inline_chunks: dict[int, str] | None = None) -> str:
    """The whole page. `inline_chunks`: chunk number -> its JSON (already `json_for_html`) to embed."""
    chunks = "".join(f'<script type="application/json" id="tg-chunk-{c}">{text}</script>\n'
                     for c, text in sorted((inline_chunks or {}).items()))
    parts = {"CSP": csp(nonce, server), "NONCE": nonce, "STYLE": asset("viewer.css"), "SCRIPT": asset("viewer.js"),
             "BOOT": json_for_html(boot), "CHUNKS": chunks}
    # one pass: text put in for one marker is never searched for another
    return re.sub(r"@@([A-Z]+)@@", lambda m: parts[m.group(1)], asset("page.html"))
