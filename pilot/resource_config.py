"""Resource configs: where a pilot runs and what one node there offers.

A resource is named `SITE.NAME` and found in `configs/SITE.yaml` under key NAME, or given as the
path of a YAML file holding one resource config (the keys documented in configs/local.yaml).
RADICAL-Pilot's resource_SITE.json configs are read too (pilot/rp_resources.py: RP's sites as
shipped in configs/rp/, with the user's ~/.radical/pilot/configs/ laid over them, and over the
YAML config of the same name): they become the same ResourceConfig, with `notes` naming what
of them did not map.
Agent configs (how a partition's agent runs its units) are in configs/agents.yaml.
(yaml is imported where a file is read: node daemons and agents never pay for it.)
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path

from pilot import plugins
from pilot.rp_resources import REQUIRED

NODE_FAILURE = ("continue", "fail")
UNIT_LAUNCH = ("spawn", "zero")
NOT_RESOURCES = ("agents",)  # configs/agents.yaml holds agent configs, not resources
MPI_COMMANDS = ("mpirun", "mpiexec", "srun")
RENAMED = {"mpi_launcher": "mpi_command"}  # old key -> its name now (the old one still works)
BY_BATCH = "(by batch_system)"  # a default that follows from batch_system (parse fills it in)
log = logging.getLogger("pilot.config")


# ---- what a value may be: each check returns the value as kept, or raises ValueError ------------
def _bad(where: str, key: str, value, accepted: str) -> ValueError:
    return ValueError(f"{where}: {key}={value!r} must be {accepted}")


def _count(minimum: int = 0, auto: bool = False):
    def check(where, key, value):
        if auto and value == "auto":
            return len(os.sched_getaffinity(0))
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            words = f"an integer >= {minimum}" + (' or "auto"' if auto else "")
            raise _bad(where, key, value, words)
        return value

    return check


def _seconds(where, key, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise _bad(where, key, value, "a number of seconds > 0")
    return float(value)


def _one_of(choices):
    def check(where, key, value):
        if value not in choices:
            raise _bad(where, key, value, f"one of {tuple(choices)}")
        return value

    return check


def _text(accepted: str):
    def check(where, key, value):
        if value is not None and (not isinstance(value, str) or not value):
            raise _bad(where, key, value, accepted)
        return value

    return check


def _flag(where, key, value):
    if not isinstance(value, bool):
        raise _bad(where, key, value, "true or false")
    return value


def _names(where, key, value):
    if not isinstance(value, (list, tuple)) or not all(isinstance(h, (str, int)) for h in value):
        raise _bad(where, key, value, "a list of names")
    return tuple(str(h) for h in value)


def _overhead(where, key, value):
    value = value or {}
    accepted = [f.name for f in fields(AgentOverhead)]
    if not isinstance(value, dict) or set(value) - set(accepted):
        raise _bad(where, key, value, f"a mapping with keys among {accepted}")
    return AgentOverhead(**{k: _count()(where, f"{key}.{k}", v) for k, v in value.items()})


def _mpi_command(where, key, value):
    if value is not None and (
        not isinstance(value, str)
        or not value
        or (os.path.basename(value) not in MPI_COMMANDS and "/" not in value)
    ):
        raise _bad(where, key, value, f"one of {list(MPI_COMMANDS)} or the path of one")
    return value


def _mapping(where, key, value):
    if value is not None and not isinstance(value, dict):
        raise _bad(where, key, value, "a mapping")
    return value


def _lines(where, key, value):
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(x, str) for x in value):
        raise _bad(where, key, value, "a list of shell lines")
    return tuple(value)


def _batch_options(where, key, value):
    value = value or {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str)
        and "." in k
        and isinstance(v, (str, int))
        and not ({'"', "\n"} & set(str(v)))  # (a directive's value is written in "...")
        for k, v in value.items()
    ):
        raise _bad(
            where,
            key,
            value,
            'a mapping of PSI/J custom attributes {"pbs.l": "..."} (values without " or newline)',
        )
    return {k: str(v) for k, v in value.items()}


def _required(where, key, value):
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not set(value) <= set(REQUIRED):
        raise _bad(where, key, value, f"a list of pilot description fields among {REQUIRED}")
    return tuple(value)


def opt(default, check, doc: str = ""):
    """A resource config key: its default (a value as the YAML would give it) and its check."""
    return field(default=default, metadata={"check": check, "doc": doc})


@dataclass(frozen=True)
class AgentOverhead:
    cores: int = 0
    gpus: int = 0
    nodes: int = 0


@dataclass(frozen=True)
class ResourceConfig:
    """One resource (configs/local.yaml documents every key); the YAML keys are these fields."""

    name: str = field(metadata={"check": None})  # (SITE.NAME or the file's stem; not a key)
    description: str | None = opt(None, _text("a text"))
    batch_system: str = opt("local", _one_of(tuple(plugins.BATCH_SYSTEMS)))
    launch_method: str = opt("fork", _one_of(tuple(plugins.LAUNCH_METHODS)))
    nodes: int = opt(1, _count(minimum=1))
    node_names: tuple[str, ...] = opt((), _names)
    cores_per_node: int = opt("auto", _count(auto=True))
    gpus_per_node: int = opt(0, _count())
    agent_overhead: AgentOverhead = opt(None, _overhead)
    resource_pool: dict = opt(None, _mapping)  # per node: type -> [{id, slots}] (parse_pool)
    client_timeout: float = opt(60, _seconds)
    python: str | None = opt(None, _text("the path of an interpreter"))
    queue: str | None = opt(None, _text("a queue name"))
    account: str | None = opt(None, _text("a project or account name"))
    psij_executor: str | None = opt(None, _text("a PSI/J executor name"))
    queue_poll_interval: float = opt(30, _seconds)
    node_daemons: bool = opt(BY_BATCH, _flag)  # true under a batch system (slurm, pbs, lsf)
    hosts: tuple[str, ...] = opt((), _names)
    address: str = opt("127.0.0.1", _text("an IP address, an interface name or 'auto'"))
    client_address: str | None = opt(None, _text("an IP address, an interface name or 'auto'"))
    fanout: int = opt(8, _count(minimum=2))
    bringup_timeout: float = opt(30, _seconds)
    node_timeout: float = opt(60, _seconds)  # (docs/reference/configuration.md: why 60)
    node_failure: str = opt("continue", _one_of(NODE_FAILURE))
    mpi_command: str | None = opt(BY_BATCH, _mpi_command)  # srun under SLURM, else mpirun
    unit_launch: str = opt("spawn", _one_of(UNIT_LAUNCH))  # zero: agent/runners/zero.py
    sandbox: str | None = opt(None, _text("a directory ($VARS, %(pd.project)s)"))
    pre_bootstrap: tuple[str, ...] = opt((), _lines)  # shell lines before the bootstrap
    batch_options: dict = opt(None, _batch_options)  # PSI/J custom attributes
    launcher: str | None = opt(None, _text("a command"))  # mpiexec / ssh: which one
    launcher_options: tuple[str, ...] = opt((), _lines)  # its options
    required: tuple[str, ...] = opt((), _required)  # pilot fields that must be given
    notes: tuple[str, ...] = field(default=(), metadata={"check": None})  # (RP keys not used)

    def node_name(self, index: int) -> str:
        if self.node_names:
            return self.node_names[index]
        return "localhost" if self.nodes == 1 else f"node{index}"


KEYS = tuple(f.name for f in fields(ResourceConfig) if f.metadata.get("check"))


def parse(name: str, raw: dict, notes: tuple[str, ...] = ()) -> ResourceConfig:
    """A resource config from its YAML mapping: every key checked by its field's check, the
    defaults that follow from other keys filled in, then the keys checked together.  `notes`:
    what of an RP config did not map (pilot/rp_resources.py), said at submit."""
    where = f"resource config {name}"
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: must be a mapping, got {type(raw).__name__}")
    raw = dict(raw)
    for old, new in RENAMED.items():
        if old in raw:
            log.warning("%s: %s is now called %s", where, old, new)
            raw.setdefault(new, raw.pop(old))
    unknown = set(raw) - set(KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; accepted: {sorted(KEYS)}")
    values = {"name": name, "notes": tuple(notes)}
    for f in fields(ResourceConfig):
        check = f.metadata.get("check")
        value = raw.get(f.name, f.default)
        if check is not None and value is not BY_BATCH:
            values[f.name] = check(where, f.name, value)
    slurm = values["batch_system"] == "slurm"
    values.setdefault("node_daemons", values["batch_system"] != "local")
    values.setdefault("mpi_command", "srun" if slurm else "mpirun")
    values["resource_pool"] = parse_pool(where, values["resource_pool"], values["gpus_per_node"])
    cfg = ResourceConfig(**values)
    _consistent(where, cfg)
    return cfg


def _consistent(where: str, c: ResourceConfig) -> None:
    """The checks that involve more than one key."""
    if c.node_names and len(c.node_names) != c.nodes:
        raise ValueError(f"{where}: node_names has {len(c.node_names)} entries, nodes={c.nodes}")
    if c.unit_launch == "zero" and c.node_daemons:
        raise ValueError(
            f"{where}: unit_launch=zero runs units nowhere: it needs node_daemons: false"
        )
    if not c.node_daemons and c.launch_method != "fork":
        raise ValueError(
            f"{where}: launch_method={c.launch_method!r} starts node daemons; "
            "set node_daemons: true (or use launch_method: fork)"
        )
    if c.launch_method in ("mpiexec", "ssh") and c.batch_system == "local" and not c.hosts:
        raise ValueError(
            f"{where}: launch_method={c.launch_method} outside a batch job needs `hosts` (the "
            "host of each node; in a PBS or LSF job they come from its node file)"
        )
    if c.launch_method == "netns" and len(c.hosts) < c.nodes:
        raise ValueError(
            f"{where}: launch_method=netns needs a host (network namespace) per node: "
            f"nodes={c.nodes}, hosts={list(c.hosts)}"
        )


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


def native_resources() -> list[str]:
    """The resources of this project's YAML configs (configs/SITE.yaml)."""
    names = []
    for entry in sorted(_configs_dir().iterdir()):
        site = entry.name[: -len(".yaml")]
        if entry.name.endswith(".yaml") and site not in NOT_RESOURCES:
            data = _yaml(entry.read_text()) or {}
            names += [f"{site}.{key}" for key in data]
    return sorted(names)


