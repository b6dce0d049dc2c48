"""RADICAL-Pilot 1.x's Raptor (its function-task executor) on this project's function units and
partitions: a Raptor master is a partition of function workers.

    pilot.submit_raptors(td) / tmgr.submit_raptors(tds, pilot_id) -> [Raptor]: a Task of the
        TaskManager (tmgr.wait_tasks(raptor.uid) waits for it) that no process runs: its states
        follow its partition's
    raptor.submit_workers(tds) -> [RaptorWorker]: the workers' cores and GPUs (ranks x
        cores_per_rank and x gpus_per_rank, summed) are the raptor's partition, started on its
        pilot (Pilot.reconfig), named after it and reserved for its tasks; a pilot whose one
        partition holds all of it (RP's cores= pilot) is made over into [the raptor's
        partition, FILL], which needs that partition to run nothing then
    raptor.submit_tasks(tds) -> [Task]: tasks of any mode, run in the raptor's partition (a
        function task by one of its function workers, one per core;
        pilot/rp/raptor_functions.py has the names they know)
    raptor.rpc("stop") -> the partition stops (its queued tasks go back and fail, having no
        partition); the raptor and its workers end DONE
States of a raptor and its workers: SCHEDULING until the workers are submitted, QUEUED while
the partition starts, EXECUTING while it is ACTIVE, then DONE (stopped), or FAILED / CANCELED as
the partition ended.  Refused, each saying why: a master or worker that runs code of its own
(executable, function, code, raptor_class, raptor_file), a master's own cores, a second
submit_workers for a raptor, tasks before its workers, rpc commands other than "stop".
"""

from __future__ import annotations

import math
import time

from pilot import states as S
from pilot.descriptions import FILL, ComputePartitionDescription
from pilot.pmgr.compat.rp1.names import RAPTOR_MASTER, RAPTOR_WORKER
from pilot.pmgr.compat.rp1.task import Task
from pilot.pmgr.compat.rp1.task_description import TaskDescription

# what a master's / a worker's description may set (the rest runs code of its own)
_MASTER_FIELDS = {"mode", "uid", "name", "pilot", "metadata", "named_env"}
_WORKER_FIELDS = _MASTER_FIELDS | {"raptor_id", "ranks", "cores_per_rank", "gpus_per_rank"}
_ENDED = {S.DONE: S.DONE, S.CANCELED: S.CANCELED, S.FAILED: S.FAILED}
_FOLLOWS = {S.PENDING: S.QUEUED, S.STARTING: S.QUEUED, S.ACTIVE: S.EXECUTING}


