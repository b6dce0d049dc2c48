"""The environment a rank sees: the variables that name its unit, node and allocation, and the
placeholders of the unit's own `environment`.  Used by the local runner (agent/runners/local.py,
agent/runners/lane_feed.py), the daemon runner (agent/runners/daemons.py) and the agent, which
checks the placeholders as a unit arrives (agent/agent.py); the spawn itself is agent/spawn.py's.
A node daemon makes its ranks' environments with the same function, from what an `exec` carries
(`exec_unit` at the agent, `exec_env` at the daemon).

Environment a rank sees, besides the spawning process's own and the unit's `environment`:
    PILOT_SESSION_ID PILOT_PILOT_ID PILOT_PARTITION_ID PILOT_UNIT_ID PILOT_UNIT_SANDBOX
    PILOT_NODE_NAME PILOT_RANK PILOT_RANKS
    PILOT_NODE_LIST    the nodes of the unit's ranks, comma-separated, each once, in rank
                       order (its own node for a unit of one node): what a command that
                       starts its own ranks over them (an MPI launcher) names
    RP_SESSION_ID RP_PILOT_ID RP_PILOT_SANDBOX RP_UNIT_ID RP_UNIT_NAME RP_UNIT_SANDBOX
    RP_PARTITION_ID RP_RESOURCE RP_SESSION_SANDBOX RP_RESOURCE_SANDBOX
    RP_GTOD            a command that prints the time (RADICAL-Pilot's; in the pilot sandbox)
    RP_PROF            by the unit's API, as RADICAL-Pilot defines it there (`prof` below):
                       a ComputeUnit (RP 0.90, and this project's own units): the unit's
                       profile file <sandbox>/<uid>.prof, to append trace lines to
                       (`echo "$($RP_GTOD),app_start,..." >> $RP_PROF`);
                       an RP 1.x task: the command `$RP_PROF EVENT [MSG]`, which appends a
                       trace line to RP_PROF_TGT (the task's <sandbox>/<uid>.prof)
    RP_GPU_ID          RADICAL-Pilot's names (RP_GPU_ID: its GPU ids, when it holds GPUs)
    RP_TASK_ID RP_TASK_NAME RP_TASK_SANDBOX RP_RANK RP_RANKS   RADICAL-Pilot 1.x's (a task is
                       a unit there; an MPI unit's ranks share one environment: RP_RANK is 0
                       unless its shell sets it from the MPI starter's rank variable)
    PILOT_<TYPE>_IDS   the ids it holds of each pool type: PILOT_CPU_IDS (logical core ids),
                       PILOT_GPU_IDS, PILOT_FPGA_IDS for a type `fpgas`, ...
    <gpu_env_str>      (policy; default CUDA_VISIBLE_DEVICES) its GPU ids, mapped through the
                       spawner's own value of that variable when it has one (inherited "4,5,6"
                       and GPU id 2 -> "6"); set on partitions with GPUs, empty for no GPUs
Placeholders %(<type>_ids)s in the unit's environment values are filled with the same ids
(%(cpu_ids)s, %(gpu_ids)s, %(fpga_ids)s); any other % is the value's own ("100%", "%Y").
A placeholder that cannot be filled is found when the unit arrives and fails it with the name
(`check_environment`).
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterable


def type_key(t: str) -> str:
    """Pool type -> the name in variables: cpus -> CPU, gpus -> GPU, fpgas -> FPGA."""
    return (t[:-1] if t.endswith("s") else t).upper()


_IDS_VAR: dict = {}  # pool type -> PILOT_<TYPE>_IDS (a node's types are few and fixed)


def ids_var(t: str) -> str:
    name = _IDS_VAR.get(t)
    if name is None:
        name = _IDS_VAR[t] = f"PILOT_{type_key(t)}_IDS"
    return name


def _ids(grant_part) -> str:
    """The ids of a grant's [(id, amount)], each once, in order (O(ids): a 128-core rank's
    list is read once, not once an id)."""
    if len(grant_part) == 1:
        return str(grant_part[0][0])
    return ",".join(map(str, dict.fromkeys([i for i, _ in grant_part])))


_PLACEHOLDER = re.compile(r"%\((\w+_ids)\)s")


def _fill(value: str, mapping: dict) -> str:
    return _PLACEHOLDER.sub(lambda m: mapping[m.group(1)], value)


def check_environment(environment: dict | None, types: Iterable[str]) -> str | None:
    """The reason the unit's environment placeholders cannot be filled, or None.  Only
    %(<type>_ids)s is a placeholder: every other % is the value's own (as RP passes it)."""
    if not environment:
        return None
    known = {f"{type_key(t).lower()}_ids" for t in types}
    for k, v in environment.items():
        if "%(" not in v:
            continue
        for name in _PLACEHOLDER.findall(v):
            if name not in known:
                return (
                    f"environment[{k!r}]: placeholder %({name})s cannot be filled; "
                    f"known: {', '.join(f'%({m})s' for m in sorted(known))}"
                )
    return None


