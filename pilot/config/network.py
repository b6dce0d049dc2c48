"""This node's descriptor, as a pilot's bring-up needs it (`pilot network-config`).

    {0: {name, host_id, ip_addrs, is_primary, num_cpus, gpus, physical_mem, state}}

keyed by node index, primary (index 0) first.  `load()` reads such a file back (YAML or JSON)
and checks every field, naming the node and field that are wrong.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import shutil
import socket
import struct
import subprocess

from pilot import processes

FIELDS = {
    "name": str,
    "host_id": int,
    "ip_addrs": list,
    "is_primary": bool,
    "num_cpus": int,
    "gpus": list,
    "physical_mem": int,
    "state": str,
}
STATES = ("up", "down")
_SIOCGIFADDR = 0x8915


def host_id() -> int:
    """gethostid(3): the id the C library gives this host (from /etc/hostid or the address)."""
    return ctypes.CDLL(None).gethostid() & 0xFFFFFFFF


def interface_address(name: str) -> str | None:
    """The IPv4 address of network interface `name` on this host, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            raw = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(raw[20:24])


def host_addresses() -> list[str]:
    """Every IPv4 address of this host's network interfaces, loopback last (where a pilot's
    job may reach this host from: the client listens on all of them and the job probes)."""
    out = []
    for _, name in socket.if_nameindex():
        addr = interface_address(name)
        if addr is not None and addr not in out:
            out.append(addr)
    try:  # (the address of its name, for hosts whose interfaces say little)
        named = socket.gethostbyname(socket.gethostname())
        if named not in out:
            out.append(named)
    except OSError:
        pass
    return sorted(out, key=lambda a: a.startswith("127."))


def resolve_address(where: str, spec: str) -> str:
    """An address to listen on, from an IP address, a network interface name of this host
    (`ib0`, `eth0`), or `auto` (the address of this host's name); ValueError naming `where`."""
    import ipaddress

    if not isinstance(spec, str) or not spec:
        raise ValueError(f"{where}={spec!r} must be an IP address, an interface name or 'auto'")
    try:
        return str(ipaddress.ip_address(spec))
    except ValueError:
        pass
    if spec == "auto":
        return socket.gethostbyname(socket.gethostname())
    found = interface_address(spec)
    if found is None:
        names = sorted(name for _, name in socket.if_nameindex())
        raise ValueError(
            f"{where}={spec!r} must be an IP address, a network interface of this host "
            f"({', '.join(names)}) or 'auto'"
        )
    return found


def source_address(endpoint: str) -> str:
    """The local address this host uses to reach `endpoint`'s host (the route's source; no
    packet is sent).  A pilot's processes listen there: whoever they reach can reach them."""
    host = endpoint.split("://", 1)[1].rsplit(":", 1)[0]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))
        return s.getsockname()[0]


def listen_address(spec: str, toward: str) -> str:
    """Where a pilot's process listens for its peers: an IP address, an interface name, or
    `auto` = the address this host reaches `toward` (an endpoint) from."""
    if spec == "auto":
        return source_address(toward)
    return resolve_address("address", spec)


def ip_addrs() -> list[str]:
    """This host's IPv4 and global IPv6 addresses, loopback left out."""
    addrs = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            if name == "lo":
                continue
            try:
                raw = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()))
            except OSError:
                continue  # no IPv4 address on it
            addrs.append(socket.inet_ntoa(raw[20:24]))
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                hexaddr, _, _, scope, _, dev = line.split()
                if dev != "lo" and scope == "00":  # global scope only
                    addrs.append(str(socket.inet_ntop(socket.AF_INET6, bytes.fromhex(hexaddr))))
    except OSError:
        pass
    return addrs


def gpus() -> list[int]:
    """GPU ids this process may use: CUDA_VISIBLE_DEVICES when set, else what nvidia-smi lists."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [i for i, v in enumerate(visible.split(",")) if v.strip()]
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10
            ).stdout
            return [i for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]
        except (OSError, subprocess.TimeoutExpired):
            return []
    return []


def describe(is_primary: bool = True) -> dict:
    return {
        "name": socket.gethostname(),
        "host_id": host_id(),
        "ip_addrs": ip_addrs(),
        "is_primary": is_primary,
        "num_cpus": len(os.sched_getaffinity(0)),
        "gpus": gpus(),
        "physical_mem": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "state": "up",
    }


def network_config(this_node_only: bool = False, timeout: float = 60.0) -> dict[int, dict]:
    """This node's descriptor, or, inside a SLURM allocation (SLURM_JOB_ID set, not already in
    a job step), every allocated node's: one `srun` task per node describes its node.  The
    node running this is the primary (index 0) when it is one of them, else the first one."""
    in_allocation = os.environ.get("SLURM_JOB_ID") and not os.environ.get("SLURM_STEP_ID")
    if this_node_only or not in_allocation:
        return {0: describe(is_primary=True)}
    nodes = os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or "1"
    cmd = [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        *processes.python_m(processes.CLI, "network-config", "--this-node", "--format", "json"),
    ]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ValueError(f"network-config: srun over the allocation failed: {exc}") from None
    if out.returncode != 0:
        raise ValueError(f"network-config: srun exited {out.returncode}: {out.stderr.strip()}")
    found, dec, text = [], json.JSONDecoder(), out.stdout.strip()
    while text:  # one JSON object per node, concatenated
        obj, end = dec.raw_decode(text)
        found.append(obj["0"])
        text = text[end:].strip()
    here = socket.gethostname()
    found.sort(key=lambda n: (n["name"] != here, n["name"]))
    return {i: dict(n, is_primary=i == 0) for i, n in enumerate(found)}


def dump(config: dict, fmt: str) -> str:
    import yaml  # here, not at the top: node daemons import this module and never need it

    if fmt == "json":
        return json.dumps({str(k): v for k, v in config.items()}, indent=1) + "\n"
    if fmt == "yaml":
        return yaml.safe_dump(config, sort_keys=False)
    raise ValueError(f"format={fmt!r} must be yaml or json")


def load(path: str) -> dict[int, dict]:
    """A network config file (YAML or JSON), checked; ValueError names node and field."""
    import yaml

    try:
        with open(path) as f:
            raw = yaml.safe_load(f)  # JSON is YAML
    except OSError as exc:
        raise ValueError(f"network_config={path!r}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"network_config={path!r}: not YAML or JSON ({exc})") from None
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"network_config={path!r}: must map node index to a node descriptor")
    nodes = {}
    for key, node in raw.items():
        try:
            index = int(key)
        except (TypeError, ValueError):
            raise ValueError(f"network_config: node key {key!r} must be an index") from None
        where = f"network_config node {index}"
        if not isinstance(node, dict):
            raise ValueError(f"{where}: must be a mapping of {sorted(FIELDS)}")
        missing = sorted(set(FIELDS) - set(node))
        if missing:
            raise ValueError(f"{where}: missing field(s) {missing}")
        for field, typ in FIELDS.items():
            value = node[field]
            if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
                raise ValueError(f"{where}: {field}={value!r} must be of type {typ.__name__}")
        if node["state"] not in STATES:
            raise ValueError(f"{where}: state={node['state']!r} must be one of {STATES}")
        nodes[index] = node
    if sorted(nodes) != list(range(len(nodes))):
        raise ValueError(
            f"network_config: node indices {sorted(nodes)} must be 0..{len(nodes) - 1}"
        )
    primaries = [i for i, n in nodes.items() if n["is_primary"]]
    if primaries != [0]:
        raise ValueError(
            f"network_config: the primary must be node 0, and only it; is_primary on {primaries}"
        )
    return dict(sorted(nodes.items()))
