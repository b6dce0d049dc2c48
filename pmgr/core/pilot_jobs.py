"""The client's side of a pilot's jobs beyond its first: submitted, followed and ended here.

A pilot with max_nodes grows by jobs its bootstrap asks for (partition/growth.py decides).
On the pilot link:
    <- grow {job, nodes, hint, exclude, positions, endpoint, pulse, runtime, reason}
           write PILOT_SANDBOX/jobs/JOB/join.json (the bootstrap's node channel, pulse and keys,
           the hints, the runtime the pilot has left by its bootstrap's clock) and submit a job
           of `nodes` nodes running partition/nodes/join_job.py through the pilot's own batch system
           (pmgr/batch/: PSI/J for SLURM, PBS, LSF), on a thread of its own (a submission may
           take seconds; the session's close waits for it, bounded, then ends the job); the nodes
           the pilot holds are `exclude`d where the batch system can say so (SLURM --exclude;
           only names of letters, digits, . _ - go into the batch script)
    -> job {job, state: queued, id}            the batch system took it
    -> job {job, state: failed, reason}        it refused it (the partitions waiting fail)
    -> job {job, state: ended, reason}         it ended without being released (the walltime,
                                               a node failure, scancel from outside): `tick`
                                               polls each job, as the first job is polled
    <- release {job, reason}  the pilot gave its nodes back: the job is ended (scancel /
                              SIGTERM, on a thread), though it ends on its own once its
                              daemons halted
When the pilot ends, every job of it still queued or running is ended.  `describe()` lists
them all (the first job too) for Pilot.jobs; a client that attaches learns them from `hello`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time

from pilot import processes
from pilot.pmgr.batch import job_script, submitter
from pilot.wire.protocol import msg

log = logging.getLogger("pmgr.pilots")
LIVE = ("asked", "queued", "joined")
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # what may go into --exclude


class PilotJobs:
    def __init__(self, pilot) -> None:
        self.pilot = pilot
        self.info: dict[str, dict] = {}  # job name -> what is known of it (describe)
        self.handles: dict = {}  # job name -> BatchJob (pmgr/batch/), this client's only
        self.reported: set[str] = set()  # jobs whose end the bootstrap was told of
        self.submitting: list[threading.Thread] = []  # submissions under way

    # -- from the bootstrap (channel thread, session lock held) -------------------------------
    def on_grow(self, body: dict) -> None:
        name = body["job"]
        if name in self.info:
            return  # (said again: one job per name)
        pilot = self.pilot
        self.info[name] = {
            "job": name, "nodes": body["nodes"], "state": "asked", "id": None,
            "reason": body.get("reason"), "asked": time.time(),
        }  # fmt: skip
        log.info(
            "%s: grow: %s of %d node(s): %s", pilot.uid, name, body["nodes"], body.get("reason")
        )
        if pilot.ending:
            self._said(name, "failed", "the pilot is ending")
            return
        thread = threading.Thread(
            target=self._submit, args=(name, body), name=f"grow-{name}", daemon=True
        )
        self.submitting = [t for t in self.submitting if t.is_alive()] + [thread]
        thread.start()

    def on_release(self, body: dict) -> None:
        name = body["job"]
        info = self.info.setdefault(name, {"job": name, "nodes": 0, "id": None})
        info.update(state="released", why_ended=body.get("reason"), ended=time.time())
        log.info("%s: release: %s: %s", self.pilot.uid, name, body.get("reason"))
        self.reported.add(name)
        self._end(name)

    def on_hello(self, jobs: list | None) -> None:
        """The bootstrap's word on its jobs (hello: an attach learns them here)."""
        for job in jobs or []:
            if isinstance(job, dict) and isinstance(job.get("job"), str):
                self.info.setdefault(job["job"], {}).update(job)

    # -- the clock (channel thread, lock held) ------------------------------------------------
    def tick(self) -> None:
        for name, handle in list(self.handles.items()):
            if name in self.reported:
                continue
            code = handle.poll()
            if code is None:
                continue
            self.reported.add(name)
            why = f"batch job {handle.pid} exited with code {code}: {handle.describe()}"
            self.info[name].update(state="ended", why_ended=why, ended=time.time())
            log.error("%s: %s: %s", self.pilot.uid, name, why)
            self._say(name, "ended", why)

    def end_all(self, wait: float = 0.0) -> None:
        """The pilot ended: every job of it still queued or running is ended; `wait` > 0 (the
        session closes): here, waiting up to that many seconds in all for them to end."""
        deadline = time.monotonic() + wait
        for thread in self.submitting if wait > 0 else ():  # (a job submitted meanwhile is
            thread.join(max(0.0, deadline - time.monotonic()))  # ended below, not left behind)
        for name in list(self.handles):
            self.reported.add(name)
            if self.info[name].get("state") in LIVE:
                self.info[name]["state"] = "released"
            if wait <= 0:
                self._end(name)
                continue
            handle = self.handles[name]
            if handle.poll() is None:
                handle.cancel()
                if handle.wait(max(0.1, deadline - time.monotonic())) is None:
                    log.warning("%s: %s (batch job %s) did not end", self.pilot.uid, name,
                                handle.pid)  # fmt: skip

    # -- the rest -------------------------------------------------------------------------------
    def describe(self) -> list[dict]:
        pilot = self.pilot
        first = {
            "job": "job.0000", "nodes": pilot.size["nodes"], "state": pilot.state,
            "id": str(pilot.job.pid) if pilot.job is not None else pilot.job_id,
        }  # fmt: skip
        return [first] + [dict(v) for _, v in sorted(self.info.items())]

    def _submit(self, name: str, body: dict) -> None:
        """(its own thread) Write join.json and submit the job; say how it went."""
        pilot = self.pilot
        rcfg = pilot.resource
        where = os.path.join(pilot.sandbox, "jobs", name)
        try:
            os.makedirs(where, exist_ok=True)
            left = float(body.get("runtime") or pilot.runtime_left())  # (the bootstrap's clock)
            cfg = dict(pilot.join_config(), job=name, nodes=body["nodes"], hint_base=body["hint"],
                       endpoint=body["endpoint"], pulse=body["pulse"], dir=where,
                       pulse_s=body.get("pulse_s"),
                       positions=body.get("positions") or [], runtime=left)  # fmt: skip
            path = os.path.join(where, "join.json")
            with open(path, "w") as f:
                json.dump(cfg, f, indent=1)
            argv = processes.python_m(processes.JOIN, path, python=rcfg.python)
            argv = job_script.wrap(argv, rcfg, where)
            exclude = [n for n in body.get("exclude") or [] if NODE_NAME.fullmatch(n)]
            job = submitter(rcfg.batch_system)(
                argv,
                dict(os.environ, PILOT_SESSION_ID=pilot.session.uid),
                where,
                nodes=body["nodes"],
                runtime=left,
                queue=pilot.description.queue,
                project=pilot.description.project,
                rcfg=rcfg,
                exclude=exclude,
            )
        except Exception as exc:  # (OSError, ValueError: refused; anything else: said too)
            if not isinstance(exc, (OSError, ValueError)):
                log.exception("%s: %s: submission failed", pilot.uid, name)
            log.error("%s: %s could not be submitted: %s", pilot.uid, name, exc)
            with pilot.session.locked():
                self.info[name].update(state="failed", why_ended=str(exc), ended=time.time())
            self._said(name, "failed", f"batch submission failed: {exc}")
            return
        with pilot.session.locked():
            self.handles[name] = job
            info = self.info[name]
            ended = pilot.ending or info.get("state") == "released"
            info["id"] = str(job.pid)
            if info.get("state") == "asked":  # (the bootstrap's word may have come first)
                info["state"] = "queued"
        log.info("%s: %s is batch job %s", pilot.uid, name, job.pid)
        if ended:  # (the pilot ended, or let it go, while it was being submitted)
            self._end(name)
            return
        self._say(name, "queued", "", id=str(job.pid))

    def _said(self, name: str, state: str, reason: str) -> None:
        self.reported.add(name)
        self._say(name, state, reason)

    def _say(self, name: str, state: str, reason: str, id: str | None = None) -> None:
        if self.pilot.final or self.pilot.released:
            return
        self.pilot.session.channel.send(
            self.pilot.uid, msg(b"job", {"job": name, "state": state, "id": id, "reason": reason})
        )

    def _end(self, name: str) -> None:
        """End job `name` (if this client submitted it), off the caller's thread."""
        handle = self.handles.get(name)
        if handle is not None and handle.poll() is None:
            threading.Thread(target=handle.cancel, name=f"end-{name}", daemon=True).start()
