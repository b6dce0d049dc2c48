"""Resource configs: where a pilot runs and what one node there offers.

A resource is named `SITE.NAME` and found in `configs/SITE.yaml` under key NAME, or given as the
path of a YAML file holding one resource config (the keys documented in configs/local.yaml).
Agent configs (how a partition's agent runs its units) are in configs/agents.yaml.
(yaml is imported where a file is read: node daemons and agents never pay for it.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

BATCH_SYSTEMS = ("local", "slurm")
LAUNCH_METHODS = ("fork", "netns", "srun")
NODE_FAILURE = ("continue", "fail")
NOT_RESOURCES = ("agents",)  # configs/agents.yaml holds agent configs, not resources
_KEYS = {
    "description",
    "batch_system",
    "launch_method",
    "nodes",
    "node_names",
    "cores_per_node",
    "gpus_per_node",
    "agent_overhead",
    "client_timeout",
    "python",
    "queue",
    "account",
    "psij_executor",
    "queue_poll_interval",
    "resource_pool",
    "node_daemons",
    "hosts",
    "address",
    "client_address",
    "fanout",
    "bringup_timeout",
    "node_timeout",
    "node_failure",
    "mpi_launcher",
}


MPI_LAUNCHERS = ("mpirun", "mpiexec", "srun")


@dataclass(frozen=True)
class AgentOverhead:
    cores: int = 0
    gpus: int = 0
    nodes: int = 0


@dataclass(frozen=True)
class ResourceConfig:
    name: str
    batch_system: str
    launch_method: str
    nodes: int
    cores_per_node: int
    gpus_per_node: int
    agent_overhead: AgentOverhead
    node_names: tuple[str, ...] = ()
    client_timeout: float = 60.0
    description: str | None = None
    python: str | None = None  # the interpreter on the nodes; None: the client's own
    queue: str | None = None
    account: str | None = None
    extra: dict = field(default_factory=dict)
    resource_pool: dict = field(default_factory=dict)  # per node: type -> [{id, slots}]
    node_daemons: bool = False
    hosts: tuple[str, ...] = ()
    address: str = "127.0.0.1"
    client_address: str | None = None  # where pilots reach the client (IP, interface, auto)
    fanout: int = 8
    bringup_timeout: float = 30.0
    node_timeout: float = 10.0
    node_failure: str = "continue"
    mpi_launcher: str | None = None  # how rp.MPI units start: mpirun | mpiexec | srun | a path

    def node_name(self, index: int) -> str:
        if self.node_names:
            return self.node_names[index]
        return "localhost" if self.nodes == 1 else f"node{index}"


def _count(name: str, key: str, value, auto: int | None = None) -> int:
    if value == "auto" and auto is not None:
        return auto
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        accepted = "an integer >= 0" + (' or "auto"' if auto is not None else "")
        raise ValueError(f"resource config {name}: {key}={value!r} must be {accepted}")
    return value


def parse_pool(where: str, raw, gpus: int) -> dict[str, list[dict]]:
    """A per-node resource pool: {type: count | [{id, slots}]} -> {type: [{id, slots}]}.

    `gpus` may only give slots to the node's GPUs (ids 0..gpus_per_node-1); `cpus` come from
    cores_per_node; any other name is a user-defined type (a count of 0 declares it empty)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(
            f"{where}: resource_pool={raw!r} must be a mapping of type to a count "
            "or a list of {id, slots}"
        )
    pool = {}
    for t, spec in raw.items():
        if t == "cpus" or not isinstance(t, str) or not t.isidentifier():
            raise ValueError(
                f"{where}: resource_pool type {t!r} must be gpus or a user-defined "
                "name (cpus come from cores_per_node)"
            )
        if isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
            inst = [{"id": i if t == "gpus" else str(i), "slots": 1} for i in range(spec)]
        elif isinstance(spec, list):
            inst = []
            for i, item in enumerate(spec):
                if not isinstance(item, dict) or "id" not in item or set(item) - {"id", "slots"}:
                    raise ValueError(
                        f"{where}: resource_pool.{t}[{i}]={item!r} must be {{id: ..., slots: N}}"
                    )
                slots = item.get("slots", 1)
                if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
                    raise ValueError(
                        f"{where}: resource_pool.{t}[{i}].slots={slots!r} must be an integer >= 1"
                    )
                inst.append({"id": item["id"] if t == "gpus" else str(item["id"]), "slots": slots})
        else:
            raise ValueError(
                f"{where}: resource_pool.{t}={spec!r} must be a count >= 0 or a "
                "list of {id, slots}"
            )
        if len({i["id"] for i in inst}) != len(inst):
            raise ValueError(f"{where}: resource_pool.{t} names an id twice")
        if t == "gpus" and sorted(i["id"] for i in inst) != list(range(gpus)):
            raise ValueError(
                f"{where}: resource_pool.gpus must list ids 0..{gpus - 1} (gpus_per_node={gpus})"
            )
        pool[t] = inst
    return pool