class Raptor(Task):
    """A Raptor master: a partition of function workers (see the module's header).

    Made by `tmgr.submit_raptors` or `pilot.submit_raptors`, a Task no process runs: its
    states follow its partition's (SCHEDULING until the workers are submitted, QUEUED while
    the partition starts, EXECUTING while it is ACTIVE, then DONE once stopped, or FAILED /
    CANCELED as the partition ended).  `rp.RaptorMaster` is another name for it.
    """

    virtual = True  # (no process runs it: TaskManager.cancel_units calls its cancel)
    part_handle = None  # its Partition, once submit_workers started it
    stopping = False  # rpc("stop") was called: its partition's end is its DONE
    workers: tuple = ()

    def submit_workers(self, descriptions) -> list:
        """Its workers: their cores and GPUs (ranks x cores_per_rank and x gpus_per_rank,
        summed) become the raptor's partition, started on its pilot (Pilot.reconfig), named
        after it and reserved for its tasks.  A pilot whose one partition holds all of it
        (RP's cores= pilot) is made over into [the raptor's partition, FILL], which needs that
        partition to run nothing then.  One call per raptor.

        Args:
            descriptions (TaskDescription | dict | list[TaskDescription | dict]):
                RAPTOR_WORKER descriptions (only mode, uid, name, pilot, metadata, named_env,
                raptor_id, ranks, cores_per_rank, gpus_per_rank).

        Returns:
            list[RaptorWorker]: a worker per description, in order (no process of its own:
                its share of the partition).

        Raises:
            ValueError: a second call for this raptor; a description that is not a worker's
                or sets fields that run code of its own; workers with no cores; a pilot whose
                one partition runs tasks already.
        """
        descs = _raw(descriptions)
        if self.part_handle is not None or self.workers:
            raise ValueError(
                f"submit_workers: {self.uid} has its workers (one partition, made by one "
                "submit_workers call); submit another raptor for more"
            )
        cores = gpus = 0
        for i, d in enumerate(descs):
            _only(d, _WORKER_FIELDS, RAPTOR_WORKER, f"submit_workers: descriptions[{i}]")
            cores += d.ranks * d.rank_cores
            gpus += d.ranks * d.rank_gpus
        tmgr = self.umgr
        with self.session.locked():
            part = _start_partition(self, cores, math.ceil(gpus))
            part.reserved = True  # (its tasks only: others go to the pilot's other partitions)
            self.part_handle = part
            self.workers = tuple(
                _virtual(tmgr, RaptorWorker, d, d.uid or f"{self.uid}.{i:04d}")
                for i, d in enumerate(descs)
            )
            for w in self.workers:
                w.pilot, w.raptor = self.pilot, self
            part.register_callback(self._follow)
        return list(self.workers)

    def submit_tasks(self, descriptions):
        """Tasks of any mode, run in this raptor's partition (a function task by one of its
        function workers, one per core).

        Args:
            descriptions (TaskDescription | dict | list[TaskDescription | dict]): the tasks;
                their `raptor_id` is set to this raptor.

        Returns:
            Task | list[Task]: a Task for one description, else the tasks in order.

        Raises:
            ValueError: as `TaskManager.submit_tasks`; also before `submit_workers` (the
                raptor has no partition yet).
        """
        many = isinstance(descriptions, (list, tuple))
        descs = list(descriptions) if many else [descriptions]
        for i, d in enumerate(descs):
            if isinstance(d, dict):
                descs[i] = d = TaskDescription(d)
            d.raptor_id = self.uid
        return self.umgr.submit_tasks(descs if many else descs[0])

    def partition_uid(self) -> str:
        """The uid of its partition (where its tasks run).

        Returns:
            str: the partition's uid.

        Raises:
            ValueError: it has no workers yet (the workers are its partition).
        """
        if self.part_handle is None:
            raise ValueError(
                f"raptor_id={self.uid!r} has no workers yet: here a Raptor's workers are its "
                "partition; call raptor.submit_workers first"
            )
        return self.part_handle.uid

    def rpc(self, cmd: str, *args, **kwargs) -> dict:
        """RP's raptor.rpc: "stop" ends the raptor (its partition stops); RP's reply dict.

        Its queued tasks go back and fail (having no partition); the raptor and its workers
        end DONE.

        Args:
            cmd (str): "stop", the one command here.
            *args (object): ignored.
            **kwargs (object): ignored.

        Returns:
            dict: RP's reply: {"out": "", "err": "", "ret": None, "exc": None}.

        Raises:
            ValueError: a `cmd` other than "stop".
        """
        if cmd != "stop":
            raise ValueError(
                f"Raptor.rpc({cmd!r}): only 'stop' is known here (a master runs no code of "
                "its own to answer others)"
            )
        self.stopping = True
        part = self.part_handle
        if part is None:
            with self.session.locked():
                for t in (self, *self.workers):
                    if not t.final:
                        t.advance(S.DONE, time.time(), "stopped")
        elif not part.final:
            part.cancel()
        return {"out": "", "err": "", "ret": None, "exc": None}

    def cancel(self) -> None:
        """Its partition stops (at once: the raptor ends CANCELED when it has)."""
        part = self.part_handle
        if part is not None and not part.final:
            try:
                self.pilot.stop_partitions([part.uid], "canceled by the user", 0)
            except TimeoutError:
                pass  # (it ends on its own; RP's cancel does not wait either)
        else:
            with self.session.locked():
                for t in (self, *self.workers):
                    if not t.final:
                        t.advance(S.CANCELED, time.time(), "canceled by the user")

    def _follow(self, part, state: str) -> None:
        """(a state callback of its partition) The raptor and its workers follow it."""
        new: str | None
        if state in S.FINAL:
            new = S.DONE if self.stopping else _ENDED[state]
        else:
            new = _FOLLOWS.get(state)
        if new is None:
            return
        with self.session.locked():
            for t in (self, *self.workers):
                if not t.final and t.state != new:
                    t.advance(new, time.time(), part.reason if new != S.DONE else None)


