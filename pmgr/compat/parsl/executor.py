"""pilot.parsl.PilotExecutor: a Parsl executor whose tasks are units of a pilot.

    from parsl.config import Config
    from pilot.parsl import PilotExecutor

    parsl.load(Config(executors=[PilotExecutor(label="pilot")]))   # a local pilot, all cores
    PilotExecutor(label="gpu", pilot_description=pd, partition=rp.ComputePartitionDescription(
        cores=4, gpus=2))                                           # a partition of its own

It is a thin layer over rp.Executor (pmgr/compat/futures/executor.py), which owns the pilot, the
futures and the batching.  What Parsl hands `submit(func, resource_specification, *args, **kwargs)`:
    a python app    func is Parsl's wrapped app (wrap_error: its exception comes back as a
                    RemoteExceptionWrapper value, which the DataFlowKernel raises); it runs as
                    a function unit, in the client's current directory (as a local
                    HighThroughputExecutor's workers do)
    a bash app      func is wrap_error(partial(remote_side_bash_executor, app)): the app is
                    called here to make its command line, with Parsl's errors for a bad one
                    (AppBadFormatting, BashAppNoReturn); the command runs as an executable unit
                    (`/bin/bash -c`, in the client's current directory) whose stdout and stderr
                    go where Parsl's `stdout=` / `stderr=` say (a path, (path, mode), a File;
                    opened here first, as Parsl opens them: BadStdStreamFile, the header
                    "--> executable follows <--" in stderr); its exit code comes back as
                    BashExitFailure, outputs that are not there as MissingOutputs, `walltime`
                    as AppTimeout.  A bash app wrapped further (in-task staging, monitoring)
                    runs as a function unit instead, as Parsl's own worker would run it.
    resource_specification (parsl_resource_specification=) -> unit fields:
        cores, gpus                     per rank
        ranks                           ranks, each a process running the command (bash apps)
        mpi: true                       one MPI starter over the ranks (bash apps)
        partition                       the partition uid it must run in
        running_time_min                its runtime limit: canceled then, AppTimeout
    other keys (memory, disk, priority, ...) are not used here; each is logged once.
    A Parsl MPI app (a bash app with num_ranks, ranks_per_node, num_nodes, launcher_options, as
    Parsl's MPIExecutor takes them) runs once, holding num_ranks x cores on one node (several
    such apps share a node where its cores allow, which MPIExecutor's whole-node blocks
    cannot), with $PARSL_MPI_PREFIX, $PARSL_MPIEXEC_PREFIX, $PARSL_SRUN_PREFIX and
    $PARSL_APRUN_PREFIX composed by Parsl's own composer over that node (PilotExecutor's
    mpi_launcher picks PARSL_MPI_PREFIX, as MPIExecutor's does).  An app of num_nodes > 1
    holds that many whole nodes (a rank of all a node's cores on each: as MPIExecutor's
    blocks) and runs once, in its rank 0, its prefixes naming those nodes ($PILOT_NODE_LIST).
    The srun prefixes get `--overlap --cpu-bind=none` (SRUN_HEAD): on SLURM the node daemons
    run as a job step of the pilot's allocation and hold a CPU of every node, so a step without
    it that needs that CPU would wait as long as the pilot runs (MPIExecutor's workers run in
    the batch script, no step); and the cores the app's ranks use are the pilot's placement,
    not SLURM's binding (launcher_options come after: a --cpu-bind there wins).
Outputs and std streams are checked and opened where the client sees them: the client and the
pilot share a file system (a local pilot, a cluster's shared file system), as Parsl's default
staging assumes.  Not supported: Parsl's monitoring (resource monitoring and its radio:
monitor_resources() is False), and scaling (the pilot is the block).
"""

from __future__ import annotations

import functools
import logging
import os
from concurrent.futures import Future
from typing import Any

from parsl.app.bash import remote_side_bash_executor
from parsl.app.errors import (
    AppBadFormatting,
    AppTimeout,
    BadStdStreamFile,
    BashAppNoReturn,
    BashExitFailure,
    MissingOutputs,
    wrap_error,
)
from parsl.data_provider.files import File
from parsl.executors.base import ParslExecutor
from parsl.executors.errors import InvalidResourceSpecification
from parsl.executors.high_throughput.mpi_prefix_composer import VALID_LAUNCHERS, compose_all
from parsl.utils import RepresentationMixin, get_std_fname_mode

