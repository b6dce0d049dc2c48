"""Another local user (tests/test_cluster.py runs this as `nobody`) who found a pilot's ports.

    python3 tests/scenarios/intruder.py TARGETS.json

TARGETS: {control, link (optional), daemons: [endpoint], server_key, parts, units, files,
dirs, marker}
(what the pilot's user could see: ports from /proc/net/tcp, the server's public key, names).
For every endpoint it connects twice (no keys; keys of its own made against the server's public
key) and sends what would hurt: on the control socket attach (re-pointing the pilot link here),
cancel_pilot, reconfig, cancel_units; on the client's pilot link a forged `state` (units FAILED)
and `bye`; on each node daemon an `exec`; all of these at once, then 1.5 s for any answer
(one after another they took 1.5 s each).  It also tries to read the session's files and list
its directories.  Prints one JSON line: which ports a TCP connection reached, what got an
answer, what could be read.  Standalone on
purpose: the pyzmq it needs and nothing of the project.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

import zmq


def frames_for(kind: str, t: dict) -> list[list[bytes]]:
    def body(obj) -> bytes:
        return json.dumps(obj).encode()

    if kind == "control":
        ops = [
            ("attach", {"client": "tcp://127.0.0.1:9"}),
            ("cancel_pilot", {"reason": "intruder"}),
            ("reconfig", {"stop": [t["parts"][0]], "start": []}),
            ("cancel_units", {"uids": t["units"]}),
        ]
        return [[b"", body({"cid": f"x{i}", "op": op, "args": a})] for i, (op, a) in enumerate(ops)]
    if kind == "link":
        state = [["unit", u, "FAILED", 0, {"reason": "forged"}] for u in t["units"]]
        return [[b"state", body(state)], [b"bye", body({"state": "FAILED", "reason": "forged"})]]
    marker = t["marker"]  # a path only the pilot's user could create
    argv = ["/bin/sh", "-c", f"touch {marker}"]
    rank = {"uid": "x", "rank": 0, "argv": argv, "env": {}, "sandbox": "/tmp", "cpus": []}
    return [[b"exec", body({"env": {}, "ranks": [rank]})]]


def reaches(endpoint: str) -> bool:
    """A TCP connection to the port completes: only the keys stand in the way."""
    host, port = endpoint.split("://", 1)[1].rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        return True
    except OSError:
        return False


def knock(ctx, endpoint: str, frames: list[list[bytes]], server_key: str | None):
    """A socket that sent `frames` (what of them it could) to the endpoint."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if server_key is not None:
        sock.curve_publickey, sock.curve_secretkey = zmq.curve_keypair()
        sock.curve_serverkey = server_key.encode()
    sock.connect(endpoint)
    for f in frames:
        try:
            sock.send_multipart(f, zmq.NOBLOCK)
        except zmq.Again:
            break  # no connection completed: refused before a byte was sent
    return sock


def answered_within(socks: list, seconds: float) -> list[bool]:
    """Which of the sockets got anything back within `seconds` s of the last one's knock
    (the knocks all go out first: each is given the whole wait, at once)."""
    deadline = time.monotonic() + seconds
    got = [bool(s.poll(max(0, int((deadline - time.monotonic()) * 1000)))) for s in socks]
    for s in socks:
        s.close()
    return got


def main() -> int:
    with open(sys.argv[1]) as f:
        t = json.load(f)
    ctx = zmq.Context()
    answered = []
    targets = [("control", t["control"])] + ([("link", t["link"])] if t.get("link") else [])
    targets += [("daemon", d) for d in t["daemons"]]
    reached = [endpoint for _, endpoint in targets if reaches(endpoint)]
    knocks = [
        (kind, endpoint, key) for kind, endpoint in targets for key in (None, t["server_key"])
    ]
    socks = [knock(ctx, endpoint, frames_for(kind, t), key) for kind, endpoint, key in knocks]
    for (kind, endpoint, key), got in zip(knocks, answered_within(socks, 1.5)):
        if got:
            answered.append([kind, endpoint, key is not None])
    ctx.term()
    readable = []
    for path in t["files"]:
        try:
            with open(path, "rb") as f:
                f.read(1)
            readable.append(path)
        except OSError:
            pass
    for path in t["dirs"]:
        try:
            os.listdir(path)
            readable.append(path)
        except OSError:
            pass
    out = {"uid": os.getuid(), "reached": reached, "answered": answered, "readable": readable}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