def rank_env(
    unit: dict,
    sandbox: str,
    node_name: str,
    ids: dict,
    rank: int,
    ranks: int,
    has_gpus: bool,
    prof: str,
) -> tuple[dict, str | None]:
    """(env, gpu_var): what one rank's environment adds to the spawning process's own: the unit's
    `environment` (placeholders filled) and the PILOT_* variables.  The GPU variable holds
    plain GPU ids here (gpu_var names it, None when the unit sees no GPU variable);
    `Spawner.spawn` maps them through the node's inherited mask.  `prof`: as for unit_vars."""
    env = _unit_and_ids(unit, ids)
    var = None
    env.update(unit_vars(unit, sandbox, prof))
    env["PILOT_NODE_NAME"] = node_name
    env["PILOT_NODE_LIST"] = unit.get("nodes") or node_name
    env["PILOT_RANK"] = env["RP_RANK"] = str(rank)
    env["PILOT_RANKS"] = env["RP_RANKS"] = str(ranks)
    if has_gpus or ids.get("gpus"):
        var = (unit.get("policy") or {}).get("gpu_env_str") or "CUDA_VISIBLE_DEVICES"
        env[var] = ids.get("gpus", "")
    if ids.get("gpus"):
        env["RP_GPU_ID"] = ids["gpus"]
    return env, var


def exec_unit(unit: dict) -> dict:
    """What rank_env reads of a unit besides its uid, as an `exec` carries it to the node
    daemon that makes the rank's environment (`exec_env`): only what the unit has."""
    bits = {k: unit[k] for k in ("name", "environment", "prof", "nodes") if unit.get(k)}
    gpu_var = (unit.get("policy") or {}).get("gpu_env_str")
    if gpu_var:
        bits["policy"] = {"gpu_env_str": gpu_var}
    return bits


def node_list(ranks) -> str | None:
    """PILOT_NODE_LIST of a unit placed as `ranks` [(node, grant)], when it is more than its
    one node's name (several nodes); None otherwise."""
    names = dict.fromkeys(node.name for node, _ in ranks)
    return ",".join(names) if len(names) > 1 else None


def with_nodes(unit: dict, ranks) -> dict:
    """`unit`, or a copy naming its nodes (`nodes`: PILOT_NODE_LIST) when `ranks` span
    several."""
    nodes = node_list(ranks) if len(ranks) > 1 else None
    return {**unit, "nodes": nodes} if nodes else unit


def exec_env(head: dict, body: dict) -> tuple[dict, str | None]:
    """(env, gpu_var) of one rank of an `exec`, at its node daemon (agent/node/ranks.py):
    rank_env of the rank's unit (`exec_unit`) on the message's node, over what the message
    carries once for its partition (`head`: env, node, prof, gpus), under the rank's own extra
    `env` (a function unit's path) - what the agent's rank_env would have made."""
    unit = {**(body.get("unit") or {}), "uid": body["uid"]}
    own, var = rank_env(
        unit,
        body["sandbox"],
        head.get("node") or "",
        body.get("ids") or {},
        body["rank"],
        body.get("ranks") or 1,
        bool(head.get("gpus")),
        head.get("prof") or "",
    )
    env = {**head["env"], **own} if head.get("env") else own
    if body.get("env"):
        env.update(body["env"])
    return env, var


# RP_PROF / RP_GTOD: RADICAL-Pilot's trace commands (pilot/rp_bin/), copied into each pilot
# sandbox at bring-up (`install_rp_tools`): no unit's environment names a file of the installed
# package, which a unit might write to (RP 0.90's scripts append to $RP_PROF).  Found without
# importing the client (the agent never loads the face).
_PILOT = importlib.util.find_spec("pilot")
assert _PILOT is not None and _PILOT.submodule_search_locations  # (this module is in it)
RP_BIN = os.path.join(_PILOT.submodule_search_locations[0], "rp_bin")
RP_TOOLS = ("prof", "gtod")


def install_rp_tools(pilot_sandbox: str) -> None:
    """Copy RP_TOOLS into the pilot sandbox (mode 0755; again if one was changed or removed)."""
    for name in RP_TOOLS:
        with open(os.path.join(RP_BIN, name), "rb") as f:
            text = f.read()
        path = os.path.join(pilot_sandbox, name)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)


def prof_command(pilot_sandbox: str) -> str:
    """RP 1.x's $RP_PROF: the pilot sandbox's copy of pilot/rp_bin/prof."""
    return os.path.join(pilot_sandbox, "prof")


