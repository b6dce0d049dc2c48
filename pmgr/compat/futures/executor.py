"""rp.Executor: a concurrent.futures.Executor whose calls are function units of a pilot.

    with rp.Executor() as ex:                      # a local pilot: all cores, one partition
        print(ex.submit(pow, 2, 10).result())      # 1024
        print(list(ex.map(abs, [-1, -2])))         # [1, 2]

    rp.Executor(max_workers=4)                     # a local pilot of 4 cores
    rp.Executor(pilot_description=pd)              # a pilot of that description
    rp.Executor(session=s, pilot=p, partition=p.partitions[1].uid)   # in that partition
    rp.Executor(session=s, pilot=p, partition=rp.ComputePartitionDescription(cores=2))
                                                   # a partition of its own, started in p

How a call travels: submit() packs it in the caller's thread (pilot/remote_call.py) and queues
it; the executor's feeder thread submits what is queued in one UnitManager.submit_units, a unit
per call or short calls bundled; the unit's states resolve the futures on the session's
delivery thread (pmgr/compat/futures/executor_feed.py: the Feed, a part the executor holds,
has the rules).  A future
is running once its unit is EXECUTING (once its bundle is submitted): Future.cancel() fails from
then on, as documented; before, it cancels the unit too.

What it owns it ends at shutdown (once its futures are done, or at interpreter exit): the
partition it started, the pilot it submitted, the session it opened; a session, pilot or
partition it was given stays.  Not supported: `initializer=`, `mp_context`,
`max_tasks_per_child` (the workers are the partition's, shared by its function units).
"""

from __future__ import annotations

import collections
import itertools
import os
import threading
import time
import weakref
from collections.abc import Iterator
from concurrent import futures

from pilot import remote_call, states as S
from pilot.adapt_policy import Adapt
from pilot.descriptions import (
    ComputePartitionDescription,
    ComputePilotDescription,
    ComputeUnitDescription,
)
from pilot.pmgr.compat.futures.executor_feed import (  # (ExecutorError: a face's name too)
    ExecutorError as ExecutorError,
    Feed,
)
from pilot.pmgr.core import PilotManager, Session, UnitManager

MAP_WINDOW = 20_000  # calls (or chunks) of a map submitted ahead of what it has yielded
RERUNS = 3  # times a call runs again when its partition is stopped under it
LOCAL_RUNTIME = 7 * 24 * 60  # minutes: a local pilot of an executor lasts until shutdown
END_TIMEOUT = 60.0  # seconds for an owned partition or pilot to end at shutdown
# calls worth keeping submitted beyond those that run at once (`_max_workers`): a call spends
# ~2 ms in the pilot's hops, and calls submitted together share the client's and the pilot's
# turns (and short ones their units); a Dask graph of 454 tasks on 2 cores, measured with 2,
# 8, 16, 32, 64, 128 and 512 in flight: 0.69-0.87, 0.42-0.58, 0.31-0.48, 0.32-0.36, 0.25-0.36,
# 0.29-0.34, 0.26-0.30 s (Dask's processes scheduler: 0.51-0.57 s).  Headroom, not a multiple:
# Dask keeps fewer tasks submitted to stay depth-first and hold less memory
IN_FLIGHT = 64


NOT_LOADED = object()


def call_outcome(fut: Future, unit):
    """A call's result (DONE), or raises: its own exception, ExecutorError (FAILED),
    TimeoutError (canceled at its runtime limit)."""
    if unit.state == S.DONE:
        value = fut.loaded  # (the feeder loaded it once already, for its time)
        if value is NOT_LOADED:
            try:
                value = unit.return_value
            except BaseException as exc:  # (a value this process cannot load: a module it
                # lacks, a file of the data directory that is gone, an unpickling that exits)
                why = f"{unit.uid}: its return value cannot be loaded: {exc!r}"
                raise ExecutorError(why) from None
        if type(value) is remote_call.Raised:
            raise value.rebuild(ExecutorError)
        return value
    if unit.state == S.CANCELED:
        raise TimeoutError(f"{unit.uid}: ran past its runtime limit of {fut.runtime} s")
    raise ExecutorError(f"{unit.uid} FAILED: {unit.reason}")