from pilot import states as S
from pilot.descriptions import ComputeUnitDescription
from pilot.pmgr.compat.futures import Executor, ExecutorError, call_outcome
from pilot.rp.names import MPI

log = logging.getLogger("pmgr.parsl")

# a bash app's unit: /bin/bash -c SCRIPT parsl-bash CWD STDOUT STDERR COMMAND
BASH_SCRIPT = (
    'cd -- "$1" || exit 1\n'
    '[ -z "$2" ] || exec >>"$2"\n'
    '[ -z "$3" ] || exec 2>>"$3"\n'
    'exec /bin/bash -c "$4"\n'
)
# a Parsl MPI app's unit: the same, the PARSL_*_PREFIX variables composed over its nodes
# first; a unit over several nodes (a rank holding each) runs it once, in its rank 0
MPI_BASH_SCRIPT = (
    '[ "${PILOT_RANK:-0}" = 0 ] || exit 0\n'
    "for v in PARSL_MPI_PREFIX PARSL_MPIEXEC_PREFIX PARSL_SRUN_PREFIX PARSL_APRUN_PREFIX; do\n"
    '  p=${!v-}; [ -z "$p" ] || export "$v=${p//@PILOT_NODES@/$PILOT_NODE_LIST}"\n'
    "done\n" + BASH_SCRIPT
)
SRUN_HEAD = "srun --overlap --cpu-bind=none "  # (the module's header: Parsl MPI apps)
NODES = "@PILOT_NODES@"  # the nodes' names in a composed prefix, filled where the app runs
MPI_KEYS = ("num_ranks", "ranks_per_node", "num_nodes", "launcher_options")
USED_KEYS = (
    "cores gpus ranks num_ranks num_nodes ranks_per_node launcher_options mpi partition "
    "running_time_min"
).split()


