"""`--serve`: the page and its episodes over HTTP on 127.0.0.1 only, for files too big for a static page.

The page asks for the episodes it shows (`/api/episodes?ids=...`); the server seeks to their byte offsets
in the rollout file, so memory holds the index, never the file. It binds the loopback address and nothing
else, and answers only requests whose Host is that address or `localhost` (a web page elsewhere cannot
reach it through a rebinding DNS name).
"""

from __future__ import annotations

import json
import logging
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from toolgym.errors import ToolgymError
from toolgym.viewer.index import Index
from toolgym.viewer.page import PAGE_SIZE, boot_data, csp, json_for_html, new_nonce, payload, render_page

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
MAX_IDS = 200  # episodes per request


class ViewerServer(ThreadingHTTPServer):
    """Serves one rollout file's viewer until `shutdown()`."""

    daemon_threads = True

    def __init__(self, index: Index, pieces: dict[int, str] | None, port: int = 0, page_size: int = PAGE_SIZE) -> None:
        super().__init__((HOST, port), _Handler)
        self.index = index
        self.pieces = pieces
        self.nonce = new_nonce()
        self.page = render_page(boot_data(index, "server", pieces, page_size), self.nonce, server=True).encode()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/"


class _Handler(BaseHTTPRequestHandler):
    server: ViewerServer

    def log_message(self, fmt: str, *args: object) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", csp(self.server.nonce, server=True) + "; frame-ancestors 'none'")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _error(self, code: int, message: str) -> None:
        self._send(code, json.dumps({"error": message}).encode(), "application/json")

    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
        host = (self.headers.get("Host") or "").lower()
        if host not in (f"{HOST}:{self.server.port}", f"localhost:{self.server.port}"):
            return self._error(403, "this viewer answers only http://127.0.0.1 and http://localhost")
        url = urlsplit(self.path)
        if url.path == "/":
            return self._send(200, self.server.page, "text/html; charset=utf-8")
        if url.path == "/api/episodes":
            raw = parse_qs(url.query).get("ids", [""])[0]
            try:
                ids = [int(x) for x in raw.split(",") if x]
            except ValueError:
                return self._error(400, "ids must be comma-separated episode numbers")
            n = len(self.server.index)
            if not ids or len(ids) > MAX_IDS or any(not 0 <= i < n for i in ids):
                return self._error(400, f"ids: 1 to {MAX_IDS} episode numbers in [0, {n})")
            try:
                body = json_for_html(payload(self.server.index, ids, self.server.pieces)).encode()
            except ToolgymError as exc:
                return self._error(500, str(exc))
            return self._send(200, body, "application/json")
        return self._error(404, "not found")
