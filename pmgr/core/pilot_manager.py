"""PilotManager: submits pilots and keeps their handles (the Pilot, pmgr/core/pilot.py).

submit_pilots(pd): the pilot is planned (partition/plan.py: resource config, network config,
size; a ValueError here leaves nothing behind), the pilot and its initial partitions are
created NEW, the pilot sandbox and the bootstrap config are written (LAUNCHING), the job goes
to the batch system (PENDING; the partitions PENDING with it).  From there the Pilot follows
what its bootstrap says (pmgr/core/pilot.py); callbacks registered on the PilotManager see every
state change of its pilots.
"""

from __future__ import annotations

import json
import logging
import os
import time

from pilot import functions, processes, states as S
from pilot.agent import native
from pilot.config import resource_config
from pilot.descriptions import ComputePilotDescription
from pilot.partition.plan import most_nodes, plan_pilot
from pilot.pmgr.batch import job_script, submitter
from pilot.pmgr.core.handles import PILOT_STATE, callback
from pilot.pmgr.core.pilot import Pilot
from pilot.pmgr.store import data_files

log = logging.getLogger("pmgr.pilots")


class PilotManager:
    """Submits pilots and keeps their handles; in a session attached to again
    (`rp.Session(uid=...)`) it gets the session's pilots back.

    Args:
        session (Session): the session the pilots belong to.
    """

    PILOT = Pilot  # the handle made for each pilot (pmgr/compat/rp1/pilots.py's makes RPPilots)

    def __init__(self, session) -> None:
        self.session = session
        self.uid = session.ids.next_uid("pmgr")
        self.callbacks: list = []
        self.pilots: list[Pilot] = []
        session.pmgrs.append(self)
        if session.recovery is not None:  # an attached session: its pilots come back here
            self.pilots.extend(session.recovery.adopt_pilots(self))

    def register_callback(self, cb, metric: str = PILOT_STATE, cb_data=None) -> None:
        """`cb(pilot, state)` after every state change of this manager's pilots; with cb_data,
        `cb(pilot, state, cb_data)` (RADICAL-Pilot's signature).

        Args:
            cb (callable): the callback; it runs on the session's delivery thread.
            metric (str): `rp.PILOT_STATE`, the one metric.
            cb_data (object): passed to `cb` as its last argument when not None.
        """
        self.callbacks.append(callback("PilotManager.register_callback", cb, metric, cb_data))

    def get_pilots(self, uids=None) -> list[Pilot]:
        """The handles of this manager's pilots.

        Args:
            uids (str | list[str] | None): which; None: all, in submit order.

        Returns:
            list[Pilot]: the pilots, in the order asked.

        Raises:
            ValueError: a uid this manager does not know, naming the known ones.
        """
        if uids is None:
            return list(self.pilots)
        wanted = [uids] if isinstance(uids, str) else list(uids)
        by_uid = {p.uid: p for p in self.pilots}
        unknown = [u for u in wanted if u not in by_uid]
        if unknown:
            raise ValueError(f"get_pilots: {unknown} unknown; known: {sorted(by_uid)}")
        return [by_uid[u] for u in wanted]

    def list_pilots(self) -> list[str]:
        """The uids of this manager's pilots, in submit order."""
        return [p.uid for p in self.pilots]

    def wait_pilots(self, uids=None, state=None, timeout: float | None = None) -> list[str]:
        """Block until the pilots (all when uids is None) are final (or in `state`).

        Args:
            uids (str | list[str] | None): which pilots; None: all.
            state (str | list[str] | None): the state(s) to wait for; None: a final one.
            timeout (float | None): seconds in all; None waits as long as it takes.

        Returns:
            list[str]: each pilot's state when the wait ended.
        """
        if state is not None:  # (checked once, first; read once: a generator too)
            state = sorted(S.waited(state, S.PILOT_MACHINE, "PilotManager.wait_pilots"))
        deadline = None if timeout is None else time.monotonic() + timeout
        out = []
        for p in self.get_pilots(uids):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            out.append(p.wait(state, timeout=left))
        return out

    def cancel_pilots(self, uids=None, timeout: float | None = None) -> None:
        """Cancel pilots (`Pilot.cancel`): their running units and partitions end CANCELED.

        Args:
            uids (str | list[str] | None): which pilots; None: all.
            timeout (float | None): seconds to wait for each to end (None: 60).
        """
        for p in self.get_pilots(uids):
            p.cancel(timeout=60.0 if timeout is None else timeout)

    def submit_pilots(self, descriptions):
        """Submit one ComputePilotDescription (returns a Pilot) or a list (returns a list).

        Every description is checked and sized (`partition/plan.py`) before any is submitted.

        Args:
            descriptions (ComputePilotDescription | list[ComputePilotDescription]): the
                pilots.

        Returns:
            Pilot | list[Pilot]: a handle per pilot, `LAUNCHING` or later.

        Raises:
            ValueError: a description that is not a `ComputePilotDescription`, or one that
                cannot be planned (an unknown resource, partitions that do not fit), naming it.
            PilotOwned: another client owns the session now (this one was deposed: a job
                submitted now would be no client's).
        """
        self.session.check_owner()
        single = not isinstance(descriptions, (list, tuple))
        descs = [descriptions] if single else list(descriptions)
        for i, d in enumerate(descs):
            if not isinstance(d, ComputePilotDescription):
                raise ValueError(
                    f"submit_pilots: descriptions[{i}]={d!r} must be a ComputePilotDescription"
                )
        plans = [plan_pilot(d) for d in descs]  # all checked before anything starts
        if native.why_not and any(p.config.batch_system == "local" for p in plans):
            _warn_native_once()
        pilots = [self._submit(plan.description, plan) for plan in plans]
        return pilots[0] if single else pilots

    def _submit(self, pd: ComputePilotDescription, plan) -> Pilot:
        session = self.session
        with session.locked():
            uid = session.ids.next_uid("pilot")
            pilot = self.PILOT(session, uid, pd, self, plan.size, plan.config)
            session.pilots[pilot.uid] = pilot
            self.pilots.append(pilot)
            session.changes.record(pilot, S.NEW, pilot.history[0][1], fire=False)
            for d in pd.parts:
                pilot.new_partition(d)
            pilot.advance(S.LAUNCHING, time.time(), None)
        os.makedirs(pilot.sandbox, exist_ok=True)
        if pd.sandbox:
            os.chmod(os.path.dirname(pilot.sandbox), 0o700)  # the session's part: private
            os.symlink(pilot.sandbox, os.path.join(session.dir, pilot.uid))
        cfg_path = self._write_bootstrap_config(pilot, plan)
        # (the pilot's processes find this project as its installation does: nothing is
        # added to PYTHONPATH, which units would inherit)
        env = dict(os.environ, PILOT_SESSION_ID=session.uid)
        argv = processes.python_m(processes.BOOTSTRAP, cfg_path, python=pilot.resource.python)
        argv = job_script.wrap(argv, pilot.resource, pilot.sandbox)  # (its pre_bootstrap lines)
        for note in pilot.resource.notes:  # what of an RP resource config does not map
            log.warning("%s: %s", pilot.uid, note)
        try:
            self.before_job(pilot)
            job = submitter(pilot.resource.batch_system)(
                argv,
                env,
                pilot.sandbox,
                queue=pd.queue,
                project=pd.project,
                nodes=pilot.size["nodes"],
                runtime=pd.runtime * 60.0,
                rcfg=pilot.resource,
            )
        except (OSError, ValueError) as exc:
            with session.locked():
                pilot.end(S.FAILED, f"batch submission failed: {exc}")
            return pilot
        with session.locked():
            pilot.job = job
            pilot.advance(S.PENDING, time.time(), None)
            for part in pilot.parts.values():
                part.advance(S.PENDING, time.time(), None)
        log.info("%s submitted: %s", pilot.uid, pilot.size)
        return pilot

    def before_job(self, pilot: Pilot) -> None:
        """(_submit) What is done in the pilot's sandbox before its job is submitted (RP 1.x's
        input_staging: pmgr/compat/rp1/pilots.py); an OSError fails the pilot with it."""

    def _write_bootstrap_config(self, pilot: Pilot, plan) -> str:
        """(_submit) The pilot's bootstrap.json, in its sandbox; returns its path."""
        session = self.session
        pd = pilot.description
        cfg = {
            "session": session.uid,
            "pilot": pilot.uid,
            "client": pilot.client_endpoint(),
            "sandbox": pilot.sandbox,
            "resource": pd.resource,
            "resource_config": resource_config.to_raw(pilot.resource),  # (as read here)
            "size": pilot.size,
            "runtime": pd.runtime * 60.0,
            "network": {str(k): v for k, v in (plan.network or {}).items()},
            "client_timeout": pilot.resource.client_timeout,
            # a pilot outlives a client that died, for client_timeout s: long enough for a new
            # client process to attach to the session (Session(uid=...)) and take it over
            "watch_parent": False,
            "owner": session.owner,  # its owning client (partition/control.py attach)
            "epoch": session.epoch,  # and its owner epoch (pmgr/core/ownership.py)
            # it may grow to max_nodes (partition/growth.py); a later job's nodes that hold no
            # partition are given back after idle_after s
            "max_nodes": most_nodes(pd),
            "idle_after": 0.0,
            "python_path": functions.client_path(),  # where function workers find modules
            # the session's data directory and its token: agents that read the token there
            # have their function workers pass large pickles by reference (pilot/functions.py)
            "data": data_files.for_pilot(
                session.store.data, pilot.resource.batch_system == "local"
            ),
            "partitions": [
                {"uid": p.uid, "description": p.description.to_stored()}
                for p in pilot.parts.values()
            ],
        }
        cfg["curve"] = session.keys.dir  # every channel of the pilot: pilot/wire/security.py
        cfg_path = os.path.join(pilot.sandbox, "bootstrap.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=1)
        return cfg_path


_warned: list = []


def _warn_native_once() -> None:
    """A local pilot's agents will start units without agent/_spawn-src/: say so, once."""
    if not _warned:
        _warned.append(True)
        log.warning(
            "units start through posix_spawn, bound after the start, without lanes (slower): %s",
            native.why_not,
        )