class PilotExecutor(ParslExecutor, RepresentationMixin):
    """A Parsl executor on a pilot: python apps are function units, bash apps executable
    units.

    A thin layer over rp.Executor, made at `start()` (Parsl calls it when the config is
    loaded), which owns the pilot, the futures and the batching.  Not supported: Parsl's
    monitoring (`monitor_resources()` is False) and scaling (the pilot is the block).

    Args:
        label (str): the executor's label in the Parsl config (default "pilot").
        pilot_description (ComputePilotDescription | None): the pilot to submit (default: a
            local pilot on local.localhost with all cores, one partition).
        partition (str | ComputePartitionDescription | None): run every task in this
            partition: a uid of the pilot's, or a ComputePartitionDescription started in the
            pilot (stopped at shutdown).
        session (Session | None): the rp.Session to use (default: a new one, closed at
            shutdown).
        pilot (Pilot | None): a Pilot of `session` to run on, instead of submitting one.
        max_workers (int | None): cores of the local pilot (default: this machine's).
        working_dir (str | None): kept as Parsl sets it; tasks run in the client's current
            directory.
        storage_access (list[Any] | None): Parsl staging providers (default: Parsl's).
        mpi_launcher (str): which prefix $PARSL_MPI_PREFIX is for a Parsl MPI app: "mpiexec"
            (default, as MPIExecutor's), "srun" or "aprun".

    Raises:
        ValueError: an mpi_launcher Parsl does not know.
    """

    def __init__(
        self,
        label: str = "pilot",
        pilot_description=None,
        partition=None,
        session=None,
        pilot=None,
        max_workers: int | None = None,
        working_dir: str | None = None,
        storage_access: list[Any] | None = None,
        mpi_launcher: str = "mpiexec",
    ) -> None:
        super().__init__()
        if mpi_launcher not in VALID_LAUNCHERS:
            raise ValueError(
                f"PilotExecutor: mpi_launcher={mpi_launcher!r} must be one of {VALID_LAUNCHERS}"
            )
        self.mpi_launcher = mpi_launcher
        self.label = label
        self.pilot_description = pilot_description
        self.partition = partition
        self.session = session
        self.pilot = pilot
        self.max_workers = max_workers
        self.working_dir = working_dir
        self.storage_access = storage_access
        self.executor: Executor | None = None
        self._said: set[str] = set()  # resource keys not used here, logged once each

    def start(self) -> None:
        """Make the rp.Executor (and so the session, pilot, partition it owns), from the
        constructor's arguments; Parsl calls it when the config is loaded.

        Raises:
            ValueError: arguments rp.Executor refuses (e.g. `max_workers` with a pilot, a
                partition uid no pilot has), or a pilot description that cannot be planned.
        """
        self.executor = Executor(
            self.max_workers,
            pilot_description=self.pilot_description,
            session=self.session,
            pilot=self.pilot,
            partition=self.partition,
        )

    def monitor_resources(self) -> bool:
        return False  # Parsl's resource monitoring is not supported

    def shutdown(self) -> None:
        """End the rp.Executor (`shutdown(wait=True, cancel_futures=True)`: tasks not started
        are canceled, what it owns ends), then Parsl's own shutdown."""
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)
        super().shutdown()

    # -- tasks ---------------------------------------------------------------------------------
    def submit(self, func, resource_specification: dict, *args, **kwargs) -> Future:
        """A Parsl app's call as a unit: a python app as a function unit, a bash app as an
        executable unit (`/bin/bash -c`), both in the client's current directory (see the
        module's header).

        Args:
            func (callable): what Parsl hands over: the wrapped python app, or
                wrap_error(partial(remote_side_bash_executor, app)) for a bash app.
            resource_specification (dict): Parsl's parsl_resource_specification: cores, gpus
                (per rank); ranks, num_ranks or num_nodes x ranks_per_node, mpi (bash apps);
                partition (a partition uid); running_time_min (its runtime limit: canceled
                then, AppTimeout).  Other keys are not used (each logged once).
            *args (object): the app's positional arguments.
            **kwargs (object): the app's keyword arguments (a bash app's stdout=, stderr=,
                outputs=, walltime= among them).

        Returns:
            Future: the app's result.  Parsl's errors for a bad app or specification
                (AppBadFormatting, BashAppNoReturn, BadStdStreamFile, ...) and a bash app's
                outcome (BashExitFailure, MissingOutputs, AppTimeout) are its exception.

        Raises:
            RuntimeError: called before `start()`.
            InvalidResourceSpecification: a `running_time_min` that is not a number > 0.
        """
        if self.executor is None:
            raise RuntimeError(f"PilotExecutor {self.label!r}: submit before start()")
        fields, runtime, bash_only = self._fields(resource_specification or {})
        app = _bash_app(func)
        try:
            if app is None:
                if bash_only:
                    raise InvalidResourceSpecification(
                        set(bash_only),
                        "a python app is one call in one worker; ranks and mpi are for bash apps",
                    )
                return self.executor.submit_call(
                    func,
                    args,
                    kwargs,
                    self.executor.call_fields(**fields) if fields else None,
                    os.getcwd(),
                    _python_outcome,
                    runtime,
                )
            return self._submit_bash(app, args, kwargs, fields, runtime)
        except Exception as exc:  # (Parsl's errors for a bad app or spec: the task's outcome)
            fut: Future = Future()
            fut.set_exception(exc)
            return fut

    def _fields(self, spec: dict) -> tuple[dict, float | None, list]:
        """Unit fields, the runtime limit (s) and the bash-only keys of a resource spec."""
        for key in spec.keys() - set(USED_KEYS) - self._said:
            self._said.add(key)
            log.warning("%s: resource specification key %r is not used", self.label, key)
        fields = {k: spec[k] for k in ("cores", "gpus", "partition") if k in spec}
        bash_only = [k for k in MPI_KEYS if k in spec]
        if bash_only:
            if "ranks" in spec or spec.get("mpi"):
                raise InvalidResourceSpecification(
                    {"ranks", "mpi"} & set(spec),
                    f"{', '.join(bash_only)} make a Parsl MPI app (run once, $PARSL_MPI_PREFIX "
                    "starts the ranks); ranks and mpi run the ranks themselves: give one kind",
                )
            fields.update(self._mpi_app(spec))
        if spec.get("ranks") is not None:
            fields["ranks"] = spec["ranks"]
            bash_only.append("ranks")
        if spec.get("mpi"):
            fields["cpu_process_type"] = MPI
            bash_only.append("mpi")
        minutes = spec.get("running_time_min")
        if minutes is not None and (
            isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or minutes <= 0
        ):
            raise InvalidResourceSpecification(
                {"running_time_min"}, f"running_time_min={minutes!r} must be a number > 0"
            )
        return fields, None if minutes is None else 60.0 * minutes, bash_only

    def _mpi_app(self, spec: dict) -> dict:
        """A Parsl MPI app's unit fields: on one node, all its ranks' cores there; on
        num_nodes > 1, whole nodes (a rank of each node's cores, as MPIExecutor's blocks);
        and Parsl's PARSL_*_PREFIX variables as its composer makes them, over those nodes
        (NODES, filled where the app runs)."""
        mpi = {k: spec[k] for k in MPI_KEYS if k in spec}
        for key in ("num_ranks", "ranks_per_node", "num_nodes"):
            v = mpi.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise InvalidResourceSpecification({key}, f"{key}={v!r} must be an integer >= 1")
        nodes = mpi.get("num_nodes", 1)
        per_node = mpi.get("ranks_per_node")
        ranks = mpi.get("num_ranks")
        if ranks is None and per_node is None:
            raise InvalidResourceSpecification(
                set(mpi), "a Parsl MPI app needs num_ranks (or num_nodes and ranks_per_node)"
            )
        if per_node is None:
            per_node = max(1, ranks // nodes)
        if ranks is None:
            ranks = nodes * per_node
        if ranks != nodes * per_node:
            raise InvalidResourceSpecification(
                {"num_ranks", "ranks_per_node", "num_nodes"},
                f"num_ranks={ranks} is not num_nodes={nodes} x ranks_per_node={per_node}",
            )
        composed = {"num_ranks": ranks, "ranks_per_node": per_node}
        if "launcher_options" in mpi:
            composed["launcher_options"] = mpi["launcher_options"]
        marks = [f"@PILOT_NODE_{i}@" for i in range(nodes)]
        env = compose_all(self.mpi_launcher, composed, marks)
        for key, prefix in env.items():
            prefix = prefix.replace(",".join(marks), NODES)
            if prefix.startswith("srun "):  # a step beside the node daemons' (SRUN_HEAD)
                prefix = SRUN_HEAD + prefix[len("srun ") :]
            env[key] = prefix
        cores = per_node * spec.get("cores", 1)
        if nodes == 1:
            return {"cores": cores, "environment": env}
        whole = self._node_cores()
        if cores > whole:
            raise InvalidResourceSpecification(
                {"ranks_per_node"},
                f"ranks_per_node={per_node} x cores={spec.get('cores', 1)} is more than the "
                f"{whole} cores of a node of the pilot",
            )
        return {"ranks": nodes, "cores": whole, "environment": env}

    def _node_cores(self) -> int:
        """The cores of the largest node the app may run on (the executor's partition's, or
        any partition's of the pilot), as its agent reported them."""
        assert self.executor is not None  # (submit's: it raised before start())
        part = self.executor.partition
        parts = [part] if part is not None else self.executor.pilot.partitions
        sizes = [len(n.get("cores") or ()) for p in parts for n in _nodes(p)]
        if sizes:
            return max(sizes)
        size = self.executor.pilot.size
        return max(1, size["cores"] // max(1, size.get("nodes") or 1))

    def _submit_bash(self, app, args: tuple, kwargs: dict, fields: dict, runtime) -> Future:
        """A bash app as an executable unit (see the module's header)."""
        assert self.executor is not None  # (submit's: it raised before start())
        name = getattr(app, "__name__", "bash_app")
        command = _command(app, name, args, kwargs)
        out = _open_stream("stdout", kwargs.get("stdout"), None)
        err = _open_stream("stderr", kwargs.get("stderr"), command)
        walltime = kwargs.get("walltime")
        if walltime is not None:
            runtime = walltime if runtime is None else min(runtime, walltime)
        script = MPI_BASH_SCRIPT if "environment" in fields else BASH_SCRIPT
        desc = ComputeUnitDescription(
            executable="/bin/bash",
            arguments=["-c", script, "parsl-bash", os.getcwd(), out, err, command],
            shell=False,
            **self.executor.call_fields(**fields),
        )
        outputs = [f for f in kwargs.get("outputs", []) if isinstance(f, File)]
        outcome = functools.partial(_bash_outcome, name, outputs, walltime)
        return self.executor.submit_unit(desc, outcome, runtime)


def _nodes(part) -> list:
    return (part.resources or {}).get("nodes") or []


# wrap_error's wrapper (functools.wraps copies the partial's __module__, "functools" since
# Python 3.11's partial has one: the wrapper's code is what says it is wrap_error's)
_WRAP_ERROR_CODE = wrap_error(len).__code__


def _bash_app(func):
    """The app of a plain Parsl bash task (wrap_error over partial(remote_side_bash_executor,
    app)), else None."""
    inner = getattr(func, "__wrapped__", None)
    if (
        isinstance(inner, functools.partial)
        and inner.func is remote_side_bash_executor
        and getattr(func, "__code__", None) is _WRAP_ERROR_CODE
        and len(inner.args) == 1
        and not inner.keywords
    ):
        return inner.args[0]
    return None


def _command(app, name: str, args: tuple, kwargs: dict) -> str:
    """The app's command line, with Parsl's errors (parsl/app/bash.py)."""
    command = None
    try:
        command = app(*args, **kwargs)
        if not isinstance(command, str):
            raise ValueError(f"Expected a str for bash_app commandline, got {type(command)}")
    except AttributeError as e:
        if command is not None:
            raise AppBadFormatting(
                f"App formatting failed for app '{name}' with AttributeError: {e}"
            ) from None
        raise BashAppNoReturn(
            f"Bash app '{name}' did not return a value, or returned None - with this exception: {e}"
        ) from None
    except IndexError as e:
        raise AppBadFormatting(
            f"App formatting failed for app '{name}' with IndexError: {e}"
        ) from None
    return command


def _open_stream(fdname: str, spec, command: str | None) -> str:
    """Open a std stream file as Parsl does (creating its directory, truncating for "w"; the
    command into stderr), so that the unit appends to it; its absolute path ("" for none)."""
    if spec is None:
        return ""
    if isinstance(spec, File):
        fname, mode = spec.filepath, "w"
    else:
        fname, mode = get_std_fname_mode(fdname, spec)
    try:
        if os.path.dirname(fname):
            os.makedirs(os.path.dirname(fname), exist_ok=True)
        with open(fname, mode) as f:
            if command is not None:
                print(f"--> executable follows <--\n{command}\n--> end executable <--", file=f)
    except Exception as e:
        raise BadStdStreamFile(str(fname)) from e
    return os.path.abspath(fname)


def _python_outcome(fut, unit):
    """A python app's value (Parsl's wrap_error gives its exception as a value), or its
    unit's end as Parsl names it."""
    if unit.state == S.CANCELED:  # (at its runtime limit)
        raise AppTimeout(f"{unit.uid} exceeded its running_time_min: {fut.runtime} seconds")
    return call_outcome(fut, unit)


def _ran(unit) -> float:
    """Seconds from the unit's EXECUTING to its final state (its history's stamps)."""
    stamps = dict(unit.history)
    return stamps[unit.state] - stamps.get(S.EXECUTING, stamps[unit.state])


def _bash_outcome(name: str, outputs: list, walltime, fut, unit) -> int:
    """A bash app's result (0), or Parsl's exception for how its unit ended."""
    if unit.state == S.DONE and walltime is not None and _ran(unit) > walltime:
        # (it ended before its cancel reached it: Parsl's worker would have stopped it)
        raise AppTimeout(f"App {name} exceeded walltime: {walltime} seconds")
    if unit.state == S.DONE:
        missing = [f for f in outputs if not os.path.exists(f.filepath)]
        if missing:
            raise MissingOutputs(f"Missing outputs from app {name}", missing)
        return 0
    if unit.state == S.CANCELED:  # (at its runtime limit)
        raise AppTimeout(f"App {name} exceeded walltime: {walltime or fut.runtime} seconds")
    if unit.exit_code is not None:
        raise BashExitFailure(name, unit.exit_code)
    raise ExecutorError(f"{unit.uid} FAILED: {unit.reason}")
