"""A call of the front doors (rp.Executor, pilot.parsl): how the client packs it, how a
partition's function worker runs it, and how its exception comes back.

A call is packed once, in the caller's thread (`prepare`): the user's function as
pilot/functions.py pickles it (made once: pilot/functions.py keeps it for plain functions,
made again when a global it reads was rebound; this module for builtins), and its arguments
(pickle's C pickler when it can say them: plain data, importable objects; cloudpickle
otherwise).  A front door submits a call as a function unit of its own, or several short calls
as one unit (a bundle, pmgr/compat/futures/executor.py says when), whose function is `call` or
`call_many`:

    one     {"name": "mod.user_function",
             "pickle": base64(pickle(partial(call_with, fn_text, cwd, timed))),
             "args": wrap(args_blob)}       (the call's own pickle: never pickled again)
    bundle  {"name": "mod.user_function+", "pickle": base64(cloudpickle(call_many)),
             "args": wrap(pickle((([(fn_text, args_blob), ...], cwd), {})))}

(pilot/functions.py's `wrap`: base64 text, or the bytes themselves from functions.LARGE on,
which then cross every hop as a frame of their own.)

(`call_with` and `call_many` travel by reference: this module; a call alone's bound runner is
made once per function, directory and `timed`, and its worker unpickles it once: the unit's
"pickle" text is the same for every call of a function.)  In the worker, a user's function
is unpickled once per worker (kept by its pickle text: one sent again costs a dictionary
look-up) and called in `cwd` when one is given (and the worker goes back).  An exception is not
let out of the worker as text: it comes back as the call's value, a `Raised` (the exception
object when it pickles both ways, its traceback text always; the traceback also goes to the
unit's stderr), so the client gets the original type back, as ProcessPoolExecutor and Parsl's
executors give it.  Such a unit ends DONE: the call ran to its end and its outcome is the
exception.  A bundle's value is the list of its calls' values (or Raised) and the seconds they
took, in order; a timed call's is a functions.Timed: its value and the seconds the call itself
took, which the client's unit handle reads as the value alone.

Function workers import this module: it imports only the standard library and pilot/functions.py
(cloudpickle when a function arrives the first time).
"""

from __future__ import annotations

import base64
import functools
import itertools
import os
import pickle
import sys
import time
import traceback
import types
from typing import Any

from pilot import functions

FNS_KEPT = 64  # functions kept per worker, by their pickle text
_fns: dict[str, Any] = {}


# -- the worker's side ---------------------------------------------------------------------------
def call_with(fn_text: str, cwd: str | None, timed: bool, /, *args, **kwargs) -> Any:
    """A call alone: fn(*args, **kwargs) (the arguments unpickled by its worker, as any
    function unit's), in `cwd` if given; an exception comes back as a Raised; `timed`: the
    value is a functions.Timed, with the seconds fn(*args, **kwargs) itself took (not the
    worker's start, not the function's unpickling)."""
    back = _enter(cwd)
    try:
        try:
            fn = _function(fn_text)
        except BaseException as exc:  # (not loaded: no time to tell)
            return raised(exc)
        t0 = time.perf_counter()
        try:
            value = fn(*args, **kwargs)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt of a call are its outcome
            value = raised(exc)
        return functions.Timed(value, time.perf_counter() - t0) if timed else value
    finally:
        if back is not None:
            os.chdir(back)


def call(fn_text: str, blob: bytes, cwd: str | None = None) -> Any:
    """fn(*args, **kwargs) of a call packed whole in its unit's arguments (the form before
    `call_with`: a description stored by an earlier version runs the same), in `cwd` if given;
    an exception comes back as a Raised."""
    back = _enter(cwd)
    try:
        return _run(fn_text, blob)
    finally:
        if back is not None:
            os.chdir(back)


def call_many(calls: list, cwd: str | None = None) -> tuple[list, float]:
    """A bundle: each (fn_text, args_blob) in turn; their values (or Raised), and the
    seconds they took."""
    back = _enter(cwd)
    t0 = time.perf_counter()
    try:
        return [_run(fn_text, blob) for fn_text, blob in calls], time.perf_counter() - t0
    finally:
        if back is not None:
            os.chdir(back)