def rp_pilot_vars(cfg: dict) -> dict:
    """RADICAL-Pilot's variables that name a unit's pilot and partition (an agent's config);
    RP_PROF here is the command (a function worker's, an RP 1.x task's): a ComputeUnit's own is
    its profile file (`unit_vars`)."""
    session_sandbox = os.path.dirname(cfg["pilot_sandbox"].rstrip("/"))
    return {
        "RP_SESSION_ID": cfg["session"],
        "RP_PILOT_ID": cfg["pilot"],
        "RP_PARTITION_ID": cfg["uid"],
        "RP_RESOURCE": cfg.get("resource") or "",
        "RP_PILOT_SANDBOX": cfg["pilot_sandbox"],
        "RP_SESSION_SANDBOX": session_sandbox,
        "RP_RESOURCE_SANDBOX": os.path.dirname(session_sandbox),
        "RP_PROF": prof_command(cfg["pilot_sandbox"]),
        "RP_GTOD": os.path.join(cfg["pilot_sandbox"], "gtod"),
    }


UNIT_VARS = (
    "PILOT_UNIT_ID",
    "RP_UNIT_ID",
    "RP_TASK_ID",
    "PILOT_UNIT_SANDBOX",
    "RP_UNIT_SANDBOX",
    "RP_TASK_SANDBOX",
    "RP_UNIT_NAME",
    "RP_TASK_NAME",
    "RP_RANK",
    "RP_RANKS",
    "RP_PROF",
    "RP_PROF_TGT",
)


def unit_vars(unit: dict, sandbox: str, prof: str) -> dict:
    """The variables of rank_env that name the unit itself (the rest follow its allocation;
    RP_RANK and RP_RANKS are a one-rank unit's here, rank_env sets them for each rank).
    `prof`: RP 1.x's RP_PROF command (`prof_command`), for units whose record says so."""
    uid = unit["uid"]
    name = unit.get("name") or uid
    trace = f"{sandbox}/{uid}.prof"
    if unit.get("prof") == "command":  # an RP 1.x task: RP_PROF is a command, RP_PROF_TGT
        traced = {"RP_PROF": prof, "RP_PROF_TGT": trace}  # the file it appends to
    else:  # RP 0.90's (and this project's) ComputeUnit: RP_PROF is its profile file
        traced = {"RP_PROF": trace}
    return {
        **traced,
        "PILOT_UNIT_ID": uid,
        "RP_UNIT_ID": uid,
        "RP_TASK_ID": uid,
        "PILOT_UNIT_SANDBOX": sandbox,
        "RP_UNIT_SANDBOX": sandbox,
        "RP_TASK_SANDBOX": sandbox,
        "RP_UNIT_NAME": name,
        "RP_TASK_NAME": name,
        "RP_RANK": "0",
        "RP_RANKS": "1",
    }


def grant_ids(node_types: Iterable[str], grant: dict) -> dict:
    """{type: "id,id"} for every pool type of the node (empty string for types not granted)."""
    return {t: _ids(grant.get(t, ())) for t in node_types}


_BASE_VARS = ("PILOT_UNIT_SANDBOX", "RP_UNIT_SANDBOX", "RP_TASK_SANDBOX", "RP_RANK", "RP_RANKS")


def call_base_env(workdir: str, node_name: str) -> dict:
    """The part of rank_env's environment every function call on a node has alike (their
    sandbox is their workers' directory; one rank): call_unit_env has the rest."""
    return {
        "PILOT_UNIT_SANDBOX": workdir,
        "RP_UNIT_SANDBOX": workdir,
        "RP_TASK_SANDBOX": workdir,
        "PILOT_NODE_NAME": node_name,
        "PILOT_RANK": "0",
        "RP_RANK": "0",
        "PILOT_RANKS": "1",
        "RP_RANKS": "1",
    }


def _unit_and_ids(unit: dict, ids: dict) -> dict:
    """The unit's `environment` (its %(cpus_ids)s-style placeholders filled) and the
    PILOT_<TYPE>_IDS variables of its ids: what rank_env and call_unit_env both start from."""
    env = {}
    user = unit.get("environment")
    if user:
        mapping = {f"{type_key(t).lower()}_ids": v for t, v in ids.items()}
        env.update({k: (_fill(v, mapping) if "%(" in v else v) for k, v in user.items()})
    for t, v in ids.items():
        env[ids_var(t)] = v
    return env


def call_unit_env(unit: dict, ids: dict, has_gpus: bool) -> tuple[dict, str | None]:
    """The rest of a function call's rank_env (its unit's ids and its allocation's: with
    call_base_env, what rank_env gives for it), and the GPU variable's name, as rank_env."""
    env = _unit_and_ids(unit, ids)
    uid = unit["uid"]
    name = unit.get("name") or uid
    env["PILOT_UNIT_ID"] = env["RP_UNIT_ID"] = env["RP_TASK_ID"] = uid
    env["RP_UNIT_NAME"] = env["RP_TASK_NAME"] = name
    var = None
    if has_gpus or ids.get("gpus"):
        var = (unit.get("policy") or {}).get("gpu_env_str") or "CUDA_VISIBLE_DEVICES"
        env[var] = ids.get("gpus", "")
    if ids.get("gpus"):
        env["RP_GPU_ID"] = ids["gpus"]
    return env, var
