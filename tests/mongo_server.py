"""A MongoDB-wire-compatible server for the tests: SecantusDB (`secantusd-py`, from PyPI) on
127.0.0.1 and a free port, started and stopped (by pid) by the tests themselves.  When
MONGODB_URI is set, the tests use that server instead and start nothing."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid

import pymongo


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_database(uri: str, name: str) -> str:
    """`uri` with its database path set to `name` (query string kept)."""
    base, q, query = uri.partition("?")
    scheme, rest = base.split("://", 1)
    hosts = rest.split("/", 1)[0]
    return f"{scheme}://{hosts}/{name}" + (q + query if q else "")


class MongoServer:
    def __init__(self, storage: str, port: int | None = None) -> None:
        self.storage = storage
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.url = f"mongodb://127.0.0.1:{self.port}/"

    @staticmethod
    def binary() -> str | None:
        exe = shutil.which("secantusd-py")
        if exe is None:
            cand = os.path.join(os.path.dirname(sys.executable), "secantusd-py")
            exe = cand if os.path.exists(cand) else None
        return exe

    def start(self, timeout: float = 60.0) -> None:
        exe = self.binary()
        if exe is None:
            raise RuntimeError("secantusd-py not found: pip install SecantusDB (the test extra)")
        log = open(os.path.join(self.storage, "..", f"secantus-{self.port}.log"), "ab")
        self.proc = subprocess.Popen(
            [
                exe,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--storage-path",
                self.storage,
                "--log-level",
                "WARNING",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                c = pymongo.MongoClient(self.url, serverSelectionTimeoutMS=500)
                c.admin.command("ping")
                c.close()
                return
            except pymongo.errors.PyMongoError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"secantusd-py exited with {self.proc.returncode}") from None
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"secantusd-py did not answer within {timeout:g} s"
                    ) from None
                time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """End the server (SIGKILL: as a crash would, with no chance to flush)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def database_url(self) -> str:
        return with_database(self.url, f"pilot_test_{uuid.uuid4().hex[:8]}")
