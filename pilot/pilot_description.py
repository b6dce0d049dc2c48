"""ComputePilotDescription: one batch job holding partitions, as plain validated data
(pilot/descriptions.py names every description; the base class and the common validators are in
pilot/fields.py).  Nothing is read or sized here: a pilot is sized where it is submitted
(partition/plan.py), which also reads its resource and network configs.
"""

from __future__ import annotations

from pilot.fields import (
    Description,
    field_error,
    flag,
    optional_count,
    positive_minutes,
    str_list,
    text,
)
from pilot.partition_description import ComputePartitionDescription
from pilot.unit_description import file_name  # (a unit's stdout and stderr: the same check)


def _parts(owner, field, value):
    if value is None or isinstance(value, ComputePartitionDescription):
        value = [] if value is None else [value]
    if not isinstance(value, (list, tuple)):
        raise field_error(owner, field, value, "a list of ComputePartitionDescription")
    out = []
    for i, p in enumerate(value):
        if isinstance(p, dict):
            p = ComputePartitionDescription.from_stored(p)
        if not isinstance(p, ComputePartitionDescription):
            raise field_error(owner, f"{field}[{i}]", p, "a ComputePartitionDescription")
        out.append(p)
    return out  # empty: one partition over the whole pilot (RP's cores=/gpus= pilots)


class ComputePilotDescription(Description):
    """One batch job holding partitions.

    resource   SITE.NAME of a resource config in configs/, or the path of a YAML config (read,
               with the network config, when the pilot is submitted: partition/plan.py)
    parts      the initial partitions (ComputePartitionDescription); they determine the job size
    runtime    minutes the pilot may run (fractions allowed); at expiry it tears down and is DONE
    nodes, cores, gpus   an explicit size; needed only when a part is a share or FILL
    queue, project       batch queue and account, passed to the batch system
    network_config       a `pilot network-config` file: the nodes' names and host ids
    RADICAL-Pilot's keys, so RP pilot descriptions work as written:
    sandbox        the directory the pilot's sandbox goes under (default: the session directory)
    cleanup        True: the pilot sandbox is removed when the session closes
    exit_on_error  True: a pilot that ends FAILED interrupts the script's main thread
                   (KeyboardInterrupt), as RP does
    output, error  file names (in the pilot sandbox) of the job's stdout and stderr
    memory         MB per node the job asks the batch system for
    access_schema, candidate_hosts   accepted and kept with the pilot; how a resource is
                   reached and which hosts it may use are the resource config's to say
    With no parts, cores=/gpus=/nodes= give the pilot's size and it holds one partition over
    all of it (FILL), as an RP pilot would.
    """

    FIELDS = {
        "resource": ("local.localhost", text(optional=False)),
        "parts": ([], _parts),
        "runtime": (10, positive_minutes),
        "nodes": (None, optional_count(1)),
        "cores": (None, optional_count(1)),
        "gpus": (None, optional_count(0)),
        "queue": (None, text()),
        "project": (None, text()),
        "network_config": (None, text()),
        "sandbox": (None, text()),
        "cleanup": (False, flag),
        "exit_on_error": (False, flag),
        "output": (None, file_name),
        "error": (None, file_name),
        "memory": (None, optional_count(0)),
        "access_schema": (None, text()),
        "candidate_hosts": ([], str_list),
    }
