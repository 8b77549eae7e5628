"""Host side of the executor protocol: JSON frames over one stream.

One long-lived stream per sandbox (a Docker attach socket, or the pipes of a local
bubblewrap process) carries every call, so a call costs one round trip instead of a
`docker exec`. The frame format and its limit are the executor's own (`injected/frames.py`,
imported here as a module): defined once for both ends.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import time
from typing import Any

from toolgym.sandbox.injected.frames import MAX_FRAME, FrameTooLarge, encode, take
from toolgym.sandbox.scripts import program

__all__ = ["MAX_FRAME", "Channel", "ChannelClosed", "encode", "executor_source"]
# Docker's attach stream (not ours): [stream, 0, 0, 0, size32] before each chunk of a stream
_DOCKER_HEAD = struct.Struct(">BxxxI")


class ChannelClosed(Exception):
    """The executor's stream ended or timed out: the sandbox must be discarded."""


def executor_source() -> str:
    """The executor (injected/executor.py), run as `python3 -I -c SOURCE` in every sandbox."""
    return program("executor")


class Channel:
    """Frame I/O over a readable fd and a writable fd (or one socket), with deadlines."""

    def __init__(self, rfd: int, wfd: int, docker_mux: bool = False, sock: socket.socket | None = None):
        self.rfd, self.wfd, self.mux, self.sock = rfd, wfd, docker_mux, sock
        self._buf = bytearray()  # demultiplexed executor stdout
        self._raw = bytearray()  # undecoded docker stream bytes

    def send(self, obj: dict[str, Any]) -> None:
        self.send_bytes(encode(obj))

    def send_bytes(self, raw: bytes) -> None:
        """Write raw bytes (tests use it to send malformed frames)."""
        data = memoryview(raw)
        try:
            while data:
                if self.sock is not None:
                    n = self.sock.send(data)
                else:
                    n = os.write(self.wfd, data)
                data = data[n:]
        except OSError as exc:
            raise ChannelClosed(f"write failed: {exc}") from exc

    def _fill(self, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ChannelClosed("executor did not answer in time")
        ready, _, _ = select.select([self.rfd], [], [], left)
        if not ready:
            raise ChannelClosed("executor did not answer in time")
        try:
            chunk = self.sock.recv(1 << 20) if self.sock is not None else os.read(self.rfd, 1 << 20)
        except OSError as exc:
            raise ChannelClosed(f"read failed: {exc}") from exc
        if not chunk:
            raise ChannelClosed("executor stream closed")
        if not self.mux:
            self._buf += chunk
            return
        self._raw += chunk
        head = _DOCKER_HEAD.size
        while len(self._raw) >= head:
            kind, size = _DOCKER_HEAD.unpack(self._raw[:head])
            if len(self._raw) < head + size:
                break
            if kind == 1:
                self._buf += self._raw[head:head + size]
            del self._raw[:head + size]

    def recv(self, deadline: float) -> dict[str, Any]:
        while True:
            try:
                body = take(self._buf, MAX_FRAME)
            except FrameTooLarge:
                raise ChannelClosed("executor sent an oversized frame") from None
            if body is not None:
                break
            self._fill(deadline)
        try:
            return json.loads(body.decode("utf-8", "surrogatepass"))
        except ValueError as exc:
            raise ChannelClosed(f"executor sent a malformed frame: {exc}") from exc

    def call(self, obj: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.send(obj)
        return self.recv(time.monotonic() + timeout)
