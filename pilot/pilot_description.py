"""ComputePilotDescription: one batch job holding partitions, as plain validated data
(pilot/descriptions.py names every description; the base class and the common validators are in
pilot/fields.py).  Nothing is read or sized here: a pilot is sized where it is submitted
(partition/plan.py), which also reads its resource and network configs.
"""

from __future__ import annotations

from pilot import validate
from pilot.adapt_policy import Adapt
from pilot.fields import (
    Description,
    count,
    field,
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


def _adapt(owner, field, value):
    if value is None or isinstance(value, Adapt):
        return value
    if isinstance(value, dict):
        try:
            return Adapt(**value)
        except ValueError as exc:
            raise field_error(owner, field, value, f"Adapt's fields ({exc})") from None
    raise field_error(owner, field, value, "an rp.Adapt, a dict of its fields, or None")


class ComputePilotDescription(Description):
    """One batch job holding partitions.

    Built from keywords or from a dict of fields (RADICAL-Pilot style); every field is checked
    when it is set.  Nothing is read or sized here: the resource and network configs are read
    and the pilot sized when it is submitted (partition/plan.py).  With no parts,
    cores=/gpus=/nodes= give the pilot's size and it holds one partition over all of it
    (FILL), as an RP pilot would.

    Args:
        from_dict (dict | None): fields, RP style (keywords given too win).
        **kwargs (Any): the fields, below.

    Keyword Args:
        resource (str): SITE.NAME of a resource config in configs/, or the path of a YAML
            config (read, with the network config, when the pilot is submitted:
            partition/plan.py); default "local.localhost".
        parts (list[ComputePartitionDescription]): the initial partitions; they determine the
            job size (default []: one partition over the whole pilot).
        runtime (float): minutes the pilot may run (fractions allowed; default 10); at expiry
            it tears down and is DONE.
        nodes (int | None): an explicit size in nodes (>= 1); needed only when a part is a
            share or FILL.
        cores (int | None): an explicit size in cores (>= 1), likewise.
        gpus (int | None): an explicit size in GPUs (>= 0), likewise.
        max_nodes (int | None): the most nodes the pilot may hold in all its batch jobs; a
            reconfig that starts partitions beyond what it has free (sized in nodes, cores
            or GPUs) then grows it by another job of the missing nodes, given back once
            they hold no partition (default None: the pilot never grows; such partitions
            end FAILED).  Needs a resource with node daemons.
        adapt (Adapt | dict | None): grow while units wait and give back idle nodes on its
            own, between Adapt's min_nodes and max_nodes (pmgr/core/adapt.py).
        queue (str | None): batch queue, passed to the batch system.
        project (str | None): batch account, passed to the batch system.
        network_config (str | None): a `pilot network-config` file: the nodes' names and
            host ids.
        sandbox (str | None): the directory the pilot's sandbox goes under (default: the
            session directory).  RADICAL-Pilot's keys, so RP pilot descriptions work as
            written, are this one and the ones below.
        cleanup (bool): True: the pilot sandbox is removed when the session closes (default
            False).
        exit_on_error (bool): True: a pilot that ends FAILED interrupts the script's main
            thread (KeyboardInterrupt), as RP does (default False).
        output (str | None): file name (in the pilot sandbox) of the job's stdout.
        error (str | None): file name (in the pilot sandbox) of the job's stderr.
        memory (int | None): MB per node the job asks the batch system for.
        access_schema (str | None): accepted and kept with the pilot; how a resource is
            reached is the resource config's to say.
        candidate_hosts (list[str]): accepted and kept with the pilot (default []); which
            hosts it may use is the resource config's to say.

    Raises:
        ValueError: an unknown field or a value not accepted (naming the field, the value
            and what is accepted).
    """

    FIELDS = {
        "resource": ("local.localhost", text(optional=False)),
        "parts": ([], _parts),
        "runtime": (10, positive_minutes),
        "nodes": (None, optional_count(1)),
        "cores": (None, optional_count(1)),
        "gpus": (None, optional_count(0)),
        "max_nodes": (None, optional_count(1)),
        "adapt": (None, _adapt),
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


# RP 1.x's pilot keys that nothing here runs: refused when set, with the reason
PILOT_REFUSED = {
    "uid": "a pilot's uid is made by its PilotManager (pilot.NNNN)",
    "job_name": "the batch job is named after the pilot's uid",
    "app_comm": "no application channels are made; the tasks' own sockets or files serve",
    "backup_nodes": "no nodes are held back for failures",
    "services": "service tasks are not run here; run the service as a task of its own",
    "enable_ep": "no function endpoint is run",
    "reconfig_src": "resource configs are YAML files in configs/ or a path as resource=",
}


class PilotDescription(ComputePilotDescription):
    """RADICAL-Pilot 1.x's pilot description: a ComputePilotDescription with RP 1.x's keys and
    defaults (exit_on_error True; cores, gpus, nodes, memory 0 = unset), and `partitions` (this
    project's extension: RP 1.x's pilot holds one partition over all of it; `partitions=` lists
    ComputePartitionDescriptions instead, as `parts=` does).

    Args:
        from_dict (dict | None): fields, RP style (keywords given too win).
        **kwargs (Any): the fields: a ComputePilotDescription's (with the defaults below),
            and those below.

    Keyword Args:
        exit_on_error (bool): as a ComputePilotDescription's; default True here.
        cores (int): the pilot's cores (default 0: unset).
        gpus (int): the pilot's GPUs (default 0: unset).
        nodes (int): the pilot's nodes (default 0: unset).
        memory (int): MB per node (default 0: unset).
        partitions (list[ComputePartitionDescription]): the initial partitions (`parts`).
        prepare_env (dict[str, dict]): {name: spec}: as pilot.prepare_env(name, spec) for
            each, once submitted (default {}).
        input_staging (list): directives (pilot.stage_in's): files copied into the pilot
            sandbox before the pilot's job is submitted (a bare name: client -> pilot).
        output_staging (list): directives (pilot.stage_out's): files copied back once the
            pilot is final.

    Raises:
        ValueError: an unknown field or a value not accepted.  Refused at submit
            (`submit_error`), each saying why: the keys of PILOT_REFUSED (uid, job_name,
            app_comm, backup_nodes, services, enable_ep, reconfig_src) set to anything but
            their default.
    """

    FIELDS = {
        **ComputePilotDescription.FIELDS,
        "exit_on_error": (True, flag),
        "cores": (0, count(0)),  # (RP's defaults: 0 is unset, and `pd.cores += n` works)
        "gpus": (0, count(0)),
        "nodes": (0, count(0)),
        "memory": (0, count(0)),
        "prepare_env": ({}, lambda o, f, v: {} if v is None else _env_specs(o, f, v)),
        "uid": (None, text()),
        "job_name": (None, text()),
        "app_comm": ([], str_list),
        "backup_nodes": (0, field(validate.of_type(int, "an integer"))),
        "input_staging": ([], lambda o, f, v: [] if v is None else list(v)),
        "output_staging": ([], lambda o, f, v: [] if v is None else list(v)),
        "services": ([], lambda o, f, v: [] if v is None else list(v)),
        "enable_ep": (False, flag),
        "reconfig_src": (None, text()),
    }
    ALIASES = {"partitions": "parts"}

    def submit_error(self) -> str | None:
        for key, why in PILOT_REFUSED.items():
            if self.peek(key) != self.FIELDS[key][0]:
                return f"PilotDescription: {key}={self.peek(key)!r:.60} is not supported: {why}"
        return None

    def as_pilot(self) -> ComputePilotDescription:
        """The ComputePilotDescription it submits (RP 1.x's own keys are acted on apart)."""
        mine = set(PilotDescription.FIELDS) - set(ComputePilotDescription.FIELDS)
        unset = {k for k in ("cores", "gpus", "nodes", "memory") if getattr(self, k) == 0}
        fields = {k: v for k, v in self.to_stored().items() if k not in mine | unset}
        fields.setdefault("exit_on_error", self.exit_on_error)
        return ComputePilotDescription.from_stored(fields)


def _env_specs(owner, field, value):
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, dict) for k, v in value.items()
    ):
        raise field_error(owner, field, value, "{name: {type, setup, pre_exec, ...}}")
    return dict(value)
