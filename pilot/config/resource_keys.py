"""The keys of a resource config: each one's default, its check and its doc, in one table.

`ResourceConfig`'s fields are the YAML keys (pilot/config/resource_config.py reads and checks a
config with them).  Each key is `opt(default, check, doc, shown=...)`: the default as the YAML would
give it, a check of pilot/validate.py's kind (where, value) -> the value as kept, the doc (what
the key says and what it accepts, Markdown) and, when the default needs words, how the docs show
it.  docs/hooks.py makes docs/reference/configuration.md's key table from these docs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

from pilot import validate
from pilot.config import plugins
from pilot.config.rp_sites import REQUIRED
from pilot.validate import bad
from pilot.wire.journal import SYNC_CHOICES

NODE_FAILURE = ("continue", "fail")
UNIT_LAUNCH = ("spawn", "zero")
MPI_COMMANDS = ("mpirun", "mpiexec", "srun")
BY_BATCH = "(by batch_system)"  # a default that follows from batch_system (parse fills it in)


# ---- what a value may be: pilot/validate.py's checks, and the few only resource configs need -----
def _count(minimum: int = 0, auto: bool = False):
    words = f"an integer >= {minimum}" + (' or "auto"' if auto else "")
    check = validate.count(minimum, None, ("auto",) if auto else (), accepted=words)

    def counted(where, value):
        value = check(where, value)
        return len(os.sched_getaffinity(0)) if value == "auto" else value

    return counted


def _choice(choices):
    return validate.one_of(choices, accepted=f"one of {tuple(choices)}")


_positive_seconds = validate.positive("a number of seconds > 0")


def _seconds(where, value) -> float:
    return float(_positive_seconds(where, value))


_name = validate.of_type((str, int), "a name")
_listed_names = validate.list_of(_name, "a list of names")
_listed_lines = validate.list_of(
    validate.of_type(str, "a shell line"), "a list of shell lines", none_is_empty=True
)


def _names(where, value) -> tuple:
    return tuple(str(h) for h in _listed_names(where, value))


def _lines(where, value) -> tuple:
    return tuple(_listed_lines(where, value))


def _overhead(where, value):
    value = value or {}
    accepted = [f.name for f in fields(AgentOverhead)]
    if not isinstance(value, dict) or set(value) - set(accepted):
        raise bad(where, value, f"a mapping with keys among {accepted}")
    return AgentOverhead(**{k: _count()(f"{where}.{k}", v) for k, v in value.items()})


def _mpi_command(where, value):
    if value is not None and (
        not isinstance(value, str)
        or not value
        or (os.path.basename(value) not in MPI_COMMANDS and "/" not in value)
    ):
        raise bad(where, value, f"one of {list(MPI_COMMANDS)} or the path of one")
    return value


def _batch_options(where, value):
    value = value or {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str)
        and "." in k
        and isinstance(v, (str, int))
        and not ({'"', "\n"} & set(str(v)))  # (a directive's value is written in "...")
        for k, v in value.items()
    ):
        raise bad(
            where,
            value,
            'a mapping of PSI/J custom attributes {"pbs.l": "..."} (values without " or newline)',
        )
    return {k: str(v) for k, v in value.items()}


def _required(where, value):
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not set(value) <= set(REQUIRED):
        raise bad(where, value, f"a list of pilot description fields among {REQUIRED}")
    return tuple(value)


_address = validate.nonempty(accepted="an IP address, an interface name or 'auto'")


def opt(default, check, doc: str, shown: str | None = None):
    """A resource config key: its default (a value as the YAML would give it), its check, its
    doc (Markdown: what it says and accepts) and `shown`, the default in the docs' words (None:
    the default itself)."""
    return field(default=default, metadata={"check": check, "doc": doc, "shown": shown})


@dataclass(frozen=True)
class AgentOverhead:
    cores: int = 0
    gpus: int = 0
    nodes: int = 0


@dataclass(frozen=True)
class ResourceConfig:
    """One resource (docs/reference/configuration.md lists every key, made from the docs
    here); the YAML keys are these fields."""

    name: str = field(metadata={"check": None})  # (SITE.NAME or the file's stem; not a key)
    description: str | None = opt(
        None, validate.nonempty(accepted="a text"), "a line for `pilot resources`"
    )
    batch_system: str = opt(
        "local",
        _choice(plugins.BATCH_SYSTEMS),
        "how the pilot job is submitted: `local` (a process tree here), or through PSI/J: "
        "`slurm`, `pbs` (PBS Pro), `lsf`",
    )
    launch_method: str = opt(
        "fork",
        _choice(plugins.LAUNCH_METHODS),
        "how node daemons start: `fork` (processes here, forked from one node zygote that "
        "imported the daemon once: agent/node/zygote.py), `exec` (processes here, a fresh "
        "interpreter each: the old way, bench/bringup.py's baseline), `netns` (one per network "
        "namespace in `hosts`), `srun` (SLURM), `mpiexec` (one mpiexec over the nodes: PBS "
        "Pro's PALS or MPICH's hydra), `ssh` (one ssh per node)",
    )
    nodes: int = opt(
        1, _count(minimum=1), "the number of nodes the resource offers a pilot (at most)"
    )
    node_names: tuple[str, ...] = opt(
        (),
        _names,
        "names of the nodes, one per node",
        shown="`localhost`, or `node0` .. `nodeN-1`",
    )
    cores_per_node: int = opt(
        "auto",
        _count(auto=True),
        "cores per node; a number may exceed the machine's (logical cores, bound round-robin "
        "onto the real ones)",
        shown="`auto` (what this machine has)",
    )
    gpus_per_node: int = opt(0, _count(), "GPUs per node (ids 0..n-1)")
    agent_overhead: AgentOverhead = opt(
        None,
        _overhead,
        "what each partition's agent needs on top of the partition's own; added when the "
        "pilot's size is derived",
        shown="`{cores: 0, gpus: 0, nodes: 0}`",
    )
    resource_pool: dict = opt(  # per node: type -> [{id, slots}] (resource_config.parse_pool)
        None,
        validate.optional(validate.mapping),
        "per node, user-defined slot types beside cpus and gpus: `{type: count}` or "
        "`{type: [{id, slots}]}` (`gpus:` gives slots of the node's GPUs); a count of 0 "
        "declares an empty type",
    )
    client_timeout: float = opt(
        60, _seconds, "seconds a pilot keeps running without hearing from its client"
    )
    python: str | None = opt(
        None,
        validate.nonempty(accepted="the path of an interpreter"),
        "the interpreter the pilot job runs on its nodes; its `$VARS` and a leading `~` are "
        "expanded by the job's shell, where it runs (RP's `virtenv`, `python_interpreter`)",
        shown="the client's interpreter",
    )
    queue: str | None = opt(
        None,
        validate.nonempty(accepted="a queue name"),
        "the batch queue (a pilot's `queue=` takes precedence)",
    )
    account: str | None = opt(
        None,
        validate.nonempty(accepted="a project or account name"),
        "the project charged (a pilot's `project=` takes precedence)",
    )
    psij_executor: str | None = opt(
        None,
        validate.nonempty(accepted="a PSI/J executor name"),
        "the PSI/J executor that submits the job",
        shown="the `batch_system`'s name",
    )
    queue_poll_interval: float = opt(
        30, _seconds, "seconds between PSI/J's looks at the batch queue"
    )
    node_daemons: bool = opt(
        BY_BATCH,
        validate.flag("true or false"),
        "`true`: a node daemon per node runs the units (multi-node bring-up, "
        "`partition/nodes/node_set.py`); `false`: the agents run units themselves on this machine",
        shown="`true` under a batch system (`slurm`, `pbs`, `lsf`), else `false`",
    )
    hosts: tuple[str, ...] = opt(
        (),
        _names,
        "`launch_method: netns`: the network namespace of each node; `mpiexec` / `ssh`: the "
        "host of each node (default: the batch job's node file, `$PBS_NODEFILE` or "
        "`$LSB_DJOB_HOSTFILE`)",
    )
    address: str = opt(
        "127.0.0.1",
        _address,
        "where the pilot's node channels listen: an IP address, an interface name, or `auto` "
        "(the address the pilot's first node reaches the client from); node daemons listen "
        "where they reach the bootstrap from",
    )
    client_address: str | None = opt(
        None,
        _address,
        "where the pilot's bootstrap reaches the client: an IP address, an interface name such "
        "as `ib0`, or `auto`",
        shown="the session's address (`127.0.0.1` unless `Session(address=)` or "
        "`PILOT_CLIENT_ADDRESS` says otherwise)",
    )
    fanout: int | None = opt(
        None,
        validate.optional(_count(minimum=2)),
        "width of the channel-table broadcast tree (at least 2); unset: the bootstrap sends the "
        "table to every node itself while that is at most 256 MiB in all (no connection between "
        "nodes), else a tree of width 8",
    )
    bringup_timeout: float = opt(
        30, _seconds, "seconds every bring-up gather waits (daemons up, table received)"
    )
    node_timeout: float = opt(
        60,
        _seconds,
        "seconds a node daemon may be silent (plus 3 s for a link that came back) while the "
        "bootstrap hears another node, before its node is lost; a daemon never halts for the "
        "bootstrap's silence (pilot/wire/liveness.py); see [Liveness timeouts](#liveness-timeouts)",
        shown="`60` (`slurm.localhost` 60; `local.nodes4` 10)",
    )
    pulse_rate: int = opt(
        2048,
        _count(minimum=1),
        "node heartbeats a second the bootstrap takes, at most: every daemon and the bootstrap "
        "beat every 0.5 s up to half as many nodes, less often beyond (at most every "
        "node_timeout / 4 or 5 s; chosen from the nodes the pilot starts with), and a silent node "
        "is lost 3 s later for each second the period grew (pilot/wire/liveness.py); see "
        "[Liveness timeouts](#liveness-timeouts)",
    )
    node_failure: str = opt(
        "continue",
        _choice(NODE_FAILURE),
        "`continue` (the node's resources are marked down, its partitions `FAILED`, the rest "
        "go on; a pilot that lost every node ends `FAILED`) or `fail` (the pilot ends "
        "`FAILED`)",
    )
    mpi_command: str | None = opt(
        BY_BATCH,
        _mpi_command,
        "how units with `cpu_process_type=rp.MPI` start: one MPI starter over the unit's "
        "ranks: `mpirun`, `mpiexec` (Open MPI's options), `srun`, or the path of one; the old "
        "name `mpi_launcher` is still read",
        shown="`srun` under SLURM, else `mpirun`",
    )
    unit_launch: str = opt(
        "spawn",
        _choice(UNIT_LAUNCH),
        "`spawn`: units are processes; `zero`: no process is ever started, each unit ends "
        "`DONE` (exit 0, no output) as soon as its agent has placed it: a benchmark of the "
        "stack alone (`local.zero`, `bench/zero.py`, agent/runners/zero.py)",
    )
    journal_sync: str = opt(
        "auto",
        _choice(SYNC_CHOICES),
        "whether an agent syncs its start journal (the units it started, which the bootstrap "
        "reads if the agent dies) before it starts them: `auto` unless the pilot sandbox is on "
        "a local file system (ext4, xfs, tmpfs, ...; on a shared one, NFS, Lustre, GPFS, DVS "
        "..., a crashed node's unsynced lines would be lost and its units run again), `always`, "
        "or `never` (pilot/wire/journal.py)",
    )
    sandbox: str | None = opt(
        None,
        validate.nonempty(accepted="a directory ($VARS, %(pd.project)s)"),
        "the directory pilot sandboxes go under (`<sandbox>/<session>/<pilot>`), unless a "
        "pilot names one; `$VARS` and `%(pd.project)s` are filled in at submit (RP's "
        "`default_remote_workdir`/radical.pilot.sandbox)",
        shown="none: the session directory",
    )
    pre_bootstrap: tuple[str, ...] = opt(
        (),
        _lines,
        "shell lines the pilot job runs before its bootstrap (bash, in the job's shell: "
        "`module load ...`); a failing line ends the job (RP's `pre_bootstrap_0`)",
    )
    batch_options: dict = opt(
        None,
        _batch_options,
        'PSI/J custom attributes of the batch job: `{"slurm.constraint": "cpu"}`, '
        '`{"pbs.l": "filesystems=home"}`, `{"lsf.alloc_flags": "gpumps nvme"}`, each written '
        'into the job script\'s directive as it is (`#BSUB -alloc_flags "gpumps nvme"`; no '
        '`"` or newline in a value)',
    )
    launcher: str | None = opt(
        None,
        validate.nonempty(accepted="a command"),
        "`launch_method: mpiexec` or `ssh`: the command (a name on `PATH` or a path)",
        shown="`mpiexec` / `ssh`",
    )
    launcher_options: tuple[str, ...] = opt(
        (),
        _lines,
        "the launcher's options, before the rest (hydra across hosts: `[-launcher, ssh]`; "
        "ssh: `[-i, KEY]`)",
    )
    required: tuple[str, ...] = opt(
        (),
        _required,
        "pilot description fields a pilot on this resource must give (`[project]`: RP's "
        "`mandatory_args`)",
    )
    notes: tuple[str, ...] = field(default=(), metadata={"check": None})  # (RP keys not used)

    def node_name(self, index: int) -> str:
        if self.node_names:
            return self.node_names[index]
        return "localhost" if self.nodes == 1 else f"node{index}"


KEYS = tuple(f.name for f in fields(ResourceConfig) if f.metadata.get("check"))


def key_docs() -> list[tuple[str, str, str]]:
    """(key, default as the docs show it, doc) of every key, in the table's order."""
    out = []
    for f in fields(ResourceConfig):
        if not f.metadata.get("check"):
            continue
        shown = f.metadata["shown"]
        if shown is None:
            shown = "none" if f.default in (None, ()) else f"`{f.default}`"
        out.append((f.name, shown, f.metadata["doc"]))
    return out
