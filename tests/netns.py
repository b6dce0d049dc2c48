"""Test hosts: network namespaces joined by veth links on a bridge, made and removed by tests.

    with TestHosts(3) as hosts:        # namespaces <tag>c (the client's) and <tag>h1..h3
        hosts.run_in(hosts.ctl, argv)  # a command inside a namespace (nsenter --net)

Layout: the bridge br0 lives inside the client namespace <tag>c with 10.214.0.1/24; host k gets
10.214.0.(10+k) on its eth0, the other end of the veth pair enslaved to br0.  While the namespaces
exist the root namespace holds a `blackhole 10.214.0.0/24` route, so nothing from the root
namespace can ever be routed off the machine towards that subnet; nothing here addresses a
namespace IP from the root namespace.  `cut(k)` takes host k's link down on the bridge side:
the host's daemon starts, but nothing it sends arrives (a node that never reports).
`silence(k)` / `mend(k)` make host k's link drop every packet, both ways, and then carry them
again: an outage as a failed switch makes it, which neither end is told of.  (`cut` is not that
for TCP: with its veth peer down, the host's own sends fail at once and its TCP retries every
0.5 s; behind a silent drop both ends back off, 0.2, 0.4, 0.8 ... s between retransmissions,
so a 4.2 s outage is 7.1 s of silence on a plain TCP connection, measured here.)  The drops
are tc qdiscs on the bridge side of the link, in the client namespace: a `pfifo limit 0` on
its egress (to the host) and, on its ingress (from the host), a redirect to a sink veth
whose own `pfifo limit 0` drops it (this kernel has neither netem nor the drop action).

Needs root, `ip` and `tc` (iproute2) and `nsenter` (util-linux); `unavailable()` says why not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

SUBNET = "10.214.0"


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "network-namespace test hosts need root (ip netns add)"
    for tool in ("ip", "tc", "nsenter"):
        if shutil.which(tool) is None:
            return f"network-namespace test hosts need `{tool}` (apt install iproute2 util-linux)"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


def _tc(ns: str, *args: str) -> None:
    out = subprocess.run(["tc", "-n", ns, *args], capture_output=True, text=True, timeout=20)
    if out.returncode != 0:
        raise RuntimeError(f"tc -n {ns} {' '.join(args)}: {out.stderr.strip()}")


def silence(ctl: str, i: int) -> None:
    """Host i's link (bridge side in namespace `ctl`) drops everything, both ways, silently."""
    if subprocess.run(["ip", "-n", ctl, "link", "show", "sink0"], capture_output=True).returncode:
        _ip("-n", ctl, "link", "add", "sink0", "type", "veth", "peer", "name", "sink1")
        _ip("-n", ctl, "link", "set", "sink1", "up")
        _ip("-n", ctl, "link", "set", "sink0", "up")
        _tc(ctl, "qdisc", "add", "dev", "sink0", "root", "pfifo", "limit", "0")
    _tc(ctl, "qdisc", "add", "dev", f"v{i}", "root", "pfifo", "limit", "0")
    _tc(ctl, "qdisc", "add", "dev", f"v{i}", "ingress")
    _tc(
        ctl,
        *("filter", "add", "dev", f"v{i}", "parent", "ffff:", "protocol", "all", "u32"),
        *("match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", "sink0"),
    )


