"""RADICAL-Pilot 1.x's resource configs (resource_<site>.json) read as this project's.

Where they come from, per SITE (the file resource_SITE.json), the later laid over the earlier
key by key (RP's own merge: a user's entry may change one key of a shipped one):
    configs/rp/resource_SITE.json    RP 1.103's site configs as RP ships them (MIT: its
                                     notice is configs/rp/LICENSE.md)
    $RADICAL_CONFIG_USER_DIR/.radical/pilot/configs/resource_SITE.json   the user's
                                     (RADICAL_CONFIG_USER_DIR defaults to $HOME)
A resource SITE.NAME is looked up in this project's YAML configs (configs/SITE.yaml, the native
form), then in the RP files (pilot/config/resource_config.py `load`).  A name that has a YAML config
(local.localhost) is that config: the user's entry of that name is laid over it, each RP key
given changing what it maps to and nothing else (`over_native`); RP's shipped entry of that
name is not used.  Only SITE's two files are read for SITE.NAME: a malformed file is an error
naming it when a resource of its site is asked for (`known`, listing every site, leaves it
out with a warning).  Lines starting with `#` are comments, as RP reads them.

What RP's keys become (`native`: the mapping pilot/config/resource_config.py parses, and the notes
naming what does not map; the access schema picks the entry of `schemas`):
    job_manager_endpoint   its scheme is the batch system: slurm:// -> slurm, pbspro:// /
                           pbs:// -> pbs, lsf:// -> lsf, fork:// -> local (a process tree
                           here, inside an allocation when the resource manager has one);
                           ssh, gsissh and `+ssh` schemes are refused: submit from the
                           machine's login node with its local schema
    resource_manager       which node file names the allocation's nodes, and how node
                           daemons start (launch_method): SLURM -> srun, PBSPRO -> mpiexec
                           when launch_methods.order names MPIEXEC (PALS, hydra: the
                           daemons' launch passes their -n/--ppn/--hostfile; an MPIRUN,
                           OpenMPI's say, may not take them), else ssh; LSF -> ssh (jsrun
                           starts no daemon of ours); FORK -> fork (one node)
    launcher, launcher_options   this project's keys, for an entry of the user's: a command
                           that takes mpiexec's flags; with it PBSPRO and LSF sites start
                           their daemons by mpiexec through it
    launch_methods.order   the first MPI launcher is mpi_command (MPIRUN mpirun, MPIEXEC
                           mpiexec, SRUN srun); a method's pre_exec_cached runs in the job
                           before the bootstrap (pre_bootstrap), so every task inherits it
    cores_per_node x system_architecture.smt, minus blocked_cores -> cores_per_node;
    gpus_per_node minus blocked_gpus -> gpus_per_node; default_queue -> queue
    default_remote_workdir -> sandbox: <it>/radical.pilot.sandbox/<session>/<pilot>
    pre_bootstrap_0, pre_bootstrap_1, task_pre_exec -> pre_bootstrap (in that order)
    virtenv (virtenv_mode use / update / local) -> python <virtenv>/bin/python3;
    python_interpreter -> python (their $VARS are the target's: the job's shell expands
                           them, pmgr/batch/job_script.py)
    system_architecture.options -> batch_options (slurm --constraint a&b, PBS -l a,b,
                           LSF -alloc_flags "a b"); mandatory_args -> required
    description -> description; keys whose effect is this project's own here (SAME: notes,
    rp_version, agent_scheduler CONTINUOUS, ...) are taken silently; the others (IGNORED:
    forward_tunnel_endpoint, numa_domain_map, another agent_spawner, ...) are noted as not
    used, with why
Every RP key is named in KEYS; an unknown key is noted too, never silently dropped.  A value
of the wrong type is a ValueError naming the RP key (`system_architecture.smt`) and what it
accepts (`_int`, `_list`); a string where RP wants a list of strings is a list of that one, as
RP casts it (AS_LIST: pre_bootstrap_0, ...), elsewhere (launch_methods.order, options) an error.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger("pilot.config")
# the pilot description fields a site may require (`required`; RP's mandatory_args)
REQUIRED = ("project", "queue", "runtime", "nodes", "cores", "gpus", "memory")
BATCH = {"slurm": "slurm", "pbspro": "pbs", "pbs": "pbs", "torque": "pbs", "lsf": "lsf"}
BATCH.update({"fork": "local", "local": "local"})
RM_LAUNCH = {"SLURM": "srun", "PBSPRO": "mpiexec", "LSF": "ssh", "FORK": "fork"}
NODES = 100_000  # RP's configs name no node count: a pilot's own size (cores=, nodes=) decides
MPI_LMS = {"MPIRUN": "mpirun", "MPIEXEC": "mpiexec", "SRUN": "srun"}
REMOTE = "submission from another host (ssh) is not done here: run the client on the machine"
# RP keys whose effect is this project's own here: silent with these values (any value: None)
SAME: dict[str, tuple[object, ...] | None] = {
    "notes": None,
    "rp_version": None,  # nothing of RP is installed on the resource: this project runs there
    "python_dist": None,  # the pilot runs on `python` (default: the client's interpreter)
    "raptor": None,  # Raptor runs as function workers here (RP's heartbeat settings)
    "fake_resources": None,  # cores_per_node and gpus_per_node are used as given
    "lfs_path_per_node": None,  # (no task may ask for node-local storage here:
    "lfs_size_per_node": None,  # lfs_per_rank and mem_per_rank are refused at submit)
    "mem_per_node": None,
    "agent_config": ("default", "default_sa"),
    "agent_scheduler": ("CONTINUOUS",),
    "agent_spawner": ("POPEN",),
    "job_manager_hop": ("fork://localhost/", "fork://localhost"),
    "task_pre_launch": ([],),
    "task_post_launch": ([],),
    "task_post_exec": ([],),
}
# RP keys that do not map: why (named at submit, when their value is not one of SAME's)
IGNORED = {
    "agent_config": "agents here are this project's (configs/agents.yaml)",
    "agent_scheduler": "the agent's scheduler here is this project's (work-conserving)",
    "agent_spawner": "units are spawned by this project's node daemons and agents",
    "forward_tunnel_endpoint": "no tunnel is made: the compute nodes must reach the client",
    "job_manager_hop": "the batch system is reached from this machine",
    "numa_domain_map": "no NUMA domains are accounted",
    "n_partitions": "a pilot's partitions are its description's (partitions=)",
    "network_interface": "where channels listen is the native `address` key",
    "new_session_per_task": "every unit runs in a process group of its own",
    "task_pre_launch": "pre_launch lines are a task's own here",
    "task_post_launch": "post_launch lines are a task's own here",
    "task_post_exec": "post_exec lines are a task's own here",
    "task_tmp": "tasks use the node's TMPDIR",
    "scattered": "units are placed by the agent (policy=)",
}
# RP keys whose string RP casts to a one-element list (RP's ResourceConfig: [str])
AS_LIST = ("pre_bootstrap_0", "pre_bootstrap_1", "task_pre_exec", "mandatory_args")
KEYS = set(IGNORED) | set(SAME) | {
    "label", "description", "default_schema", "schemas", "job_manager_endpoint",
    "filesystem_endpoint", "default_queue", "resource_manager", "launch_methods",
    "cores_per_node", "gpus_per_node", "system_architecture", "default_remote_workdir",
    "pre_bootstrap_0", "pre_bootstrap_1", "task_pre_exec", "virtenv", "virtenv_mode",
    "python_interpreter", "mandatory_args", "launcher", "launcher_options",
}  # fmt: skip


def shipped_dir() -> Path:
    import pilot.configs

    return Path(pilot.configs.__file__).parent / "rp"


def user_dir() -> Path:
    base = os.environ.get("RADICAL_CONFIG_USER_DIR") or os.path.expanduser("~")
    return Path(base) / ".radical" / "pilot" / "configs"


def _read(path: Path) -> dict:
    try:
        lines = path.read_text().splitlines()
        data = json.loads("\n".join(x for x in lines if not x.lstrip().startswith("#")) or "{}")
    except (OSError, ValueError) as exc:  # (unreadable, not UTF-8, not JSON)
        raise ValueError(f"RP resource config {path}: not readable as JSON: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ValueError(f"RP resource config {path}: must map resource names to mappings")
    return data


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _files(folder: Path) -> dict[str, Path]:
    if not folder.is_dir():
        return {}
    return {
        p.name[len("resource_") : -len(".json")]: p for p in sorted(folder.glob("resource_*.json"))
    }


def _entry(folder: Path, resource: str) -> dict | None:
    """The entry of SITE.NAME in folder's resource_SITE.json (that file only), or None."""
    site, _, name = resource.partition(".")
    path = folder / f"resource_{site}.json"
    return _read(path).get(name) if site and path.is_file() else None