def known_resources() -> list[str]:
    """Every resource a pilot may name: the YAML configs' and RP's (pilot/rp_resources.py)."""
    from pilot import rp_resources

    return sorted(set(native_resources()) | set(rp_resources.known()))


_EXAMPLES = ("ornl.frontier", "nersc.perlmutter", "anl.polaris")


def _unknown(resource: str) -> str:
    """The error for a resource nobody has: the native configs by name, RP's sites counted
    (`pilot resources` lists them all), the nearest names when the name looks mistyped."""
    import difflib

    from pilot import rp_resources

    native = sorted(native_resources())
    sites = sorted(set(rp_resources.known()) - set(native))
    near = difflib.get_close_matches(resource, native + sites, n=3, cutoff=0.75)
    return (
        f"resource={resource!r} is unknown"
        + (f" (did you mean {' or '.join(map(repr, near))}?)" if near else "")
        + f"; known resources: {native} and {len(sites)} RADICAL-Pilot sites"
        + f" ({', '.join(([s for s in _EXAMPLES if s in sites] or sites)[:3])}, ...:"
        + " `pilot resources` lists them)"
        + " (or the path of a YAML config)"
    )


def _native_raw(resource: str) -> dict | None:
    site, _, name = resource.partition(".")
    entry = _configs_dir() / f"{site}.yaml"
    if not site or site in NOT_RESOURCES or not entry.is_file():
        return None
    data = _yaml(entry.read_text()) or {}
    return data.get(name) if name else None


