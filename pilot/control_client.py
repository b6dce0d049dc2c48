"""Commanding a running pilot from outside its client: the `pilot` CLI (pilot/cli.py) and
`pilot dashboard` (pmgr/observe/dashboard.py) reach it the same way, through this module.

A running pilot's bootstrap listens on its control socket (partition/control.py); its address
is in the pilot sandbox's control.json, found under the sessions directory.  One command is one
REQ socket, a CURVE client with the session's keys (SESSION_DIR/keys, pilot/wire/security.py: only
the user who runs the session can read them; the pilot refuses any other key):

    us -> bootstrap   {cid, op, args}                 (pilot/wire/protocol.py's pack)
    bootstrap -> us   {cid, ok: true, result} | {cid, ok: false, error}
No answer within REPLY_TIMEOUT: NoAnswer (a UsageError and a TimeoutError) naming the pilot;
keys that cannot be read: UsageError saying only the session's user may command it; the socket
itself failing (a control.json whose endpoint ZeroMQ refuses): zmq.ZMQError; an answer that is
not JSON: pilot.wire.protocol.ProtocolError.  A retry with the same cid is applied once
(partition/manager.py).

Sizes of partitions to start are written as the CLI's --start takes them (`parse_size`):
50% | fill | cores=4,gpus=1 | nodes=2 | gpus=all | config=NAME, and `reconfig_args` turns the
stop and start lists into the `reconfig` op's args.
"""

from __future__ import annotations

import os
import re

import zmq

from pilot.descriptions import ALL, FILL, ComputePartitionDescription
from pilot.wire import security
from pilot.wire.protocol import pack, unpack

REPLY_TIMEOUT = 10.0  # s a command waits for the pilot's answer
SIZE_KEYS = ("cores", "gpus", "nodes", "config")


class UsageError(Exception):
    """A command that cannot be carried out as asked (no such pilot, no answer, no keys)."""


class NoAnswer(UsageError, TimeoutError):
    """The pilot did not answer a command within its timeout."""


def parse_size(text: str, field: str = "--start") -> ComputePartitionDescription:
    """'50%', 'fill', 'cores=4,gpus=1', 'nodes=2', 'gpus=all' -> a partition description;
    ValueError naming `field`, the value and what is accepted (the description's own errors,
    cores=0 or 150%, as well)."""
    fields = _size_fields(text, field)
    try:
        return ComputePartitionDescription(**fields)
    except ValueError as exc:
        raise ValueError(f"{field} {text!r}: {exc}") from None


def _size_fields(text: str, field: str) -> dict:
    t = text.strip()
    if t.lower() == "fill":
        return {"size": FILL}
    if t.endswith("%"):
        return {"size": t}
    kwargs: dict = {}
    for item in t.split(","):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq and (key.endswith("%") or key.lower() == "fill"):
            raise ValueError(
                f"{field} {text!r}: {key!r} is a size of its own: give a share or fill alone, "
                "or cores=N, gpus=N|all, nodes=N, config=NAME"
            )
        if not eq or key not in SIZE_KEYS:
            raise ValueError(
                f"{field} {text!r}: {item!r} must be cores=N, gpus=N|all, nodes=N "
                "or config=NAME (or use 50% / fill)"
            )
        value = value.strip()
        if key in kwargs:
            raise ValueError(f"{field} {text!r}: {key}= is given twice")
        if key == "config":
            kwargs[key] = value
        elif key == "gpus" and value.lower() == "all":
            kwargs[key] = ALL
        elif value.isascii() and value.isdigit() and len(value) <= COUNT_DIGITS:  # (not '²')
            kwargs[key] = int(value)
        else:
            more = " or all" if key == "gpus" else ""
            raise ValueError(f"{field} {text!r}: {key}={value!r} must be a whole number >= 0{more}")
    return kwargs


COMMAND_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")  # a command id a person gives (--id)
COUNT_DIGITS = 9  # a count's digits at most (int() refuses 4,300 without naming the field)


def command_id(cid: str | None, field: str = "--id") -> str | None:
    """A command id as given, or ValueError naming `field` and what is accepted."""
    if cid is not None and (not isinstance(cid, str) or not COMMAND_ID.match(cid)):
        raise ValueError(f"{field}={cid!r:.80} must be 1-64 of A-Z a-z 0-9 . _ : -")
    return cid


def reconfig_args(stop: list[str], start: list[str], field: str = "--start") -> dict:
    """The `reconfig` op's args: `stop` partition uids ('all' anywhere in it: every one),
    `start` sizes as parse_size reads them (the i-th named `field`, or `field`[i] for a list
    field such as the dashboard's)."""
    if any(s.lower() == "all" for s in stop) and len(stop) > 1:
        raise ValueError(f"stop={list(stop)}: 'all' stops every partition; give it alone")
    stop_arg = ALL if any(s.lower() == "all" for s in stop) else list(stop)
    named = (lambda i: field) if field.startswith("--") else (lambda i: f"{field}[{i}]")
    return {
        "stop": stop_arg,
        "start": [parse_size(s, named(i)).to_stored() for i, s in enumerate(start)],
    }


def command(
    control: dict, op: str, args: dict, cid: str | None = None, timeout: float = REPLY_TIMEOUT
) -> dict:
    """Send one command to the pilot of `control` (control.json plus "keys": the session's
    key directory) and return its reply, waiting at most `timeout` s (module docstring)."""
    ctx: zmq.Context = zmq.Context.instance()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, int(timeout * 1000))
    try:
        try:
            security.Keys(control["keys"]).client(sock)  # the pilot admits the session's keys
        except OSError as exc:
            raise UsageError(
                f"cannot read the session's keys ({exc}): only the user who runs "
                f"{control['pilot']} may command it"
            ) from None
        sock.connect(control["endpoint"])
        cid = cid or f"cli.{os.getpid()}.{os.urandom(4).hex()}"
        sock.send(pack({"cid": cid, "op": op, "args": args}))
        try:
            return unpack(sock.recv())
        except zmq.Again:
            raise NoAnswer(f"{control['pilot']} did not answer within {timeout:g} s") from None
    finally:
        sock.close()
