"""JSON with its bytes beside it: how a large argument or return value crosses every hop once.

A function unit's call and its return value are pickles; above functions.LARGE bytes they stay
`bytes` all the way (no base64, no JSON string of megabytes), and a message or a stored doc
that holds bytes is written as JSON in which each bytes value is a reference to a frame:

    {"\\u0000frame": i}      the i-th frame that comes with the JSON (never a user's key: the
                            key starts with a NUL, which JSON escapes and no description holds)

On the wire the frames follow the JSON as ZeroMQ frames of their own (a `units` message, a
`ustates` batch: pilot/wire/protocol.py); the bootstrap forwards them without looking.  In the store
(sqlite) a doc with frames is one BLOB:

    MAGIC  u32 count  count x u64 length  JSON  frame 0  frame 1 ...     (little-endian)

and a plain JSON text otherwise, so a reader tells the two apart by the value's type (bytes or
str).  `dumps` / `loads` are the wire's, `encode` / `decode` the store's.
"""

from __future__ import annotations

import json
import struct

from pilot.wire.protocol import ProtocolError

REF = "\x00frame"
MAGIC = b"\x00PJF1"
_COUNT = struct.Struct("<I")
_dumps_plain = json.JSONEncoder(separators=(",", ":")).encode
FRAMES_MAX = 4096  # frames one message or doc may carry


def dumps(obj) -> tuple[str, list]:
    """(JSON text, frames): each bytes value of `obj` a reference to its frame."""
    frames: list = []

    def ref(o):
        if type(o) is bytes or type(o) is bytearray or type(o) is memoryview:
            frames.append(o)
            return {REF: len(frames) - 1}
        raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")

    text = json.JSONEncoder(separators=(",", ":"), default=ref).encode(obj)
    return text, frames


def loads(text: str | bytes, frames) -> object:
    """The value of `dumps`'s JSON with its frames back in place (ProtocolError: a reference
    to a frame that is not there, or frames nobody refers to)."""
    if not frames:
        return json.loads(text)
    if len(frames) > FRAMES_MAX:
        raise ProtocolError(f"{len(frames)} data frames, more than {FRAMES_MAX}")
    used = [False] * len(frames)

    def hook(d: dict):
        if len(d) == 1 and REF in d:
            i = d[REF]
            if type(i) is not int or not 0 <= i < len(frames):
                raise ProtocolError(f"a reference to data frame {i!r} of {len(frames)}")
            used[i] = True
            f = frames[i]
            return f if type(f) is bytes else bytes(f)
        return d

    try:
        value = json.loads(text, object_hook=hook)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"undecodable message body: {exc}") from None
    except RecursionError:
        raise ProtocolError("message body nested too deep") from None
    if not all(used):
        raise ProtocolError(f"{used.count(False)} data frame(s) no value refers to")
    return value


def encode(obj) -> str | bytes:
    """A structured value as the store keeps it: JSON text, or one BLOB when it holds bytes."""
    text, frames = dumps(obj)
    if not frames:
        return text
    head = text.encode()
    sizes = struct.pack(f"<{len(frames) + 1}Q", len(head), *(len(f) for f in frames))
    return b"".join([MAGIC, _COUNT.pack(len(frames)), sizes, head, *frames])


def decode(value: str | bytes) -> object:
    """`encode`'s value back (a str: plain JSON)."""
    if type(value) is not bytes:
        return json.loads(value)
    if not value.startswith(MAGIC):
        raise ValueError("a stored value of bytes that is not framed JSON")
    at = len(MAGIC)
    (n,) = _COUNT.unpack_from(value, at)
    at += _COUNT.size
    sizes = struct.unpack_from(f"<{n + 1}Q", value, at)
    at += 8 * (n + 1)
    view = memoryview(value)
    head = bytes(view[at : at + sizes[0]])
    at += sizes[0]
    frames = []
    for size in sizes[1:]:
        frames.append(bytes(view[at : at + size]))
        at += size
    return loads(head, frames)
