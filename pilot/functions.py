"""Function units: a Python callable as a unit, its call packed for the wire and the store.

A unit description with `function=` (a callable, or a dotted name "pkg.mod.func" /
"pkg.mod:Class.method" resolved where it runs) and optional `args=` / `kwargs=` is run by a
persistent Python worker of its partition (agent/runners/functions.py), not as a process of its
own.  The call is packed once, at submit, with cloudpickle (functions defined in a script or a
notebook travel by value, importable ones by reference):

    packed = {"name": "mod.qualname", "pickle": base64(cloudpickle.dumps(f)),
              "args": base64(cloudpickle.dumps((args, kwargs)))}     (no args: left out)

which is also the description's stored form (`to_dict`), so a description read back from the
store runs the same call.  Arguments that pickle to LARGE bytes or more stay bytes: `args` is
the pickle itself, and it crosses every hop as a frame of its own (pilot/wire/framed.py: no base64,
no JSON string of megabytes; the store keeps it as a BLOB).  The worker sends back the return
value the same way (`wrap`: base64 of cloudpickle, or the bytes from LARGE on);
`unpack_value` turns it into the object again on the client.
"""

from __future__ import annotations

import base64
import functools
import io
import os
import pickle
import re
import sys
import threading
import types
from typing import Any

from pilot import malloc

_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*)?$")
PACKED_MAX = 64 << 20  # bytes of a packed call (arguments included)
VALUE_MAX = 16 << 20  # bytes of a packed return value
LARGE = 65536  # a pickle of this many bytes or more travels as bytes, not base64
# Large pickles by reference: where a partition's function workers see the client's data
# directory (the session's `data`, pmgr/store/data_files.py: the same host, or a shared file
# system), a call's arguments and its return value from LARGE bytes on do not cross the pilot's
# hops at all; only a file's name does:
#     {FILE_REF: NAME}     a packed call's `args` (the file the client's store wrote them to)
#     VALUE_REF + NAME     a return value (the file its worker wrote, whole, then renamed)
FILE_REF = "\x00file"
VALUE_REF = "\x00file:"
DATA_TOKEN = ".reach"  # the client's token file there: an agent that reads it sees the directory


def client_path() -> list[str]:
    """This process's own module directories (its script's, its PYTHONPATH's: not the
    standard library or site-packages): a pilot's function workers look there too, so a
    function of the user's own module is found (a shared file system, or a local pilot)."""
    import site
    import sysconfig

    installed = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    installed.update(getattr(site, "getsitepackages", list)())
    installed = {os.path.realpath(p) for p in installed if p}
    out = []
    for p in sys.path:
        p = os.path.realpath(p or os.getcwd())
        if (
            os.path.isdir(p)
            and p not in out
            and not any(p == i or p.startswith(i + os.sep) for i in installed)
        ):
            out.append(p)
    return out


def name_of(f: Any) -> str:
    if isinstance(f, str):
        return f
    mod = getattr(f, "__module__", None) or "?"
    return f"{mod}.{getattr(f, '__qualname__', None) or type(f).__name__}"


def is_dotted(text: str) -> bool:
    return bool(_DOTTED.match(text))


FN_CACHE = 128  # function pickles kept
FN_CACHE_BYTES = 100_000  # larger ones are not kept
_pickled: dict = {}  # function -> (the globals and closure values it read, base64 pickle)
_lock = threading.Lock()


def pack(f: Any, args: tuple, kwargs: dict) -> dict:
    """The wire form of a call; ValueError when it cannot be pickled."""
    packed: dict = {"name": name_of(f), "pickle": _pickle_function(f)}
    size = len(packed["pickle"]) * 3 // 4
    if args or kwargs:
        packed["args"] = wrap(_pickled_bytes(f, "its args and kwargs", (tuple(args), dict(kwargs))))
        size += _size(packed["args"])
    if size > PACKED_MAX:
        raise ValueError(
            f"function={name_of(f)}: the call pickles to {size} bytes, more than "
            f"{PACKED_MAX} (put large data in a file and pass its path)"
        )
    return packed