class Future(futures.Future):
    """A concurrent.futures.Future whose cancel() also cancels its unit."""

    def __init__(self, executor: Executor, outcome=call_outcome, runtime: float | None = None):
        super().__init__()
        self.unit = None  # the Unit, once submitted
        self.runs = 0  # times it was submitted
        self.outcome = outcome  # (future, final unit) -> its result, or raises
        self.runtime = runtime  # seconds it may run; then its unit is canceled
        self.timed_out = False
        self.started = False  # marked running (its unit was EXECUTING)
        self.dropped = False  # canceled (read without the future's lock)
        self.loaded: object = NOT_LOADED  # its value, when the feeder loaded it already
        self._executor = executor

    def cancel(self) -> bool:
        if self.dropped:  # (canceled already: as the standard library's, True and nothing
            return True  # more; notified again, it logged a CRITICAL 'unexpected state')
        if not super().cancel():
            return False
        self.dropped = True
        try:
            self.set_running_or_notify_cancel()  # wait() and as_completed() see it now
        except RuntimeError:  # (the executor noticed it first)
            pass
        if self.unit is not None:
            self._executor.cancel_units([self.unit], "canceled through its future")
        return True


_live: weakref.WeakSet = weakref.WeakSet()  # executors not shut down: ended at exit
_exiting = False


def _at_exit() -> None:
    """(interpreter exit, before atexit handlers: sessions close after this) Pending calls of
    every executor run to their end, then what each owns ends."""
    global _exiting
    _exiting = True
    for ex in list(_live):
        ex.shutdown(wait=True)


# (before atexit's handlers, as concurrent.futures does: a private function of threading)
threading._register_atexit(_at_exit)  # type: ignore[attr-defined]  # noqa: SLF001


def _adaptive(max_nodes, description, pilot, partition):
    """The pilot description with an adapt policy up to `max_nodes` (Executor(max_nodes=))."""
    if max_nodes is None:
        return description
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes < 1:
        raise ValueError(f"Executor: max_nodes={max_nodes!r} must be an int >= 1 or None")
    if description is None or pilot is not None:
        raise ValueError(
            "Executor: max_nodes= grows the pilot it submits: give pilot_description= (on a "
            "resource with node daemons), not pilot="
        )
    if partition is not None:
        raise ValueError(
            "Executor: max_nodes= and partition= given: calls held to one partition cannot "
            "use the nodes the pilot grows by"
        )
    if not isinstance(description, ComputePilotDescription):
        return description  # (_find_pilot says what is wrong with it)
    return description.with_fields(max_nodes=max_nodes, adapt=description.adapt or Adapt())


def _result_or_cancel(fut, end: float | None):
    try:
        return fut.result(None if end is None else end - time.monotonic())
    finally:
        fut.cancel()
        del fut


