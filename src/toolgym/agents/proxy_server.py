"""HTTP for the recording proxy: ``POST /v1/chat/completions`` and ``GET /v1/models`` on loopback.

Why aiohttp: the server runs on the same asyncio loop as the sampler (``agenerate`` is a coroutine), so a
request waiting for tokens never blocks another; the stdlib has no asyncio HTTP server. It listens on
127.0.0.1 only: whatever reaches it samples the policy and writes training data.

Every refusal is one JSON error in the API's shape (``{"error": {"message", "type"}}``) with a 4xx status:
a body that is not JSON, too large, not a valid request, a prompt over the context. Only a sampler failure
is a 500, and it never stops the server.

``stream: true`` is answered with server-sent events in the API's chunk format. The turn is sampled whole
first (the sampler returns whole samples), then sent as chunks: the role, the content, the tool calls, the
finish reason (and the usage when ``stream_options.include_usage`` asks), then ``[DONE]``; so a refusal is
still a plain 4xx before any event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

from toolgym.agents._openai_messages import RequestError
from toolgym.agents.proxy import RecordingProxy
from toolgym.agents.sampling import SamplerError
from toolgym.errors import ConfigError

log = logging.getLogger(__name__)

#: the only address the proxy listens on
HOST = "127.0.0.1"
#: the largest request body accepted (a long agent history fits; a flood does not)
MAX_BODY_BYTES = 8 * 2**20
#: the header an agent program may set to name its episode (the trajectories' task id)
EPISODE_HEADER = "X-Toolgym-Episode"


def _web() -> Any:
    try:
        from aiohttp import web
    except ImportError:
        raise ConfigError("the recording proxy needs aiohttp: pip install 'toolgym[proxy]'") from None
    return web


def check_host(host: str) -> str:
    """``host`` when it is the loopback address; a ConfigError otherwise (the proxy is never exposed)."""
    if host != HOST:
        raise ConfigError(f"the recording proxy listens on {HOST} only (asked for {host!r}): whatever reaches "
                          "it samples the policy and writes training data")
    return host


def _error(web: Any, status: int, message: str, kind: str = "invalid_request_error") -> Any:
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status)


def make_app(proxy: RecordingProxy, max_body_bytes: int = MAX_BODY_BYTES) -> Any:
    """The aiohttp application serving ``proxy``."""
    web = _web()

    @web.middleware
    async def json_errors(request: Any, handler: Any) -> Any:
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            return _error(web, 413, f"request body over {max_body_bytes} bytes")
        except web.HTTPException as exc:
            return _error(web, exc.status, exc.reason or "request refused")

    async def chat(request: Any) -> Any:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            return _error(web, 400, "the request body is not valid JSON")
        episode = request.headers.get(EPISODE_HEADER)
        if episode is not None and (len(episode) > 200 or not episode.isprintable()):
            return _error(web, 400, f"{EPISODE_HEADER} must be at most 200 printable characters")
        stream = isinstance(body, dict) and body.get("stream") is True
        try:
            response = await proxy.complete(body, episode)
        except RequestError as exc:
            return _error(web, 400, str(exc))
        except SamplerError as exc:
            return _error(web, 500, f"sampling failed: {exc}", "server_error")
        except Exception as exc:  # a fault of the sampler or template: this request fails, the server goes on
            log.exception("the recording proxy failed a request")
            return _error(web, 500, f"the proxy failed: {type(exc).__name__}: {exc}", "server_error")
        if not stream:
            return web.json_response(response)
        opts = body.get("stream_options")
        usage = isinstance(opts, dict) and opts.get("include_usage") is True
        sse = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await sse.prepare(request)
        for chunk in chunks(response, usage):
            await sse.write(b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n")
        await sse.write(b"data: [DONE]\n\n")
        await sse.write_eof()
        return sse

    async def models(request: Any) -> Any:
        return web.json_response(proxy.models())

    app = web.Application(client_max_size=max_body_bytes, middlewares=[json_errors])
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    return app


def chunks(response: dict[str, Any], usage: bool = False) -> list[dict[str, Any]]:
    """A whole chat completion as the stream of ``chat.completion.chunk`` objects a streaming client reads."""
    choice = response["choices"][0]
    message = choice["message"]
    head = {"id": response["id"], "object": "chat.completion.chunk", "created": response["created"],
            "model": response["model"]}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        out.append(chunk({"content": message["content"]}))
    if message.get("tool_calls"):
        out.append(chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]}))
    out.append(chunk({}, choice["finish_reason"]))
    if usage:
        out.append({**head, "choices": [], "usage": response["usage"]})
    return out


class ProxyServer:
    """The proxy's HTTP server on the running asyncio loop: ``url = await start()``, ``await stop()``."""

    def __init__(self, proxy: RecordingProxy, host: str = HOST, port: int = 0,
                 max_body_bytes: int = MAX_BODY_BYTES, path: str | None = None) -> None:
        """``path``: listen on this Unix socket instead of a loopback port (a jailed program's one way out,
        :mod:`toolgym.agents.program_jail`)."""
        self.proxy = proxy
        self.host = check_host(host)
        self.port = port
        self.max_body_bytes = max_body_bytes
        self.path = path
        self._runner: Any = None

    async def start(self) -> str:
        """Listen; returns the ``base_url`` an OpenAI client takes (``http://127.0.0.1:PORT/v1``), or
        ``unix:PATH`` for a socket."""
        web = _web()
        self._runner = web.AppRunner(make_app(self.proxy, self.max_body_bytes), access_log=None)
        await self._runner.setup()
        if self.path is not None:
            import os

            await web.UnixSite(self._runner, self.path).start()
            os.chmod(self.path, 0o666)  # the jail's uid connects; its folder is private (0711, a random name)
            return f"unix:{self.path}"
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return f"http://{self.host}:{self.port}/v1"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


@contextlib.contextmanager
def serve_in_thread(proxy: RecordingProxy, host: str = HOST, port: int = 0,
                    max_body_bytes: int = MAX_BODY_BYTES) -> Iterator[str]:
    """Serve ``proxy`` from a thread of its own (its own event loop, where the sampler runs) while a
    blocking program talks to it; yields the base URL. For scripts, tests and the CLI."""
    server = ProxyServer(proxy, host, port, max_body_bytes)
    loop = asyncio.new_event_loop()
    started: dict[str, Any] = {}
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            started["url"] = loop.run_until_complete(server.start())
        except BaseException as exc:  # reported to the caller, not lost in the thread
            started["error"] = exc
            ready.set()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(server.stop())
        loop.close()

    thread = threading.Thread(target=run, name="toolgym-proxy", daemon=True)
    thread.start()
    ready.wait()
    if "error" in started:
        thread.join()
        raise started["error"]
    try:
        yield started["url"]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