class RaptorWorker(Task):
    """A Raptor worker: its share of the raptor's partition (no process of its own)."""

    virtual = True
    raptor: Raptor | None = None

    def cancel(self) -> None:
        """A worker ends with its raptor: this cancels the raptor."""
        if self.raptor is not None:
            self.raptor.cancel()


def submit_raptors(tmgr, descriptions, pilot_id: str | None) -> list[Raptor]:
    """tmgr.submit_raptors / pilot.submit_raptors: new Raptors on pilot `pilot_id` (None: the
    manager's only pilot)."""
    descs = _raw(descriptions)
    pilot_id = pilot_id or next((d.pilot for d in descs if d.pilot), None)
    pilots = [p for p in tmgr.pilots if pilot_id is None or p.uid == pilot_id]
    if len(pilots) != 1:
        raise ValueError(
            f"submit_raptors: pilot_id={pilot_id!r} must name one of {tmgr.uid}'s pilots "
            f"{[p.uid for p in tmgr.pilots]}"
        )
    out = []
    with tmgr.session.locked():
        for i, d in enumerate(descs):
            if d.mode != RAPTOR_MASTER:
                raise ValueError(f"submit_raptors: descriptions[{i}].mode={d.mode!r}: not a master")
            _only(d, _MASTER_FIELDS, RAPTOR_MASTER, f"submit_raptors: descriptions[{i}]")
            if d.named_env not in (None, "rp"):
                raise ValueError(
                    f"submit_raptors: descriptions[{i}].named_env={d.named_env!r}: function "
                    "workers run on the pilot's own Python ('rp')"
                )
            uid = d.uid or tmgr.session.ids.next_uid("raptor")
            raptor = _virtual(tmgr, Raptor, d, uid)
            raptor.pilot = pilots[0]
            tmgr.raptors[uid] = raptor
            out.append(raptor)
    return out


def _raw(descriptions) -> list:
    """The descriptions (one, or a list; a dict is one) as the system reads them: unset fields
    None (pmgr/compat/rp1/task_reads.py)."""
    descs = descriptions if isinstance(descriptions, (list, tuple)) else [descriptions]
    return [(TaskDescription(d) if isinstance(d, dict) else d).raw() for d in descs]


def _only(d: TaskDescription, allowed: set, mode: str, where: str) -> None:
    error = d.refused()
    if error:
        raise ValueError(f"{where}: {error}")
    if d.mode != mode:
        raise ValueError(f"{where}: mode={d.mode!r} must be {mode!r}")
    extra = sorted(k for k in d.to_stored() if k not in allowed and k != "policy")
    if extra:
        raise ValueError(
            f"{where}: {', '.join(extra)} not supported for {mode}: here a Raptor is a "
            "partition of function workers, which runs no master or worker code of your own"
            + ("; give the cores to its workers" if mode == RAPTOR_MASTER else "")
        )


def _virtual(tmgr, cls, d: TaskDescription, uid: str):
    """(session locked) A task of `tmgr` that is never routed: its states are set here."""
    session = tmgr.session
    if uid in tmgr.units:
        raise ValueError(f"uid={uid!r} is taken: a task's uid is unique in its session")
    now = time.time()
    form = d.to_be_formed(uid)
    task = cls(session, uid, form, tmgr, now)
    tmgr.units[uid] = task
    session.changes.record(task, S.NEW, now)
    task.advance(S.SCHEDULING, now, None)
    return task


def _start_partition(raptor: Raptor, cores: int, gpus: int):
    """(session locked) The raptor's partition on its pilot (see the module's header)."""
    pilot = raptor.pilot
    if cores < 1:
        raise ValueError(f"submit_workers: the workers of {raptor.uid} ask for no cores")
    desc = ComputePartitionDescription(cores=cores, gpus=gpus or None, name=raptor.uid)
    whole = [p for p in pilot.partitions if not p.final and p.description.size == FILL]
    if not whole:
        return pilot.reconfig(start=[desc])[0]
    if whole[0].outstanding:
        raise ValueError(
            f"submit_workers: {pilot.uid}'s partition {whole[0].uid} holds all of the pilot "
            f"and runs {whole[0].outstanding} task(s): submit the raptor's workers before "
            "tasks, or give the PilotDescription partitions= that leave room"
        )
    return pilot.reconfig(stop=whole[0].uid, start=[desc, ComputePartitionDescription(FILL)])[0]


RaptorMaster = Raptor  # RP's other name for it