def user_entry(resource: str) -> dict | None:
    """The user's own entry of SITE.NAME, or None."""
    return _entry(user_dir(), resource)


def find(resource: str) -> dict | None:
    """The RP config of SITE.NAME (the shipped entry with the user's laid over it), or None."""
    shipped, user = _entry(shipped_dir(), resource), user_entry(resource)
    if shipped is None or user is None:
        return shipped if user is None else user
    return _merge(shipped, user)


def known() -> list[str]:
    """Every SITE.NAME of the RP files (a file that cannot be read: left out, warned about)."""
    names = set()
    for folder in (shipped_dir(), user_dir()):
        for site, path in _files(folder).items():
            try:
                names |= {f"{site}.{name}" for name in _read(path)}
            except ValueError as exc:
                log.warning("%s (its resources are not listed)", exc)
    return sorted(names)


def over_native(resource: str, raw: dict, c, user: dict) -> tuple[dict, list[str]]:
    """The YAML mapping `raw` of a native config (parsed: `c`) with the user's RP entry laid
    over it, and notes on what of it does not map: the native keys that the user's keys change
    (RP's view of `c`, `rp_view`, mapped with and without them), the rest as in `raw`."""
    base = rp_view(resource, c)
    before, seen = native(resource, base)
    after, notes = native(resource, _merge(base, user))
    changed = {k: v for k, v in after.items() if before.get(k) != v}
    return {**raw, **changed}, [n for n in notes if n not in seen]