def silence_between(ctl: str, i: int, addr: str) -> None:
    """Host i's link drops what it carries to and from `addr` (an address in namespace
    `ctl`, the login node's), silently, and carries the rest (host i's traffic with the other
    hosts): a path between two hosts cut, their links to the others up.  `mend(ctl, i)` ends
    it.  Egress: an htb qdisc (this kernel has no prio) whose second class, a `pfifo limit 0`,
    takes what comes from `addr`; ingress: what goes to `addr` redirected to the sink (as
    `silence`)."""
    if subprocess.run(["ip", "-n", ctl, "link", "show", "sink0"], capture_output=True).returncode:
        _ip("-n", ctl, "link", "add", "sink0", "type", "veth", "peer", "name", "sink1")
        _ip("-n", ctl, "link", "set", "sink1", "up")
        _ip("-n", ctl, "link", "set", "sink0", "up")
        _tc(ctl, "qdisc", "add", "dev", "sink0", "root", "pfifo", "limit", "0")
    dev = f"v{i}"
    _tc(ctl, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1")
    for cls in ("1:1", "1:2"):
        _tc(ctl, "class", "add", "dev", dev, "parent", "1:", "classid", cls, "htb", "rate",
            "10gbit")  # fmt: skip
    _tc(ctl, "qdisc", "add", "dev", dev, "parent", "1:2", "handle", "20:", "pfifo", "limit", "0")
    _tc(ctl, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
        "match", "ip", "src", f"{addr}/32", "flowid", "1:2")  # fmt: skip
    _tc(ctl, "qdisc", "add", "dev", dev, "ingress")
    _tc(
        ctl,
        *("filter", "add", "dev", dev, "parent", "ffff:", "protocol", "ip", "u32"),
        *("match", "ip", "dst", f"{addr}/32"),
        *("action", "mirred", "egress", "redirect", "dev", "sink0"),
    )


def mend(ctl: str, i: int) -> None:
    """Host i's link carries packets again (after `silence`)."""
    _tc(ctl, "qdisc", "del", "dev", f"v{i}", "root")
    _tc(ctl, "qdisc", "del", "dev", f"v{i}", "ingress")


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

    def silence(self, i: int) -> None:
        silence(self.ctl, i)

    def mend(self, i: int) -> None:
        mend(self.ctl, i)

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


SSH_OPTIONS = (
    "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no", "-o", "LogLevel=ERROR",
    "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=5",
)  # fmt: skip


def sshd_unavailable() -> str | None:
    for tool in ("/usr/sbin/sshd", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"ssh test hosts need `{tool}` (apt install openssh-server openssh-client)"
    return unavailable()


class Sshd:
    """An OpenSSH server in each host namespace of `hosts` (listening on the host's address,
    port 22), taking one key made here for root: the ssh and mpiexec launch methods' test
    hosts.  `options` are what an ssh client needs to reach them; `wrapper` is an ssh command
    with those options (for mpiexec's `-launcher-exec`).  Servers are started and stopped by
    pid, each wait bounded."""

    __test__ = False

    def __init__(self, hosts: TestHosts, folder) -> None:
        self.hosts = hosts
        self.dir = str(folder)
        self.procs: list[subprocess.Popen] = []
        key = os.path.join(self.dir, "id_ed25519")
        self.options = ["-i", key, *SSH_OPTIONS]
        self.wrapper = os.path.join(self.dir, "ssh")

    def __enter__(self) -> Sshd:
        os.makedirs(self.dir, exist_ok=True)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation
        for name in ("id_ed25519", "host_ed25519"):
            path = os.path.join(self.dir, name)
            if not os.path.exists(path):
                subprocess.run(
                    ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path],
                    check=True,
                    capture_output=True,
                    timeout=20,
                )
        shutil.copy(os.path.join(self.dir, "id_ed25519.pub"), os.path.join(self.dir, "keys"))
        conf = os.path.join(self.dir, "sshd_config")
        with open(conf, "w") as f:
            f.write(
                f"HostKey {self.dir}/host_ed25519\nAuthorizedKeysFile {self.dir}/keys\n"
                "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile none\n"
                "LogLevel ERROR\nMaxStartups 100\nMaxSessions 100\n"
            )
        with open(self.wrapper, "w") as f:
            f.write(f'#!/bin/sh\nexec ssh {" ".join(self.options)} "$@"\n')
        os.chmod(self.wrapper, 0o755)
        try:
            for i, host in enumerate(self.hosts.hosts, 1):
                argv = ["/usr/sbin/sshd", "-D", "-e", "-f", conf]
                argv += ["-o", f"ListenAddress={self.hosts.addr(i)}"]
                with open(os.path.join(self.dir, f"sshd.{i}.log"), "ab") as log:
                    self.procs.append(
                        subprocess.Popen(
                            ["nsenter", f"--net=/run/netns/{host}", *argv],
                            stdin=subprocess.DEVNULL,
                            stdout=log,
                            stderr=subprocess.STDOUT,
                        )
                    )
            self._wait_up()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_up(self, timeout: float = 20.0) -> None:
        """Each server answers (ssh true from the client namespace), within `timeout`."""
        deadline = time.monotonic() + timeout
        for i in range(1, len(self.hosts.hosts) + 1):
            while True:
                out = self.hosts.run_in(
                    self.hosts.ctl,
                    ["ssh", *self.options, self.hosts.addr(i), "true"],
                    capture_output=True,
                    timeout=20,
                )
                if out.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd on host {i} did not answer: {out.stderr[-300:]}")
                time.sleep(0.1)

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        self.procs.clear()
