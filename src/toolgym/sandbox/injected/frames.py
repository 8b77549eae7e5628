"""The one frame format between toolgym and the scripts in a sandbox. Stdlib only.

A frame is a 4-byte big-endian length and that many bytes. It carries a UTF-8 JSON object on the
host's stream to the executor, on a session's control channel and on the judge's call channel
(rpc.py), and a tag byte and text on an evaluator's verdict pipe. Every reader refuses a frame
longer than its limit (MAX_FRAME unless a smaller one is given) before it reads the body.

Defined once, here: the host imports this file as ``toolgym.sandbox.injected.frames``
(``toolgym.sandbox.protocol``); a script in the sandbox imports it as ``frames``
(``toolgym.sandbox.scripts`` ships it with the script).
"""

from __future__ import annotations

import json
import os
import struct

HEAD = struct.Struct(">I")  # the length prefix
MAX_FRAME = 256 << 20  # the longest body any reader accepts


class FrameTooLarge(ValueError):
    """A frame announced a body longer than its reader accepts."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"frame too large ({size} bytes, at most {limit})")
        self.size, self.limit = size, limit


def frame(body: bytes) -> bytes:
    """`body` (bytes) as one frame."""
    return HEAD.pack(len(body)) + body


def encode(obj: dict) -> bytes:
    """A JSON object as one frame: text as UTF-8 (lone surrogates kept), not ASCII-escaped."""
    return frame(json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def body_size(head: bytes, limit: int = MAX_FRAME) -> int:
    """The body length a frame's 4-byte head announces; FrameTooLarge when it is over `limit`."""
    (n,) = HEAD.unpack(head)
    if n > limit:
        raise FrameTooLarge(n, limit)
    return n


def take(buf: bytearray, limit: int = MAX_FRAME) -> bytes | None:
    """The body of the first whole frame in the bytearray `buf`, removed from it; None while the frame
    is incomplete. FrameTooLarge as soon as the head is there and announces more than `limit`."""
    if len(buf) < HEAD.size:
        return None
    n = body_size(bytes(buf[:HEAD.size]), limit)
    if len(buf) < HEAD.size + n:
        return None
    body = bytes(buf[HEAD.size:HEAD.size + n])
    del buf[:HEAD.size + n]
    return body


def read_exact(fd: int, n: int) -> bytes | None:
    """Exactly `n` bytes from `fd`, or None at the end of the stream."""
    chunks, got = [], 0
    while got < n:
        b = os.read(fd, min(n - got, 1 << 20))
        if not b:
            return None
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def read(fd: int, limit: int = MAX_FRAME, drain: bool = False) -> bytes | None:
    """The next frame's body from the blocking `fd`; None at the end of the stream.

    A frame over `limit` raises FrameTooLarge; with `drain`, only once its body has been read and
    dropped, so that the stream stays in step for the next frame (None if the stream ends first)."""
    head = read_exact(fd, HEAD.size)
    if head is None:
        return None
    try:
        n = body_size(head, limit)
    except FrameTooLarge as exc:
        left = exc.size if drain else 0
        while left > 0:
            chunk = read_exact(fd, min(left, 1 << 20))
            if chunk is None:
                return None
            left -= len(chunk)
        raise
    return read_exact(fd, n)


def write(fd: int, data: bytes) -> None:
    """Write all of `data` to the blocking `fd`."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