class Executor(futures.Executor):
    """A concurrent.futures.Executor whose calls are function units of a pilot (or of one of
    its partitions).

        with rp.Executor() as ex:                      # a local pilot: all cores
            print(ex.submit(pow, 2, 10).result())      # 1024
        rp.Executor(session=s, pilot=p, partition=p.partitions[1].uid)

    Short calls may go several to a unit; a call whose partition a reconfig stopped runs
    again elsewhere (`reruns` times).  What it made (the session, the pilot, the partition)
    ends at `shutdown`; what it was given stays.  Not supported: `initializer=`,
    `mp_context`, `max_tasks_per_child` (the workers are the partition's, shared by its
    function units).

    Args:
        max_workers (int | None): cores of the local pilot made when no pilot is given
            (default: this machine's); more than the machine has are logical cores sharing
            the real ones.
        pilot_description (ComputePilotDescription | None): submit this pilot (in `session`)
            and run the calls there.
        session (Session | None): the Session to use (default: a new one, closed at
            shutdown).
        pilot (Pilot | None): a Pilot of `session` to run the calls on (its UnitManager is
            shared).
        partition (str | ComputePartitionDescription | None): run every call in this
            partition: a uid of the pilot's (found among the session's pilots when no pilot
            is given), or a ComputePartitionDescription, started in the pilot now and stopped
            at shutdown.
        cores (int): cores each call holds (default 1).
        gpus (float): GPUs each call holds (default 0).
        reruns (int): times a call runs again when its partition is stopped under it
            (default 3).
        cwd (str | None): the directory calls run in (default: their workers' own,
            PILOT_SANDBOX/<partition>.functions).
        bundle (bool): short calls may share a unit (pmgr/compat/futures/executor_feed.py);
            False: a unit per call.
        max_nodes (int | None): grow the pilot made from `pilot_description` by batch jobs
            while calls wait, up to this many nodes, and give idle nodes back (its `adapt`
            policy, rp.Adapt, default settings unless the description has one): needs a
            `pilot_description` on a resource with node daemons, and no `partition`.

    Raises:
        ValueError: `max_nodes` without `pilot_description`, or with `pilot` or `partition`;
            `max_workers` with `pilot` or `pilot_description`, or not above 0; both
            `pilot` and `pilot_description`; a pilot of another session; a partition uid no
            pilot has; a `pilot_description` or `partition` of the wrong type; `cores` or
            `gpus` a unit cannot have.
        TypeError: a `max_workers` that is not an int.
    """

    def __init__(
        self,
        max_workers: int | None = None,
        *,
        pilot_description: ComputePilotDescription | None = None,
        session: Session | None = None,
        pilot=None,
        partition: str | ComputePartitionDescription | None = None,
        cores: int = 1,
        gpus: float = 0,
        reruns: int = RERUNS,
        cwd: str | None = None,
        bundle: bool = True,
        max_nodes: int | None = None,
    ) -> None:
        # (the arguments: the class docstring)
        if isinstance(reruns, bool) or not isinstance(reruns, int) or reruns < 0:
            raise ValueError(f"Executor: reruns={reruns!r} must be an integer >= 0")
        if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
            raise ValueError(f"Executor: cores={cores!r} must be an integer >= 1")
        if isinstance(gpus, bool) or not isinstance(gpus, (int, float)) or not gpus >= 0:
            raise ValueError(f"Executor: gpus={gpus!r} must be a number >= 0")
        pilot_description = _adaptive(max_nodes, pilot_description, pilot, partition)
        if max_workers is not None:
            if pilot is not None or pilot_description is not None:
                raise ValueError(
                    "Executor: max_workers= sizes the local pilot; with pilot= or "
                    "pilot_description= the pilot's partitions say how many calls run at once"
                )
            if isinstance(max_workers, bool) or not isinstance(max_workers, int):
                raise TypeError(f"Executor: max_workers={max_workers!r} must be an int or None")
            if max_workers <= 0:
                raise ValueError(
                    f"Executor: max_workers={max_workers}: max_workers must be greater than 0"
                )
        self._owned: list = []  # what shutdown ends, last first: session, pilot, partition
        self._in_flight: int | None = None  # `_max_workers` when set
        self._session = session or Session()
        if session is None:
            self._owned.append(self._session)
        try:
            self._pilot = self._find_pilot(pilot, pilot_description, partition, max_workers)
            self._umgr = self._pilot.umgr or self._new_unit_manager()
            self._partition = self._find_partition(partition)
        except BaseException:
            self._end_owned()
            raise
        # only what differs from a unit's defaults: each field set costs its validator
        self._fields: dict = {"cores": cores} if cores != 1 else {}
        if gpus != 0:
            self._fields["gpus"] = gpus
        if self._partition is not None:
            self._fields["partition"] = self._partition.uid
        else:
            self._fields["pilot"] = self._pilot.uid
        # its calls' queue, the feeder thread and the states' callback (checks the fields)
        self._feed = Feed(
            self._umgr,
            self._fields,
            cwd=cwd,
            reruns=reruns,
            bundling=bundle,
            busy=max(1, self._pilot.size["cores"]),  # calls in flight: a trickle lingers
            cores=self._cores,
            stopped_under=self._stopped_under,
            cancel_units=self.cancel_units,
        )
        self._umgr.register_callback(self._feed.on_state)
        _live.add(self)

    # -- where calls run ------------------------------------------------------------------------
    def _find_pilot(self, pilot, description, partition, max_workers):
        if pilot is not None:
            if description is not None:
                raise ValueError("Executor: pilot= and pilot_description= given; give one")
            if pilot.session is not self._session:
                raise ValueError(
                    f"Executor: pilot={pilot.uid} is not of session={self._session.uid}"
                )
            return pilot
        if isinstance(partition, str) and description is None:
            for p in self._session.pilots.values():
                if partition in p.parts:
                    return p
            raise ValueError(
                f"Executor: partition={partition!r} is not a partition of the session's "
                f"pilots {sorted(self._session.pilots)}"
            )
        if description is None:
            description = ComputePilotDescription(
                resource="local.localhost",
                cores=max_workers or os.cpu_count() or 1,
                runtime=LOCAL_RUNTIME,
            )
        elif not isinstance(description, ComputePilotDescription):
            raise ValueError(
                f"Executor: pilot_description={description!r} must be a ComputePilotDescription"
            )
        made = PilotManager(self._session).submit_pilots(description)
        self._owned.append(made)
        return made

    def _new_unit_manager(self) -> UnitManager:
        umgr = UnitManager(self._session)
        umgr.add_pilots(self._pilot)
        return umgr

    def _find_partition(self, partition):
        if partition is None:
            return None
        if isinstance(partition, str):
            return self._pilot.partition(partition)
        if not isinstance(partition, ComputePartitionDescription):
            raise ValueError(
                f"Executor: partition={partition!r} must be a partition uid or a "
                "ComputePartitionDescription"
            )
        made = self._pilot.reconfig(start=[partition])[0]
        self._owned.append(made)
        return made

    @property
    def session(self) -> Session:
        """The Session the calls run in (its own, or the one it was given)."""
        return self._session

    @property
    def pilot(self):
        """The Pilot the calls run on (its own, or the one it was given)."""
        return self._pilot

    @property
    def partition(self):
        """The Partition the calls run in (None: any of the pilot's)."""
        return self._partition

    @property
    def unit_manager(self) -> UnitManager:
        """The UnitManager its units are submitted with (the pilot's, when it had one)."""
        return self._umgr

    # -- submit ------------------------------------------------------------------------------------
    def submit(self, fn, /, *args, **kwargs) -> Future:
        """Schedules fn(*args, **kwargs) as a function unit; returns its Future.

        Args:
            fn (callable): the function (packed in the caller's thread, pilot/remote_call.py).
            *args (object): its positional arguments.
            **kwargs (object): its keyword arguments.

        Returns:
            Future: its result is what the call returned; it raises the call's own exception,
                ExecutorError when the unit FAILED, TimeoutError when it was canceled at its
                runtime limit.

        Raises:
            RuntimeError: after shutdown (or interpreter shutdown).
        """
        return self._queued(Future(self), remote_call.prepare(fn, args, kwargs))

    def submit_call(
        self,
        fn,
        args: tuple,
        kwargs: dict,
        fields: dict | None = None,
        cwd: str | None = None,
        outcome=call_outcome,
        runtime: float | None = None,
    ) -> Future:
        """submit(fn, *args, **kwargs) with its own unit `fields` (call_fields() gives this
        executor's, updated), directory `cwd`, `outcome` and `runtime` limit (seconds from
        its start; a call with one is never bundled)."""
        call = remote_call.prepare(fn, args, kwargs)
        call.fields, call.cwd = fields, cwd
        return self._queued(Future(self, outcome, runtime), call)

    def call_fields(self, **fields) -> dict:
        """The unit fields this executor gives its calls, updated with `fields`."""
        return {**self._fields, **fields}

    def submit_unit(
        self, description: ComputeUnitDescription, outcome=call_outcome, runtime=None
    ) -> Future:
        """Submit a unit of one's own (an executable too); its future's result is
        outcome(future, unit) once the unit is DONE or FAILED (or canceled at its runtime
        limit, `runtime` seconds after it started)."""
        return self._queued(Future(self, outcome, runtime), description)

    def _queued(self, fut: Future, item) -> Future:
        if _exiting:
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")
        if not self._feed.put(fut, item):
            raise RuntimeError("cannot schedule new futures after shutdown")
        return fut

    def map(
        self,
        fn,
        *iterables,
        timeout: float | None = None,
        chunksize: int = 1,
        buffersize: int | None = MAP_WINDOW,
    ):
        """As Executor.map; chunksize > 1 runs that many calls per unit (as
        ProcessPoolExecutor does).  The iterables are pulled lazily: at most `buffersize`
        calls (chunks) are submitted and not yet yielded (as Python 3.14's buffersize; here
        by default MAP_WINDOW, so a generator of 10^7 arguments is never in memory at once;
        None: all at once, as the standard library before 3.14).

        Args:
            fn (callable): the function.
            *iterables (Iterable): its arguments, one iterable per parameter (zipped).
            timeout (float | None): seconds from the call of map() within which each result
                must be there; None: no limit.
            chunksize (int): calls per unit (1: a unit per call, or bundled as `submit`'s).
            buffersize (int | None): calls (chunks) submitted ahead of what was yielded
                (default 20,000); None: all at once.

        Returns:
            Iterator: the results, in order; closing it (or an error) cancels the calls not
                yet yielded.

        Raises:
            ValueError: `chunksize` below 1, or `buffersize` not None nor an int of at least 1.
        """
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        if buffersize is not None and (not isinstance(buffersize, int) or buffersize < 1):
            raise ValueError(f"buffersize={buffersize!r} must be None or an integer >= 1")
        end = None if timeout is None else time.monotonic() + timeout
        args: Iterator[tuple] = zip(*iterables)
        if chunksize > 1:
            fn, args = (
                remote_call.ChunkCall(fn),
                ((c,) for c in remote_call.chunks(args, chunksize)),
            )
        if buffersize is None:
            fs = collections.deque(self.submit(fn, *a) for a in args)
        else:
            fs = collections.deque(self.submit(fn, *a) for a in itertools.islice(args, buffersize))
        results = self._map_results(fs, args if buffersize is not None else None, fn, end)
        return itertools.chain.from_iterable(results) if chunksize > 1 else results

    def _map_results(self, fs: collections.deque, args, fn, end: float | None):
        """(map) Results in order; one more call submitted (from `args`, when lazy) as each is
        yielded; what is left is canceled when the iterator is closed or fails."""
        try:
            while fs:
                if args is not None and not self._feed.closed:
                    for a in itertools.islice(args, 1):
                        fs.append(self.submit(fn, *a))
                # (no name holds the future or its value while the caller has it)
                yield _result_or_cancel(fs.popleft(), end)
        finally:
            for fut in fs:
                fut.cancel()

    def cancel_units(self, units: list, reason: str) -> None:
        """Cancel these units of its calls (those not final yet).

        Args:
            units (list[Unit]): the units.
            reason (str): their `reason` in the CANCELED state.
        """
        live = [u.uid for u in units if not u.final]
        if live:
            self._umgr.cancel_units(live, reason)

    def _stopped_under(self, unit) -> bool:
        """Whether the unit was canceled because its partition was stopped (and its pilot and
        this executor's partition are still there to run it again)."""
        pilot = unit.pilot
        if not self._feed.keep or pilot is None or pilot.final:
            return False
        part = pilot.parts.get(unit.part) if unit.part else None
        if part is None or part is self._partition:
            return False
        return part.final or not part.accepting

    # -- shutdown ----------------------------------------------------------------------------------
    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more calls; once every future is done, what it owns ends (its partition, its
        pilot, its session, each within 60 s).  Also runs at interpreter exit.

        Args:
            wait (bool): True: return once that is done; False: at once (it is done on a
                thread of its own).
            cancel_futures (bool): cancel the futures not started (the oldest, one per core,
                count as started and run, as ProcessPoolExecutor's); none runs again after a
                reconfig.
        """
        self._feed.close()
        if cancel_futures:
            self._feed.keep = False
            # the oldest calls, one per core, count as started (as ProcessPoolExecutor's call
            # queue holds max_workers + 1 calls it no longer cancels): they run
            for fut in self._feed.pending()[self._cores() :]:
                if not fut.started:
                    fut.cancel()
        if wait:
            self._finish()
        else:
            threading.Thread(target=self._finish, name="pilot-executor-end", daemon=True).start()

    @property
    def _max_workers(self) -> int:
        """How many calls a caller that keeps a bounded number submitted should keep: what
        Dask's local scheduler reads of an Executor (`dask.compute(..., scheduler=ex)`) as its
        number of workers, and submits at most.  Not only the calls that run at once (a
        process pool's `_max_workers`): IN_FLIGHT more, as a call spends ~2 ms in the pilot's
        hops, and with only as many in flight as run, the cores would wait between calls.
        Settable (`ex._max_workers = 8`): fewer keeps less of a wide graph in memory at once."""
        if self._in_flight is not None:
            return self._in_flight
        return self._at_once() + IN_FLIGHT

    @_max_workers.setter
    def _max_workers(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ValueError(f"Executor: _max_workers={n!r} must be an int above 0")
        self._in_flight = n

    def _at_once(self) -> int:
        """How many of its calls can run at once: its cores' worth, and its GPUs' when each
        call holds some (the partition's, or the pilot's until it knows)."""
        cores, gpus = self._fields.get("cores", 1), self._fields.get("gpus", 0)
        part = self._partition
        have_gpus = part.gpus if part is not None and part.resources else self._pilot.size["gpus"]
        n = self._cores() // max(1, cores)
        if gpus:
            n = min(n, int(have_gpus // gpus))
        return max(1, n)

    def _cores(self) -> int:
        part = self._partition
        return part.cores if part is not None and part.cores else self._pilot.size["cores"]

    def _finish(self) -> None:
        """Wait for every future, then end the feeder and what this executor owns."""
        while not self._feed.ended:
            pending = self._feed.pending()
            if not pending:
                break
            futures.wait(pending)
        if not self._feed.stop():
            return
        _live.discard(self)
        self._umgr.unregister_callback(self._feed.on_state)  # (a shared manager keeps no trace)
        self._end_owned()

    def _end_owned(self) -> None:
        owned, self._owned = self._owned, []
        for thing in reversed(owned):
            if isinstance(thing, Session):
                thing.close()
            elif not thing.final:
                thing.cancel(timeout=END_TIMEOUT)  # a Partition or a Pilot