def parse(name: str, raw: dict) -> ResourceConfig:
    if not isinstance(raw, dict):
        raise ValueError(f"resource config {name}: must be a mapping, got {type(raw).__name__}")
    unknown = set(raw) - _KEYS
    if unknown:
        raise ValueError(
            f"resource config {name}: unknown key(s) {sorted(unknown)}; accepted: {sorted(_KEYS)}"
        )
    batch = raw.get("batch_system", "local")
    if batch not in BATCH_SYSTEMS:
        raise ValueError(
            f"resource config {name}: batch_system={batch!r} must be one of {BATCH_SYSTEMS}"
        )
    launch = raw.get("launch_method", "fork")
    if launch not in LAUNCH_METHODS:
        raise ValueError(
            f"resource config {name}: launch_method={launch!r} must be one of {LAUNCH_METHODS}"
        )
    nodes = _count(name, "nodes", raw.get("nodes", 1))
    if nodes < 1:
        raise ValueError(f"resource config {name}: nodes={nodes} must be >= 1")
    names = tuple(str(n) for n in raw.get("node_names") or ())
    if names and len(names) != nodes:
        raise ValueError(
            f"resource config {name}: node_names has {len(names)} entries, nodes={nodes}"
        )
    ov = raw.get("agent_overhead") or {}
    bad = set(ov) - {"cores", "gpus", "nodes"}
    if bad:
        raise ValueError(
            f"resource config {name}: agent_overhead has unknown key(s) "
            f"{sorted(bad)}; accepted: ['cores', 'gpus', 'nodes']"
        )
    overhead = AgentOverhead(**{k: _count(name, f"agent_overhead.{k}", v) for k, v in ov.items()})
    timeout = raw.get("client_timeout", 60)
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"resource config {name}: client_timeout={timeout!r} must be > 0")
    daemons = raw.get("node_daemons", batch == "slurm")
    if not isinstance(daemons, bool):
        raise ValueError(f"resource config {name}: node_daemons={daemons!r} must be true or false")
    if not daemons and launch != "fork":
        raise ValueError(
            f"resource config {name}: launch_method={launch!r} starts node daemons; "
            "set node_daemons: true (or use launch_method: fork)"
        )
    hosts = raw.get("hosts") or []
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
        raise ValueError(f"resource config {name}: hosts={hosts!r} must be a list of names")
    if launch == "netns" and len(hosts) < nodes:
        raise ValueError(
            f"resource config {name}: launch_method=netns needs a host (network namespace) "
            f"per node: nodes={nodes}, hosts={hosts}"
        )
    fanout = raw.get("fanout", 8)
    if isinstance(fanout, bool) or not isinstance(fanout, int) or fanout < 2:
        raise ValueError(f"resource config {name}: fanout={fanout!r} must be an integer >= 2")
    timeouts = {}
    for key, default in (("bringup_timeout", 30.0), ("node_timeout", 10.0)):
        v = raw.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise ValueError(f"resource config {name}: {key}={v!r} must be a number of seconds > 0")
        timeouts[key] = float(v)
    failure = raw.get("node_failure", "continue")
    if failure not in NODE_FAILURE:
        raise ValueError(
            f"resource config {name}: node_failure={failure!r} must be one of {NODE_FAILURE}"
        )
    client_address = raw.get("client_address")
    if client_address is not None and (not isinstance(client_address, str) or not client_address):
        raise ValueError(
            f"resource config {name}: client_address={client_address!r} must be an IP "
            "address, a network interface name or 'auto'"
        )
    python = raw.get("python")
    if python is not None and (not isinstance(python, str) or not python):
        raise ValueError(
            f"resource config {name}: python={python!r} must be the path of an interpreter"
        )
    launcher = raw.get("mpi_launcher", "srun" if batch == "slurm" else "mpirun")
    if launcher is not None and (
        not isinstance(launcher, str)
        or not launcher
        or (os.path.basename(launcher) not in MPI_LAUNCHERS and "/" not in launcher)
    ):
        raise ValueError(
            f"resource config {name}: mpi_launcher={launcher!r} must be one of "
            f"{list(MPI_LAUNCHERS)} or the path of one"
        )
    address = raw.get("address", "127.0.0.1")
    if not isinstance(address, str) or not address:
        raise ValueError(
            f"resource config {name}: address={address!r} must be an IP address, a network "
            "interface name or 'auto'"
        )
    return ResourceConfig(
        node_daemons=daemons,
        hosts=tuple(hosts),
        address=address,
        client_address=client_address,
        mpi_launcher=launcher,
        fanout=fanout,
        node_failure=failure,
        **timeouts,
        name=name,
        batch_system=batch,
        launch_method=launch,
        nodes=nodes,
        cores_per_node=_count(
            name,
            "cores_per_node",
            raw.get("cores_per_node", "auto"),
            auto=len(os.sched_getaffinity(0)),
        ),
        gpus_per_node=_count(name, "gpus_per_node", raw.get("gpus_per_node", 0)),
        agent_overhead=overhead,
        node_names=names,
        client_timeout=float(timeout),
        description=raw.get("description"),
        python=python,
        queue=raw.get("queue"),
        account=raw.get("account"),
        extra={k: raw[k] for k in ("psij_executor", "queue_poll_interval") if k in raw},
        resource_pool=parse_pool(
            f"resource config {name}",
            raw.get("resource_pool"),
            _count(name, "gpus_per_node", raw.get("gpus_per_node", 0)),
        ),
    )


