"""Test hosts: network namespaces joined by veth links on a bridge, made and removed by tests.

    with TestHosts(3) as hosts:        # namespaces <tag>c (the client's) and <tag>h1..h3
        hosts.run_in(hosts.ctl, argv)  # a command inside a namespace (nsenter --net)

Layout: the bridge br0 lives inside the client namespace <tag>c with 10.214.0.1/24; host k gets
10.214.0.(10+k) on its eth0, the other end of the veth pair enslaved to br0.  While the namespaces
exist the root namespace holds a `blackhole 10.214.0.0/24` route, so nothing from the root
namespace can ever be routed off the machine towards that subnet; nothing here addresses a
namespace IP from the root namespace.  `cut(k)` takes host k's link down on the bridge side:
the host's daemon starts, but nothing it sends arrives (a node that never reports).

Needs root, `ip` (iproute2) and `nsenter` (util-linux); `unavailable()` says why not.
"""

from __future__ import annotations

import os
import shutil
import subprocess

SUBNET = "10.214.0"


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "network-namespace test hosts need root (ip netns add)"
    for tool in ("ip", "nsenter"):
        if shutil.which(tool) is None:
            return f"network-namespace test hosts need `{tool}` (apt install iproute2 util-linux)"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


class TestHosts:
    __test__ = False  # not a pytest test class

    def __init__(self, k: int, tag: str | None = None) -> None:
        self.k = k
        self.tag = tag or f"pt{os.getpid() % 100000}"
        self.ctl = f"{self.tag}c"
        self.hosts = [f"{self.tag}h{i}" for i in range(1, k + 1)]
        self.made: list[str] = []
        self.route_added = False

    def addr(self, i: int) -> str:
        """Address of host i (1-based); 0 = the client namespace."""
        return f"{SUBNET}.{1 if i == 0 else 10 + i}"

    def __enter__(self) -> TestHosts:
        try:
            routes = subprocess.run(
                ["ip", "route", "show", "type", "blackhole"], capture_output=True, text=True
            ).stdout
            if f"{SUBNET}.0/24" not in routes:
                _ip("route", "add", "blackhole", f"{SUBNET}.0/24")
                self.route_added = True
            self._ns(self.ctl)
            _ip("-n", self.ctl, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.ctl, "addr", "add", f"{self.addr(0)}/24", "dev", "br0")
            _ip("-n", self.ctl, "link", "set", "br0", "up")
            for i, host in enumerate(self.hosts, 1):
                self._ns(host)
                _ip(
                    "-n",
                    self.ctl,
                    "link",
                    "add",
                    f"v{i}",
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    host,
                )
                _ip("-n", self.ctl, "link", "set", f"v{i}", "master", "br0", "up")
                _ip("-n", host, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
                _ip("-n", host, "link", "set", "eth0", "up")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _ns(self, name: str) -> None:
        if os.path.exists(f"/run/netns/{name}"):
            _ip("netns", "del", name)  # left by a run that was killed
        _ip("netns", "add", name)
        self.made.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def cut(self, i: int) -> None:
        _ip("-n", self.ctl, "link", "set", f"v{i}", "down")

    def run_in(self, ns: str, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["nsenter", f"--net=/run/netns/{ns}", *argv], **kw)

    def __exit__(self, *exc) -> None:
        for name in reversed(self.made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=20)
        self.made.clear()
        if self.route_added:
            subprocess.run(
                ["ip", "route", "del", "blackhole", f"{SUBNET}.0/24"], capture_output=True
            )
            self.route_added = False

    def left(self) -> list[str]:
        """Namespaces of this tag that still exist."""
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        return [line.split()[0] for line in out.splitlines() if line.startswith(self.tag)]