def _reads(f: types.FunctionType) -> tuple:
    """The objects a function's pickle holds by value besides its code: the module globals
    its code names and its closure's values (a rebound one makes a new pickle)."""
    g = f.__globals__
    names = tuple(g[n] for n in f.__code__.co_names if n in g)
    cells = tuple(c.cell_contents for c in f.__closure__ or () if _filled(c))
    return names + cells


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018
        return True
    except ValueError:  # (empty)
        return False


def _pickle_function(f: Any) -> str:
    if type(f) is not types.FunctionType:  # methods carry their object: pickled each time
        return _b64(f, "the function", f)
    reads = _reads(f)
    with _lock:
        kept = _pickled.get(f)
    if (
        kept is not None
        and len(kept[0]) == len(reads)
        and all(a is b for a, b in zip(kept[0], reads))
    ):
        return kept[1]
    text = _b64(f, "the function", f)
    if len(text) <= FN_CACHE_BYTES:
        with _lock:
            if len(_pickled) >= FN_CACHE and f not in _pickled:
                _pickled.pop(next(iter(_pickled)))  # the oldest
            _pickled[f] = (reads, text)  # (holding `reads`: their ids are not reused)
    return text


def _b64(f: Any, what: str, obj: Any) -> str:
    return base64.b64encode(_pickled_bytes(f, what, obj)).decode()


def wrap(blob: bytes) -> str | bytes:
    """A pickle as it travels and is stored: base64 text when small, the bytes from LARGE on."""
    return blob if len(blob) >= LARGE else base64.b64encode(blob).decode()


def unwrap(value: str | bytes) -> bytes:
    if type(value) is bytes:  # (LARGE: megabytes are copied from here on, pilot/malloc.py)
        malloc.keep_freed()
        return value
    return base64.b64decode(value)


def _size(value: str | bytes) -> int:
    """Bytes of the pickle a wrapped value holds."""
    return len(value) if type(value) is bytes else len(value) * 3 // 4


class _ByValue(Exception):
    """A class or function of __main__ (or of no module): cloudpickle's, by value."""


class _Many(Exception):
    """More objects than LOOKS_MAX to look at: the search of the pickle is cheaper."""


LOOKS_MAX = 1000


class _Plain(pickle.Pickler):
    """pickle's C pickler, refusing what it would name in __main__ (which the other side's
    __main__ does not hold: cloudpickle sends it by value).  The pickler asks
    `reducer_override` only of objects that are not plain data (bytes, str, numbers and
    containers are written without it), so megabytes of data cost no look at all; past
    LOOKS_MAX such objects it gives up (a Python call each), and `dumps` searches the pickle
    for the name instead (~0.65 ms a MB)."""

    looks = 0

    def reducer_override(self, obj):
        self.looks += 1
        if self.looks > LOOKS_MAX:
            raise _Many
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
            if getattr(obj, "__module__", None) in (None, "__main__"):
                raise _ByValue
        return NotImplemented


def dumps(obj: Any) -> bytes:
    """pickle's C pickler when it can say `obj` (a 2 MB bytes value: 0.3 ms against
    cloudpickle's 3), else cloudpickle (objects of __main__, lambdas, local functions, modules
    registered to be pickled by value)."""
    import cloudpickle

    if not cloudpickle.list_registry_pickle_by_value():
        if _holds_large(obj):  # (the pickler looks, instead of a search of megabytes)
            malloc.keep_freed()  # (copies of megabytes without a page fault a page)
            buf = io.BytesIO()
            try:
                _Plain(buf, 5).dump(obj)
                return buf.getvalue()
            except _Many:
                pass
            except Exception:  # (what only cloudpickle can say: a lambda, __main__'s)
                return cloudpickle.dumps(obj)
        try:
            blob = pickle.dumps(obj, 5)
        except Exception:  # (what only cloudpickle can say: a lambda, a local class)
            blob = None
        if blob is not None and b"__main__" not in blob:
            return blob
    return cloudpickle.dumps(obj)


