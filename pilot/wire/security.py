"""Who may talk to a pilot: ZeroMQ CURVE on every channel, loopback included.

Threat model: the login node and the compute nodes are shared with other users, and so is the
network between them; loopback is no boundary (any local user can connect to 127.0.0.1).
Trusted: processes of the user who owns the session, who can read its key directory.
Refused: everything else.  Every listening socket (the client's pilot link, the bootstrap's
control socket, agent channel and node channel, each node daemon's unit channel) is a CURVE
server; every socket that talks to one (bootstrap, agents, daemons, the `pilot` CLI, a client
that attaches) is a CURVE client with the session's keys:

    SESSION_DIR/keys/            mode 0700, made by the client once per session
        server.key, server.key_secret    the servers' key pair
        client.key, client.key_secret    the clients' key pair
        allowed/client.key               the public keys a server accepts
The directory's path reaches the bootstrap in its config and the daemons on their command line;
the files are only readable by the user (0600).  Each server process runs a ZAP authenticator
thread (`_Zap`: the ZAP protocol, RFC 27, on inproc://zeromq.zap.01; pyzmq's own
ThreadAuthenticator costs ~85 ms of imports at every pilot start) that admits only keys in
allowed/: a peer without keys
cannot complete the handshake (CURVE against NULL), one with other keys is refused and the
refusal logged ("refused a peer with an unknown CURVE key", pilot.wire.security logger, in the
process's log).  Nothing such a peer sends is ever delivered.  The session directory is 0700,
so another user cannot read the keys, the store or the unit sandboxes below it.
Not defended: root on any node, and anything running as the session's user (both can read the
keys); a file system shared with the compute nodes that does not honour modes; floods of
connection attempts (each is refused, none is acted on, but they cost the refusing process).
Every listener binds one address, never 0.0.0.0: 127.0.0.1 for what stays on a node, the address
a node reaches its peers from for what crosses hosts (pilot/config/network.py).
"""

from __future__ import annotations

import logging
import os
import threading

import zmq
from zmq.utils import z85

log = logging.getLogger("pilot.wire.security")


def make_keys(session_dir: str) -> str:
    """The session's key directory, created on first use; returns its path."""
    keys = os.path.join(session_dir, "keys")
    if os.path.isfile(os.path.join(keys, "client.key_secret")):
        return keys
    old = os.umask(0o077)
    try:
        os.makedirs(os.path.join(keys, "allowed"), exist_ok=True)
        for name in ("server", "client"):
            public, secret = zmq.curve_keypair()
            _write_certificate(os.path.join(keys, f"{name}.key"), public)
            _write_certificate(os.path.join(keys, f"{name}.key_secret"), public, secret)
        with open(os.path.join(keys, "client.key")) as src:
            with open(os.path.join(keys, "allowed", "client.key"), "w") as dst:
                dst.write(src.read())
    finally:
        os.umask(old)
    for root, _dirs, files in os.walk(keys):
        os.chmod(root, 0o700)
        for f in files:
            os.chmod(os.path.join(root, f), 0o600)
    return keys


def _write_certificate(path: str, public: bytes, secret: bytes | None = None) -> None:
    """A certificate in ZeroMQ's ZPL format (as zmq.auth writes and reads them)."""
    lines = ["curve", f'    public-key = "{public.decode()}"']
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode()}"')
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def load_certificate(path: str) -> tuple[bytes, bytes | None]:
    """(public, secret or None), z85, from a ZPL certificate; OSError/ValueError if unreadable."""
    found = {}
    with open(path) as f:
        for line in f:
            key, eq, value = line.strip().partition("=")
            if eq and key.strip() in ("public-key", "secret-key"):
                found[key.strip()] = value.strip().strip('"').encode()
    if "public-key" not in found:
        raise ValueError(f"{path}: no public-key in the certificate")
    return found["public-key"], found.get("secret-key")


class _Zap:
    """The ZAP handler of one process: admits CURVE clients whose key is in allowed/, logs
    every refusal; a thread with a REP socket, stopped (bounded) by `stop()`."""

    ENDPOINT = "inproc://zeromq.zap.01"

    def __init__(self, ctx: zmq.Context, allowed: list[bytes]) -> None:
        self.allowed = set(allowed)  # z85 public keys
        self.sock = ctx.socket(zmq.REP)
        self.sock.linger = 0
        self.sock.bind(self.ENDPOINT)
        self.running = True
        self.thread = threading.Thread(target=self._run, name="zap", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.running:
            if not self.sock.poll(100):
                continue
            frames = self.sock.recv_multipart()
            try:
                self._answer(frames)
            except (IndexError, ValueError, zmq.ZMQError) as exc:  # never leave libzmq waiting
                log.error("ZAP request %r not understood: %s", frames[:2], exc)
                self.sock.send_multipart(
                    [
                        b"1.0",
                        frames[1] if len(frames) > 1 else b"",
                        b"500",
                        b"internal error",
                        b"",
                        b"",
                    ]
                )
        self.sock.close()

    def _answer(self, frames: list[bytes]) -> None:
        """One ZAP request: [version, request id, domain, address, identity, mechanism,
        credentials...]; the reply: [version, request id, status, text, user id, metadata]."""
        version, request_id = frames[0], frames[1]
        mechanism = frames[5] if len(frames) > 5 else b""
        key = z85.encode(frames[6]) if mechanism == b"CURVE" and len(frames) > 6 else b""
        ok = key in self.allowed
        if not ok:
            log.warning(
                "refused a peer with an unknown CURVE key %s... (%s)",
                key[:8].decode(errors="replace"),
                mechanism.decode(errors="replace"),
            )
        status = (b"200", b"OK") if ok else (b"400", b"unknown key")
        self.sock.send_multipart([version, request_id, *status, b"", b""])

    def stop(self) -> None:
        self.running = False
        self.thread.join(2.0)


class Keys:
    def __init__(self, keys_dir: str) -> None:
        self.dir = keys_dir
        self.server_public, self.server_secret = load_certificate(
            os.path.join(keys_dir, "server.key_secret")
        )
        self.client_public, self.client_secret = load_certificate(
            os.path.join(keys_dir, "client.key_secret")
        )
        self.auth: _Zap | None = None

    def allowed(self) -> list[bytes]:
        """The public keys (z85) in allowed/."""
        out = []
        d = os.path.join(self.dir, "allowed")
        for name in sorted(os.listdir(d)):
            public, _ = load_certificate(os.path.join(d, name))
            out.append(public)
        return out

    def serve(self, sock: zmq.Socket) -> None:
        """Make `sock` (before bind) a CURVE server; starts this process's ZAP handler."""
        if self.auth is None:
            self.auth = _Zap(sock.context, self.allowed())
        sock.curve_secretkey = self.server_secret
        sock.curve_publickey = self.server_public
        sock.curve_server = True

    def client(self, sock: zmq.Socket) -> None:
        """Make `sock` (before connect) a CURVE client of the pilot's servers."""
        sock.curve_secretkey = self.client_secret
        sock.curve_publickey = self.client_public
        sock.curve_serverkey = self.server_public

    def close(self) -> None:
        if self.auth is not None:
            self.auth.stop()
            self.auth = None


def load(keys_dir: str | None) -> Keys | None:
    return Keys(keys_dir) if keys_dir else None