def _at(where: str, cfg: dict, key: str):
    """The value of RP key `key` (dotted: `system_architecture.smt`), None when unset;
    ValueError naming a part of it that is no mapping."""
    value: Any = cfg
    parts = key.split(".")
    for i, part in enumerate(parts):
        if value is None:
            return None
        if not isinstance(value, dict):
            inner = ".".join(parts[:i])
            raise ValueError(f"{where}: {inner}={value!r:.80} must be a mapping")
        value = value.get(part)
    return value


def _list(where: str, cfg: dict, key: str, item: type = str) -> list:
    """RP key `key` as a list of `item`s ([] when unset); a string is one item where RP casts
    it so (AS_LIST); ValueError naming the key and what is accepted."""
    value = _at(where, cfg, key)
    if value is None:
        return []
    if isinstance(value, str) and key in AS_LIST:
        value = [value]
    if not isinstance(value, list) or not all(
        isinstance(x, item) and not isinstance(x, bool) for x in value
    ):
        what = "strings" if item is str else "integers"
        one = " (or one string)" if key in AS_LIST else ""
        raise ValueError(f"{where}: {key}={value!r:.80} must be a list of {what}{one}")
    return list(value)


def _int(where: str, cfg: dict, key: str, minimum: int = 0) -> int | None:
    """RP key `key` as an integer >= `minimum` (a string of digits too, as RP casts it), None
    when unset; ValueError naming the key and what is accepted."""
    value = _at(where, cfg, key)
    if value is None:
        return None
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value)
    if number is None or number < minimum:
        raise ValueError(f"{where}: {key}={value!r:.80} must be an integer >= {minimum}")
    return number