_SCALARS = frozenset((int, float, bool, type(None), complex))
_BUFFERS = frozenset((bytes, str, bytearray))


def _holds_large(obj: Any) -> bool:
    """Whether `obj` (a call's (args, kwargs), or a value) is, or holds among its arguments
    or items, a buffer of LARGE bytes or more (bytes, str, an array; one level further into
    a tuple, list or dict).  Either way of `dumps` is right; this says which is cheaper: a
    small pickle is searched in less time than the checking pickler costs to make, and the
    common call, a few numbers, costs a look at each."""
    if type(obj) is tuple and len(obj) == 2 and type(obj[1]) is dict:  # ((args), {kwargs})
        args, kwargs = obj
        if type(args) is tuple:
            for a in args:
                if type(a) not in _SCALARS and _large(a, 1):
                    return True
            for a in kwargs.values():
                if type(a) not in _SCALARS and _large(a, 1):
                    return True
            return False
    return _large(obj, 2)


def _large(obj: Any, depth: int) -> bool:
    t = type(obj)
    if t is Timed:  # (a call's value, with its time)
        return _large(obj.value, depth)
    if t in _BUFFERS:
        return len(obj) >= LARGE
    if t is tuple or t is list or t is dict:
        if depth:
            for o in obj.values() if t is dict else obj if len(obj) <= 64 else obj[:64]:
                if type(o) not in _SCALARS and _large(o, depth - 1):
                    return True
        return False
    if t in _SCALARS:
        return False
    n = getattr(obj, "nbytes", None)  # (memoryview, array.array, numpy arrays)
    return type(n) is int and n >= LARGE


def _pickled_bytes(f: Any, what: str, obj: Any) -> bytes:
    import cloudpickle

    try:
        blob = cloudpickle.dumps(obj)
    except Exception as exc:  # pickling runs user code (__reduce__): any error is theirs
        raise ValueError(f"function={name_of(f)}: {what} cannot be pickled: {exc}") from None
    if len(blob) > PACKED_MAX:
        raise ValueError(
            f"function={name_of(f)}: {what} pickle to {len(blob)} bytes, more than "
            f"{PACKED_MAX} (put large data in a file and pass its path)"
        )
    return blob


FN_KEPT = 128  # functions a worker keeps unpickled (by their pickle)


def unpack_call(packed: dict, kept: dict | None = None, data: str | None = None) -> tuple:
    """(f, args, kwargs) of a packed call (either stored form); `kept`: functions unpickled
    before, by their pickle (a worker's: the same function's calls unpickle it once); `data`:
    the data directory its arguments may be a file of ({FILE_REF: NAME})."""
    import cloudpickle

    text = packed["pickle"]
    if "args" not in packed:
        obj = cloudpickle.loads(base64.b64decode(text))
        if isinstance(obj, tuple) and len(obj) == 3:  # the older form: the whole call
            return obj
        return obj, (), {}
    f = kept.get(text) if kept is not None else None
    if f is None:
        f = cloudpickle.loads(base64.b64decode(text))
        if kept is not None and len(text) <= FN_CACHE_BYTES:
            if len(kept) >= FN_KEPT:
                kept.pop(next(iter(kept)))
            kept[text] = f
    args = packed["args"]
    if type(args) is dict:  # (a reference: the bytes are a file of the data directory)
        if data is None:
            raise ValueError("the call's arguments are a file of a data directory it lacks")
        with open(data_file(data, args[FILE_REF]), "rb") as fh:
            args = fh.read()
    args, kwargs = cloudpickle.loads(unwrap(args))
    return f, args, kwargs


def data_file(data: str, name: str) -> str:
    """The path of file `name` of data directory `data` (ValueError: not a name the store
    makes, a path)."""
    if type(name) is not str or not name.isalnum() or not name.isascii() or len(name) > 64:
        raise ValueError(f"data file {name!r}: not a name the store makes")
    return os.path.join(data, name)


