"""Large bytes beside the store: a call's arguments and a function's return value, from
functions.LARGE bytes on, are files of the session's `data` directory; the store keeps a
reference to each.

A 2 MB value costs sqlite ~5.4 ms to insert and commit (its pages, the write-ahead log and the
checkpoint that copies them again), a file ~0.6 ms; MongoDB holds no document over 16 MB at
all.  So the bytes go to a file (written whole under a temporary name, then renamed: a reader
never sees half of one) before the doc that names it is written, and the doc holds

    {"\\u0000file": NAME}      in a structured field (a description's function `args`)
    "\\u0000file:NAME"         as a unit's return_value

which a read turns back into the bytes (`decode`, `value`).  Neither form can be a user's:
JSON escapes the NUL, and a packed value is base64 text or bytes, never a string with a NUL.
The files live as long as the session's directory, except those of an rp.Executor call, which
its executor removes once the call's future has its outcome and the store its final state
(`drop`: nothing reads them again; kept, each call's megabytes are new pages of the page cache
that the kernel must write back to the disk, ~5 ms for 2 MB on this host against 0.4 ms for
pages freed before that, and a session of many large calls fills the disk).  A unit's value
file written here is named after the unit (functions.value_name), an argument's once per
Template (its `files`): written again (a retry, a renewed store), each replaces or reuses its
file instead of leaving another.  A kill -9 of the client loses none written
(the doc is written after its file), a power loss may (they are not synced, as the store's own
writes are not: docs/guarantees.md).  Files of one host: a client that attaches to a MongoDB
session from another host reads a large value as missing (LookupError naming the file).
"""

from __future__ import annotations

import json
import os
import secrets

from pilot import functions
from pilot.wire import framed

REF = functions.FILE_REF
VALUE_REF = functions.VALUE_REF
REACH = functions.DATA_TOKEN  # a token only the session's client writes: who reads it sees this
_REF_TEXT = '"\\u0000file"'  # (how json writes REF: a text without it needs no file)
_dumps = json.JSONEncoder(separators=(",", ":")).encode


class DataFiles:
    """The session's data directory: `put` bytes, `get` them back by name."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.made = os.path.isdir(path)

    def put(self, blob: bytes | bytearray | memoryview, name: str | None = None) -> str:
        """Write `blob` to a new file (named `name`, else at random: replaced whole if it
        exists); its name."""
        self._make()
        return functions.put_data(self.path, blob, name=name)

    def has(self, name: str) -> bool:
        try:
            return os.path.exists(self._file(name))
        except LookupError:
            return False

    def _make(self) -> None:
        if not self.made:
            os.makedirs(self.path, mode=0o700, exist_ok=True)
            self.made = True

    def reach(self) -> str:
        """The directory's token (made once, kept in REACH): a pilot's agent that reads the
        same token there sees this directory, and its function workers then read and write
        large pickles here by reference (pilot/functions.py)."""
        self._make()
        path = os.path.join(self.path, REACH)
        try:
            with open(path) as f:
                token = f.read().strip()
            if len(token) == 32 and token.isalnum():
                return token
        except FileNotFoundError:
            pass
        token = secrets.token_hex(16)
        tmp = f"{path}.{os.getpid()}"
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(token)
        os.rename(tmp, path)
        return token

    def get(self, name: str) -> bytes:
        try:
            with open(self._file(name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise self._missing(name) from None

    def drop(self, names: list[str]) -> None:
        """Remove these files (a name that is not one the store makes, or a file already
        gone, is passed over).  Their references stay in the docs that hold them, and read as
        missing (`decode`, `value`)."""
        for name in names:
            try:
                os.unlink(self._file(name))
            except (LookupError, OSError):
                pass

    def _file(self, name: str) -> str:
        try:
            return functions.data_file(self.path, name)  # (a name from the store: never a path)
        except ValueError as exc:
            raise LookupError(str(exc)) from None

    def _missing(self, name: str) -> LookupError:
        return LookupError(
            f"data file {name} is not in {self.path} (the session's directory of another "
            "host, or removed)"
        )


def for_pilot(data: DataFiles | None, local: bool) -> dict | None:
    """What a pilot's function workers are told of the session's data directory (the pilot's
    config, and a client's attach): its path, its token, and whether a value file must be on
    the disk before its name is sent (a pilot on other hosts: a node that fails after its
    worker answered must not take the value with it; a local pilot shares the client's host
    and its fate).  None: no directory (the bytes go through the pilot)."""
    if data is None:
        return None
    try:
        return {"dir": data.path, "token": data.reach(), "sync": not local}
    except OSError:  # (a directory it cannot write: the bytes go through the pilot)
        return None


def encode(value, data: DataFiles | None, files: dict | None = None) -> str | bytes:
    """A structured field as stored: JSON text; its bytes values as files of `data` (no
    `data`: one BLOB of JSON and its frames, pilot/wire/framed.py); `files`, if given, gets
    id(bytes) -> the file's name for each (pmgr/core/blueprint.py: what goes to a pilot that
    reads them there)."""
    try:
        return _dumps(value)
    except TypeError:
        if data is None:
            return framed.encode(value)

    def ref(o):
        if type(o) is bytes or type(o) is bytearray or type(o) is memoryview:
            name = files.get(id(o)) if files is not None else None
            if name is None or not data.has(name):  # (written again: a retry, a renewed
                name = data.put(o)  # store; the file made before serves, one file a value)
                if files is not None:
                    files[id(o)] = name
            return {REF: name}
        raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")

    return json.JSONEncoder(separators=(",", ":"), default=ref).encode(value)


def decode(value: str | bytes, data: DataFiles | None):
    """`encode`'s value back, each file's bytes in place of its reference (a reference
    without `data` stays as it is)."""
    if type(value) is bytes:
        return framed.decode(value)
    if data is None or _REF_TEXT not in value:
        return json.loads(value)

    def hook(d: dict):
        if len(d) == 1 and REF in d and type(d[REF]) is str:
            try:
                return data.get(d[REF])
            except LookupError:  # (one missing file fails its own call, not a whole read)
                return d
        return d

    return json.loads(value, object_hook=hook)


def store_value(value, data: DataFiles | None, uid: str):
    """Unit `uid`'s return value as its column holds it: base64 text as it is, bytes as a
    file's reference (no `data`: the bytes themselves); the file is named after the unit
    (functions.value_name: written again, it is replaced; its owner can find it to remove
    it)."""
    if type(value) is bytes and data is not None:
        return VALUE_REF + data.put(value, functions.value_name(uid))
    return value


def value(stored, data: DataFiles | None):
    """`store_value`'s form back: the bytes of a file it names, else the value (a file that
    is not there stays its reference: the unit's return_value says so, and a read of many
    units is not failed for one)."""
    if type(stored) is str and stored.startswith(VALUE_REF) and data is not None:
        try:
            return data.get(stored[len(VALUE_REF) :])
        except LookupError:
            return stored
    return stored