def _enter(cwd: str | None) -> str | None:
    if cwd is None:
        return None
    back = os.getcwd()
    os.chdir(cwd)
    return back


def _run(fn_text: str, blob: bytes) -> Any:
    try:
        fn, args, kwargs = _load(fn_text, blob)
        return fn(*args, **kwargs)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt of a call are its outcome
        return raised(exc)


def _load(fn_text: str, blob: bytes) -> tuple:
    """The function (unpickled once per worker) and the call's args and kwargs."""
    args, kwargs = pickle.loads(blob)
    return _function(fn_text), args, kwargs


def _function(fn_text: str) -> Any:
    fn = _fns.get(fn_text)
    if fn is None:
        import cloudpickle

        fn = cloudpickle.loads(base64.b64decode(fn_text))
        if len(_fns) >= FNS_KEPT:
            _fns.pop(next(iter(_fns)))  # the oldest
        _fns[fn_text] = fn
    return fn


def run_chunk(fn: Any, chunk: list) -> list:
    """Executor.map(chunksize > 1): fn over a chunk of argument tuples, in one unit."""
    return [fn(*args) for args in chunk]


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker: the `__cause__` of the exception a
    future gives back (as concurrent.futures.process does it), so it prints with it."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


class Raised:
    """A call's exception as its value: `exc` (None when it does not pickle both ways),
    `text` (the worker's traceback), `kind` ("Type: message")."""

    def __init__(self, exc: BaseException | None, text: str, kind: str) -> None:
        self.exc, self.text, self.kind = exc, text, kind

    def rebuild(self, fallback: type[Exception]) -> BaseException:
        """The exception to raise in the client, its traceback text as its cause."""
        exc = self.exc if self.exc is not None else fallback(self.kind)
        exc.__cause__ = RemoteTraceback(self.text)
        return exc

    def __repr__(self) -> str:
        return f"<Raised {self.kind}>"


def raised(exc: BaseException) -> Raised:
    text = traceback.format_exc()
    sys.stderr.write(text)  # (the worker captures it: the unit's stderr has the traceback)
    kind = f"{type(exc).__name__}: {exc}"[:4096]
    try:
        import cloudpickle

        pickle.loads(cloudpickle.dumps(exc))  # the client must be able to load it too
    except Exception:  # an exception that does not pickle both ways: its text comes back
        return Raised(None, text, kind)
    return Raised(exc, text, kind)


# -- the client's side ---------------------------------------------------------------------------
_TEXT: dict = {}  # call / call_many -> their pickle, made once
_RUNNERS: dict = {}  # (fn_text, cwd, timed) -> the pickle of call_with bound to them
RUNNERS_KEPT = 256
_BUILTIN_TEXT: dict = {}  # builtin functions of modules -> their pickle (by reference)


class Call:
    """A call as `prepare` packed it: its function's name and pickle, its arguments' pickle;
    and where it runs: `cwd` (None: the worker's directory) and `fields` (unit fields for the
    unit that runs it; None: its executor's)."""

    __slots__ = ("name", "fn_text", "blob", "cwd", "fields")

    def __init__(self, name: str, fn_text: str, blob: bytes) -> None:
        self.name, self.fn_text, self.blob = name, fn_text, blob
        self.cwd: str | None = None
        self.fields: dict | None = None


def prepare(fn, args: tuple, kwargs: dict) -> Call:
    """Pack fn(*args, **kwargs); TypeError when fn is not callable, ValueError when the call
    does not pickle or is larger than PACKED_MAX."""
    if not callable(fn):
        raise TypeError(f"{fn!r} is not callable")
    fn_text = _function_text(fn)
    blob = _dumps(fn, (args, kwargs))
    if len(blob) + len(fn_text) > functions.PACKED_MAX:
        raise ValueError(
            f"function={functions.name_of(fn)}: the call pickles to {len(blob)} bytes, more "
            f"than {functions.PACKED_MAX} (put large data in a file and pass its path)"
        )
    return Call(functions.name_of(fn), fn_text, blob)


