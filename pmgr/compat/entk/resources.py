"""AppManager.resource_desc: EnTK's resource description, checked, as the PilotDescription of
the pilot the workflow runs on (pilot/pilot_description.py).

    EnTK key         pilot            notes
    resource         resource         local.localhost, local.simulated, a config path, ...
    walltime         runtime          minutes
    cpus             cores            the pilot's size
    gpus             gpus
    memory           memory           MB per node
    project, queue   project, queue   for the batch system
    access_schema    access_schema    (EnTK's older 'schema' is the same key)
    partitions       partitions       this project's: the pilot's initial partitions, each a
                                      ComputePartitionDescription or a dict of its fields
                                      ('cpus' for cores); stages name them (Stage.partition)
    max_nodes        max_nodes        this project's: the pilot may grow to this many nodes by
                                      batch jobs of its own (a stage's reconfig that starts a
                                      partition larger than what is free: partition/growth.py)
resource, walltime and cpus are mandatory (EnTKMissingError); a key not above is an
EnTKValueError listing the keys, as is one RADICAL-Pilot 1.x has that is not run here
(job_name: the batch job is named after the pilot's uid).
"""

from __future__ import annotations

from pilot.partition_description import ComputePartitionDescription
from pilot.pilot_description import PilotDescription
from pilot.pmgr.compat.entk.errors import EnTKMissingError, EnTKValueError, bad_type, bad_value
from pilot.pmgr.compat.entk.partitions import description

MANDATORY = ("resource", "walltime", "cpus")
KEYS = {  # EnTK key -> PilotDescription key
    "resource": "resource",
    "walltime": "runtime",
    "cpus": "cores",
    "gpus": "gpus",
    "memory": "memory",
    "project": "project",
    "queue": "queue",
    "access_schema": "access_schema",
    "schema": "access_schema",
    "partitions": "partitions",
    "max_nodes": "max_nodes",
}
OWNER = "resource_desc"


def checked(rd) -> dict:
    """The resource description as given, checked (EnTK's types; unknown keys refused)."""
    if not isinstance(rd, dict):
        raise bad_type(OWNER, "resource_desc", rd, f"a dict with keys {sorted(KEYS)}")
    for key in MANDATORY:
        if key not in rd:
            raise EnTKMissingError(f"{OWNER}: '{key}' is mandatory ({', '.join(MANDATORY)})")
    unknown = sorted(set(rd) - set(KEYS))
    if unknown:
        extra = " (job_name: the batch job is named after the pilot's uid)" * ("job_name" in rd)
        raise EnTKValueError(f"{OWNER}: unknown key(s) {unknown}{extra}; accepted: {sorted(KEYS)}")
    for key, kind in (("resource", str), ("project", str), ("queue", str), ("access_schema", str),
                      ("schema", str)):  # fmt: skip
        if rd.get(key) is not None and not isinstance(rd[key], kind):
            raise bad_type(OWNER, key, rd[key], "a string")
    for key, least in (("cpus", 1), ("gpus", 0), ("memory", 0), ("max_nodes", 1)):
        v = rd.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < least):
            raise bad_value(OWNER, key, v, f"an integer >= {least}")
    w = rd["walltime"]
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not w > 0:
        raise bad_value(OWNER, "walltime", w, "minutes > 0")
    return rd


def partitions(given) -> list[ComputePartitionDescription]:
    if not isinstance(given, (list, tuple)):
        raise bad_type(OWNER, "partitions", given, "a list of ComputePartitionDescription")
    return [description(OWNER, f"partitions[{i}]", p) for i, p in enumerate(given)]


def pilot_description(rd: dict, cleanup: bool = False) -> PilotDescription:
    """The PilotDescription of a checked resource description."""
    fields: dict[str, object] = {"exit_on_error": False, "cleanup": cleanup}  # (run(): its end)
    for key, value in rd.items():
        if value is None:
            continue
        fields[KEYS[key]] = partitions(value) if key == "partitions" else value
    try:
        pd = PilotDescription(fields)
    except ValueError as exc:
        raise EnTKValueError(f"{OWNER}: {exc}") from None
    error = pd.submit_error()
    if error:
        raise EnTKValueError(f"{OWNER}: {error}")
    return pd