def load(resource: str, schema: str | None = None) -> ResourceConfig:
    """The config of `resource` (SITE.NAME or a path to a YAML file); ValueError if unknown.
    `schema`: an RP config's access schema (its default_schema by default; a YAML config has
    none and takes any)."""
    from pilot import rp_resources

    if not isinstance(resource, str) or not resource:
        raise ValueError(f"resource={resource!r} must be a non-empty string")
    if resource.endswith((".yaml", ".yml")) or os.sep in resource:
        path = Path(resource)
        if not path.is_file():
            raise ValueError(f"resource={resource!r}: no such config file")
        return parse(path.stem, _yaml(path.read_text()) or {})
    raw = _native_raw(resource)
    if raw is not None:
        user = rp_resources.user_entry(resource)  # (laid over the YAML config, key by key)
        if user is None:
            return parse(resource, raw)
        mapping, notes = rp_resources.over_native(resource, raw, parse(resource, raw), user)
        return parse(resource, mapping, tuple(notes))
    rp = rp_resources.find(resource)
    if rp is None:
        raise ValueError(_unknown(resource))
    mapping, notes = rp_resources.native(resource, rp, schema)
    return parse(resource, mapping, tuple(notes))


def to_raw(c: ResourceConfig) -> dict:
    """The YAML mapping `c` was parsed from, resolved (parse(c.name, to_raw(c)) == c but for
    notes): what a pilot's bootstrap is given, so it reads the config its client read."""
    out = {}
    for f in fields(ResourceConfig):
        if not f.metadata.get("check"):
            continue
        value = getattr(c, f.name)
        if f.name == "agent_overhead":
            value = {k.name: getattr(value, k.name) for k in fields(AgentOverhead)}
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out