def packed(calls: list[Call], cwd: str | None = None, timed: bool = False) -> dict:
    """A unit's packed function for one call (`call_with`; `timed`: its value comes back as
    a functions.Timed) or a bundle (`call_many`), run in `cwd` (the calls' own when None)."""
    cwd = cwd if cwd is not None else calls[0].cwd
    if len(calls) == 1:
        one = calls[0]
        key = (one.fn_text, cwd, timed)
        text = _RUNNERS.get(key)
        if text is None:
            runner = functools.partial(call_with, one.fn_text, cwd, timed)
            text = base64.b64encode(pickle.dumps(runner, 5)).decode()
            if len(one.fn_text) <= functions.FN_CACHE_BYTES:
                if len(_RUNNERS) >= RUNNERS_KEPT:
                    _RUNNERS.pop(next(iter(_RUNNERS)))  # the oldest
                _RUNNERS[key] = text
        # (the arguments' pickle is the unit's own: not pickled again, not copied)
        return {"name": one.name, "pickle": text, "args": functions.wrap(one.blob)}
    pairs = [(c.fn_text, c.blob) for c in calls]
    return _packed(call_many, calls[0].name + "+", (pairs, cwd))


def pack_call(fn, args: tuple, kwargs: dict, cwd: str | None = None) -> dict:
    """The packed function of a unit that calls fn(*args, **kwargs) (in `cwd`)."""
    return packed([prepare(fn, args, kwargs)], cwd)


def _packed(runner, name: str, args: tuple) -> dict:
    text = _TEXT.get(runner)
    if text is None:
        text = _TEXT[runner] = functions.pack(runner, (), {})["pickle"]
    blob = pickle.dumps((args, {}), 5)  # (the user's parts are pickles already: bytes, str)
    if len(blob) > functions.PACKED_MAX:
        raise ValueError(
            f"function={name}: the calls pickle to {len(blob)} bytes, more than "
            f"{functions.PACKED_MAX} (put large data in a file and pass its path)"
        )
    return {"name": name, "pickle": text, "args": functions.wrap(blob)}


def _function_text(fn) -> str:
    """The function's pickle: kept by pilot/functions.py for plain functions, here for builtin
    functions of modules (pickled by reference: never stale)."""
    if type(fn) is types.BuiltinFunctionType and isinstance(
        getattr(fn, "__self__", None), (types.ModuleType, type(None))
    ):
        text = _BUILTIN_TEXT.get(fn)
        if text is None:
            text = _BUILTIN_TEXT[fn] = functions.pack(fn, (), {})["pickle"]
        return text
    return functions.pack(fn, (), {})["pickle"]


def _dumps(fn, obj) -> bytes:
    """pilot/functions.py's `dumps` (pickle's C pickler when it can say it, measured: 1 us
    against cloudpickle's 7 us for two numbers; else cloudpickle), its error the user's."""
    try:
        return functions.dumps(obj)
    except Exception as exc:  # pickling runs user code (__reduce__): any error is theirs
        raise ValueError(
            f"function={functions.name_of(fn)}: its args and kwargs cannot be pickled: {exc}"
        ) from None


class ChunkCall:
    """Executor.map(chunksize > 1): one unit runs fn over a chunk of argument tuples."""

    def __init__(self, fn) -> None:
        self.fn = fn

    def __reduce__(self):  # (in the worker: run_chunk with fn bound)
        import functools

        return functools.partial, (run_chunk, self.fn)

    def __call__(self, chunk: list) -> list:
        return run_chunk(self.fn, chunk)


def chunks(items, size: int):
    """Lists of `size` items (the last one shorter)."""
    it = iter(items)
    while True:
        chunk = list(itertools.islice(it, size))
        if not chunk:
            return
        yield chunk