def _yaml(text: str):
    import yaml  # C parser when there is one: a config parses in 0.3 ms instead of 2.5

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _configs_dir() -> Path:
    """The shipped configs (a plain path: importlib.resources costs ~10 ms at pilot submit)."""
    import pilot.configs

    return Path(pilot.configs.__file__).parent


@lru_cache(maxsize=1)
def agent_configs() -> dict:
    """The agent configs by name (configs/agents.yaml)."""
    return _yaml((_configs_dir() / "agents.yaml").read_text())


def check_agent_config(where: str, name: str | None) -> None:
    """ValueError naming `where` when agent config `name` does not exist (None: the default)."""
    if name is not None and name not in agent_configs():
        raise ValueError(f"{where}.config={name!r} must be one of {sorted(agent_configs())}")


def known_resources() -> list[str]:
    names = []
    for entry in sorted(_configs_dir().iterdir()):
        site = entry.name[: -len(".yaml")]
        if entry.name.endswith(".yaml") and site not in NOT_RESOURCES:
            data = _yaml(entry.read_text()) or {}
            names += [f"{site}.{key}" for key in data]
    return sorted(names)


def load(resource: str) -> ResourceConfig:
    """The config of `resource` (SITE.NAME or a path to a YAML file); ValueError if unknown."""
    if not isinstance(resource, str) or not resource:
        raise ValueError(f"resource={resource!r} must be a non-empty string")
    if resource.endswith((".yaml", ".yml")) or os.sep in resource:
        path = Path(resource)
        if not path.is_file():
            raise ValueError(f"resource={resource!r}: no such config file")
        return parse(path.stem, _yaml(path.read_text()) or {})
    site, _, name = resource.partition(".")
    entry = _configs_dir() / f"{site}.yaml"
    known = site and site not in NOT_RESOURCES and entry.is_file()
    data = _yaml(entry.read_text()) if known else {}
    if not name or name not in (data or {}):
        raise ValueError(
            f"resource={resource!r} is unknown; known resources: "
            f"{known_resources()} (or the path of a YAML config)"
        )
    return parse(resource, data[name])