def with_schema(resource: str, rcfg: dict, schema: str | None) -> dict:
    """RP's session.get_resource_config: the entry of `schema` (default_schema by default)
    laid over the config, and `label`; ValueError naming an unknown schema."""
    schemas = rcfg.get("schemas") or {}
    if not isinstance(schemas, dict):
        raise ValueError(
            f"RP resource config {resource}: schemas={schemas!r:.80} must be a mapping of "
            "access schema names to their endpoints"
        )
    schema = schema or rcfg.get("default_schema")
    out = copy.deepcopy(rcfg)
    if schema:
        entry = schemas.get(schema)
        if isinstance(entry, str):  # (an alias: "batch": "interactive")
            entry = schemas.get(entry)
        if not isinstance(entry, dict):
            raise ValueError(
                f"resource {resource!r}: access_schema={schema!r} must be one of {sorted(schemas)}"
            )
        out.update(copy.deepcopy(entry))
    out["label"] = resource
    return out


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def native(resource: str, rcfg: dict, schema: str | None = None) -> tuple[dict, list[str]]:
    """(the native mapping pilot/config/resource_config.py parses, notes on what did not map).
    ValueError naming the key when the resource cannot run here at all."""
    where = f"RP resource config {resource}"
    cfg = with_schema(resource, rcfg, schema)
    notes: list[str] = []
    out: dict = {"description": cfg.get("description") or f"RP's {resource}"}

    def note(key: str, why: str, value=None) -> None:
        value = cfg.get(key) if value is None else value
        notes.append(f"{where}: {key}={value!r:.80} is not used: {why}")

    url = cfg.get("job_manager_endpoint") or "fork://localhost/"
    scheme = _scheme(url)
    if "ssh" in scheme or scheme not in BATCH:
        raise ValueError(
            f"{where}: job_manager_endpoint={url!r} (access_schema "
            f"{schema or cfg.get('default_schema')!r}) is not supported: "
            + (REMOTE if "ssh" in scheme else f"its scheme must be one of {sorted(BATCH)}")
        )
    out["batch_system"] = BATCH[scheme]
    out["nodes"] = NODES
    rm = str(cfg.get("resource_manager") or "FORK").upper()
    if rm not in RM_LAUNCH:
        raise ValueError(
            f"{where}: resource_manager={rm!r} is not supported: one of {sorted(RM_LAUNCH)}"
        )
    order = [x.upper() for x in _list(where, cfg, "launch_methods.order")]
    launch = RM_LAUNCH[rm]
    if rm == "PBSPRO" and "MPIEXEC" not in order:
        launch = "ssh"
    if cfg.get("launcher") and rm in ("PBSPRO", "LSF"):  # (a command taking mpiexec's flags)
        launch = "mpiexec"
        out["launcher"] = cfg["launcher"]
        out["launcher_options"] = _list(where, cfg, "launcher_options")
    elif cfg.get("launcher") or cfg.get("launcher_options"):
        note("launcher", f"resource_manager {rm} starts the node daemons by {launch}")
    out["launch_method"] = launch
    out["node_daemons"] = launch != "fork"
    if launch != "fork":
        out["address"] = "auto"
    mpi = [MPI_LMS[m] for m in order if m in MPI_LMS]
    if mpi:
        out["mpi_command"] = mpi[0]
    others = [m for m in order if m not in MPI_LMS and m != "FORK"]
    if others:
        note("launch_methods", f"{others}: tasks start through this project's node daemons")
    pre = _list(where, cfg, "pre_bootstrap_0")
    for m in order:
        pre += _list(where, cfg, f"launch_methods.{m}.pre_exec_cached")
    pre += _list(where, cfg, "pre_bootstrap_1") + _list(where, cfg, "task_pre_exec")
    if pre:
        out["pre_bootstrap"] = pre
    _cores(where, cfg, out, note)
    if cfg.get("default_queue"):
        out["queue"] = cfg["default_queue"]
    if cfg.get("default_remote_workdir"):
        out["sandbox"] = f"{str(cfg['default_remote_workdir']).rstrip('/')}/radical.pilot.sandbox"
    _python(cfg, out, note)
    options = _list(where, cfg, "system_architecture.options")
    if options:
        out["batch_options"] = _options(out["batch_system"], options, note)
    required = _list(where, cfg, "mandatory_args")
    if set(required) - set(REQUIRED):
        raise ValueError(
            f"{where}: mandatory_args={required!r} must name pilot description fields among "
            f"{list(REQUIRED)}"
        )
    if required:
        out["required"] = required
    for key in sorted(set(cfg) - {"label", "filesystem_endpoint", "job_manager_endpoint"}):
        same = SAME.get(key, ())
        if key in SAME and (same is None or cfg[key] in same):
            continue
        if key in IGNORED:
            note(key, IGNORED[key])
        elif key not in KEYS:
            note(key, "an RP key unknown here")
    return out, notes


