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
thread (pyzmq's ThreadAuthenticator) that admits only keys in allowed/: a peer without keys
cannot complete the handshake (CURVE against NULL), one with other keys is refused and the
refusal logged ("refused a peer with an unknown CURVE key", pilot.security logger, in the
process's log).  Nothing such a peer sends is ever delivered.  The session directory is 0700,
so another user cannot read the keys, the store or the unit sandboxes below it.
"""

from __future__ import annotations

import logging
import os

import zmq
import zmq.auth

log = logging.getLogger("pilot.security")


def make_keys(session_dir: str) -> str:
    """The session's key directory, created on first use; returns its path."""
    keys = os.path.join(session_dir, "keys")
    if os.path.isfile(os.path.join(keys, "client.key_secret")):
        return keys
    old = os.umask(0o077)
    try:
        os.makedirs(os.path.join(keys, "allowed"), exist_ok=True)
        for name in ("server", "client"):
            zmq.auth.create_certificates(keys, name)
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


class _Allowed:
    """ZAP check: only the session's client key; every refusal is logged."""

    def __init__(self, keys: Keys) -> None:
        self.allowed = set(keys.allowed())  # z85, as the authenticator passes them

    def callback(self, domain: str, key: bytes) -> bool:
        if key in self.allowed:
            return True
        log.warning("refused a peer with an unknown CURVE key %s...", key[:8].decode())
        return False


class Keys:
    def __init__(self, keys_dir: str) -> None:
        self.dir = keys_dir
        self.server_public, self.server_secret = zmq.auth.load_certificate(
            os.path.join(keys_dir, "server.key_secret")
        )
        self.client_public, self.client_secret = zmq.auth.load_certificate(
            os.path.join(keys_dir, "client.key_secret")
        )
        self.auth = None

    def allowed(self) -> list[bytes]:
        """The public keys (z85) in allowed/."""
        out = []
        d = os.path.join(self.dir, "allowed")
        for name in sorted(os.listdir(d)):
            public, _ = zmq.auth.load_certificate(os.path.join(d, name))
            out.append(public)
        return out

    def serve(self, sock: zmq.Socket) -> None:
        """Make `sock` (before bind) a CURVE server; starts this process's authenticator."""
        if self.auth is None:
            from zmq.auth.thread import ThreadAuthenticator

            self.auth = ThreadAuthenticator(sock.context, log=logging.getLogger("zmq.auth"))
            self.auth.start()
            self.auth.configure_curve_callback(domain="*", credentials_provider=_Allowed(self))
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