def value_name(uid: str) -> str:
    """The name of the data file the store writes unit `uid`'s bytes value to
    (pmgr/store/data_files.py `store_value`)."""
    import hashlib

    return "v" + hashlib.sha1(uid.encode(), usedforsecurity=False).hexdigest()


def put_data(
    data: str, blob: bytes | bytearray | memoryview, sync: bool = False, name: str | None = None
) -> str:
    """Write `blob` as a new file of data directory `data` (whole under a temporary name, then
    renamed: a reader never sees half of one; `sync`: on the disk before it is named, for a
    writer on another host than the directory's reader); its name (`name`, or a random one).
    A write that fails leaves no file."""
    import uuid

    if name is None:
        name = uuid.uuid4().hex
    tmp = os.path.join(data, f".{name}.{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(blob)
            if sync:
                fh.flush()
                os.fsync(fh.fileno())
        os.rename(tmp, os.path.join(data, name))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return name


def is_value_ref(value: Any) -> bool:
    """A return value that is a file of the data directory (VALUE_REF + NAME)."""
    return type(value) is str and value.startswith(VALUE_REF)


_PACKED_KEYS = (frozenset(("name", "pickle")), frozenset(("name", "pickle", "args")))


def is_packed(value: Any) -> bool:
    if not (
        isinstance(value, dict)
        and value.keys() in _PACKED_KEYS
        and type(value["name"]) is str
        and type(value["pickle"]) is str
    ):
        return False
    args = value.get("args", "")
    if type(args) is dict:  # a reference: {FILE_REF: NAME}
        return args.keys() == {FILE_REF} and type(args[FILE_REF]) is str and len(args) == 1
    return type(args) in (str, bytes)


def packed_size(value: dict) -> int:
    """Bytes of a packed call's pickles (a reference's: its name's)."""
    args = value.get("args", "")
    return _size(value["pickle"]) + (len(args[FILE_REF]) if type(args) is dict else _size(args))


def resolve(name: str):
    """The object a dotted name names: "pkg.mod.func", or "pkg.mod:Class.method"."""
    import importlib

    if ":" in name:
        mod_name, attrs = name.split(":", 1)
        obj = importlib.import_module(mod_name)
    else:
        parts = name.split(".")
        for i in range(len(parts) - 1, 0, -1):  # the longest importable module prefix
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            attrs = ".".join(parts[i:])
            break
        else:
            raise ImportError(f"no module found for function name {name!r}")
    for attr in attrs.split("."):
        obj = getattr(obj, attr)
    return obj


class Timed:
    """A call's value with the seconds the call itself took in its worker (pilot/remote_call.py
    `call_with`: every call alone of a front door, which learns from it how long its
    function's calls take).  `unpack_value` gives the value alone."""

    __slots__ = ("value", "seconds")

    def __init__(self, value: Any, seconds: float) -> None:
        self.value, self.seconds = value, seconds

    def __reduce__(self):
        return Timed, (self.value, self.seconds)


def unpack_value(value: str | bytes | None) -> Any:
    """A return value as the worker packed it (`wrap`: base64 text or bytes; None stays None;
    a Timed value is its value)."""
    if value is None:
        return None
    obj = pickle.loads(unwrap(value))
    return obj.value if type(obj) is Timed else obj


def unpack_timed(value: str | bytes | None) -> tuple[Any, float | None]:
    """A return value as the worker packed it, and the seconds its call took when it is a
    Timed one (else None): one unpickling for both."""
    if value is None:
        return None, None
    obj = pickle.loads(unwrap(value))
    return (obj.value, float(obj.seconds)) if type(obj) is Timed else (obj, None)


def pythontask(f):
    """RADICAL-Pilot 1.x's @rp.pythontask: calling the decorated function gives its call,
    packed (a TaskDescription's `function`, run by a worker), instead of running it.  (The
    call holds `f` itself by value: the module's name for it is this wrapper.)"""
    if not callable(f):
        raise ValueError(f"pythontask: {f!r} is not callable")

    @functools.wraps(f)
    def call(*args, **kwargs) -> dict:
        return pack(f, args, kwargs)

    return call