def _cores(where: str, cfg: dict, out: dict, note) -> None:  # (cores x smt - blocked_cores)
    arch = _at(where, cfg, "system_architecture") or {}
    smt = _int(where, cfg, "system_architecture.smt", minimum=1) or 1
    cores = _int(where, cfg, "cores_per_node")
    if cores:
        cores *= smt
        blocked = _list(where, cfg, "system_architecture.blocked_cores", int)
        if blocked:
            note(
                "system_architecture.blocked_cores",
                f"their count is left out (cores_per_node {cores} -> {cores - len(blocked)}), "
                "not which cores: units are bound to the node's first cores",
                blocked,
            )
        out["cores_per_node"] = cores - len(blocked)
    gpus = _int(where, cfg, "gpus_per_node")
    if gpus is not None:
        gpus -= len(_list(where, cfg, "system_architecture.blocked_gpus", int))
        out["gpus_per_node"] = max(gpus, 0)
    # (exclusive: a pilot's nodes are whole nodes; oversubscribe: logical cores may exceed)
    for key in sorted(set(arch) - {"smt", "blocked_cores", "blocked_gpus", "options"}):
        if key not in ("exclusive", "oversubscribe"):
            why = "not applied to the batch job or the placement"
            note(f"system_architecture.{key}", why, arch[key])


def _python(cfg: dict, out: dict, note) -> None:
    mode = cfg.get("virtenv_mode") or "local"
    if cfg.get("python_interpreter"):
        out["python"] = cfg["python_interpreter"]
    if cfg.get("virtenv") and mode in ("use", "update", "local", "recreate", "create"):
        out["python"] = f"{str(cfg['virtenv']).rstrip('/')}/bin/python3"
        if mode in ("update", "recreate", "create"):
            note("virtenv_mode", f"{mode}: the virtualenv is used as it is, never made here")
    elif mode in ("create", "recreate", "update"):
        note("virtenv_mode", f"{mode}: no virtualenv is made; the pilot runs on `python`")


def _options(batch: str, options: list[str], note) -> dict:
    if batch == "slurm":
        return {"slurm.constraint": "&".join(options)}
    if batch == "pbs":
        # (place=: the job's own placement is scatter:exclhost, whole nodes: pmgr/batch/pbs.py)
        rest = [o for o in options if not o.startswith("place=")]
        return {"pbs.l": ",".join(rest)} if rest else {}
    if batch == "lsf":
        return {"lsf.alloc_flags": " ".join(options)}
    note("system_architecture.options", "the job is no batch job here", options)
    return {}


def rp_view(resource: str, c) -> dict:
    """An RP-shaped config of a native ResourceConfig `c` (for rp.utils.get_resource_config on
    this project's YAML resources)."""
    scheme = {"local": "fork", "pbs": "pbspro"}.get(c.batch_system, c.batch_system)
    rm = {"local": "FORK", "slurm": "SLURM", "pbs": "PBSPRO", "lsf": "LSF"}[c.batch_system]
    lms = ["FORK"] + [k for k, v in MPI_LMS.items() if v == os.path.basename(c.mpi_command or "")]
    return {
        "label": resource,
        "description": c.description or "",
        "default_schema": "local",
        "schemas": {
            "local": {
                "job_manager_endpoint": f"{scheme}://localhost/",
                "filesystem_endpoint": "file://localhost/",
            }
        },
        "resource_manager": rm,
        "default_queue": c.queue,
        "cores_per_node": c.cores_per_node,
        "gpus_per_node": c.gpus_per_node,
        "launch_methods": {"order": lms, **{m: {} for m in lms}},
        "default_remote_workdir": c.sandbox or "$HOME",
        "pre_bootstrap_0": list(c.pre_bootstrap),
        "virtenv_mode": "local",
    }
