"""Resource configs: where a pilot runs and what one node there offers.

A resource is named `SITE.NAME` and found in `configs/SITE.yaml` under key NAME, or given as the
path of a YAML file holding one resource config (its keys, each with its check and doc, are
pilot/config/resource_keys.py's ResourceConfig).
RADICAL-Pilot's resource_SITE.json configs are read too (pilot/config/rp_sites.py: RP's sites as
shipped in configs/rp/, with the user's ~/.radical/pilot/configs/ laid over them, and over the
YAML config of the same name): they become the same ResourceConfig, with `notes` naming what
of them did not map.
Agent configs (how a partition's agent runs its units) are in configs/agents.yaml.
(yaml is imported where a file is read: node daemons and agents never pay for it.)
"""

from __future__ import annotations

import logging
import os
from dataclasses import fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from pilot.config.resource_keys import BY_BATCH, KEYS, AgentOverhead, ResourceConfig
from pilot.validate import BadValue

NOT_RESOURCES = ("agents",)  # configs/agents.yaml holds agent configs, not resources
RENAMED = {"mpi_launcher": "mpi_command"}  # old key -> its name now (the old one still works)
log = logging.getLogger("pilot.config")


def parse(name: str, raw: dict, notes: tuple[str, ...] = ()) -> ResourceConfig:
    """A resource config from its YAML mapping: every key checked by its field's check, the
    defaults that follow from other keys filled in, then the keys checked together.  `notes`:
    what of an RP config did not map (pilot/config/rp_sites.py), said at submit."""
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
    # (each field's value as its check gives it: ResourceConfig's types, one a key)
    values: dict[str, Any] = {"name": name, "notes": tuple(notes)}
    for f in fields(ResourceConfig):
        check = f.metadata.get("check")
        value = raw.get(f.name, f.default)
        if check is not None and value is not BY_BATCH:
            try:
                values[f.name] = check(f.name, value)
            except BadValue as exc:
                raise exc.owned(where) from None
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
    """Every resource a pilot may name: the YAML configs' and RP's (pilot/config/rp_sites.py)."""
    from pilot.config import rp_sites

    return sorted(set(native_resources()) | set(rp_sites.known()))


_EXAMPLES = ("ornl.frontier", "nersc.perlmutter", "anl.polaris")


def _unknown(resource: str) -> str:
    """The error for a resource nobody has: the native configs by name, RP's sites counted
    (`pilot resources` lists them all), the nearest names when the name looks mistyped."""
    import difflib

    from pilot.config import rp_sites

    native = sorted(native_resources())
    sites = sorted(set(rp_sites.known()) - set(native))
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
    from pilot.config import rp_sites

    if not isinstance(resource, str) or not resource:
        raise ValueError(f"resource={resource!r} must be a non-empty string")
    if resource.endswith((".yaml", ".yml")) or os.sep in resource:
        path = Path(resource)
        if not path.is_file():
            raise ValueError(f"resource={resource!r}: no such config file")
        return parse(path.stem, _yaml(path.read_text()) or {})
    raw = _native_raw(resource)
    if raw is not None:
        user = rp_sites.user_entry(resource)  # (laid over the YAML config, key by key)
        if user is None:
            return parse(resource, raw)
        mapping, notes = rp_sites.over_native(resource, raw, parse(resource, raw), user)
        return parse(resource, mapping, tuple(notes))
    rp = rp_sites.find(resource)
    if rp is None:
        raise ValueError(_unknown(resource))
    mapping, notes = rp_sites.native(resource, rp, schema)
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
