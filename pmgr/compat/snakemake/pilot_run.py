"""The pilot a Snakemake run's jobs go to: its session, the pilot, and the rp.Executor that
submits their units.

    start      a new session and a pilot of the settings' description (a local pilot of this
               machine by default; --pilot-max-nodes makes it adaptive), or --pilot-session:
               that session, attached, and its live pilot (--pilot-pilot, or its only one)
    submit     a unit -> a future whose result is the final Unit (pmgr/compat/futures: batched
               submission; a time limit cancels the unit then)
    cancel     futures not started are dropped, running units CANCELED with a reason
    end        waits for every future, then closes the session: the pilot ends with it
               (CANCELED), or with --pilot-keep it is left running, detached, and the session
               id is said for a later --pilot-session

Nothing here knows Snakemake; pmgr/compat/snakemake/executor.py drives it.
"""

from __future__ import annotations

import logging
import os
import threading

from pilot import states as S
from pilot.adapt_policy import Adapt
from pilot.config import resource_config
from pilot.descriptions import ComputePilotDescription, ComputeUnitDescription
from pilot.errors import PilotOwned
from pilot.pmgr.compat.futures import Executor
from pilot.pmgr.compat.snakemake.jobs import NodeSize, local_mem_mb
from pilot.pmgr.compat.snakemake.settings import (
    BATCH_RUNTIME,
    DEFAULT_RESOURCE,
    LOCAL_RUNTIME,
    ExecutorSettings,
)
from pilot.pmgr.core import PilotManager, Session

log = logging.getLogger("pilot.snakemake")
END_WAIT = 30.0  # s the end waits for units still running (then the session's close ends them)


class PilotRunError(RuntimeError):
    """The pilot cannot be had: a session or pilot not found, owned by another client, or a
    description the project refuses (the message says which option)."""


def _final_unit(fut, unit):
    """(rp.Executor's outcome) the final Unit itself: the executor reads how it ended."""
    return unit


def pilot_description(settings: ExecutorSettings) -> ComputePilotDescription:
    """The pilot the settings describe (a local pilot of this machine by default)."""
    resource = settings.resource or DEFAULT_RESOURCE
    try:
        cfg = resource_config.load(resource)  # (an unknown one said as such, before its size)
    except ValueError as exc:
        raise PilotRunError(f"--pilot-resource: {exc}") from None
    fields: dict = {"resource": resource}
    local = resource.startswith("local.")
    for key in ("nodes", "cores", "gpus", "memory", "queue", "project"):
        if getattr(settings, key) is not None:
            fields[key] = getattr(settings, key)
    if resource == DEFAULT_RESOURCE and settings.cores is None and settings.nodes is None:
        fields["cores"] = os.cpu_count() or 1
    fields["runtime"] = settings.runtime or (LOCAL_RUNTIME if local else BATCH_RUNTIME)
    if settings.max_nodes is not None:
        fields["max_nodes"] = settings.max_nodes
        fields["adapt"] = Adapt()
    if local and not any(k in fields for k in ("nodes", "cores", "gpus")):
        fields["nodes"] = cfg.nodes  # (this machine's resource: all of it)
    if not any(k in fields for k in ("nodes", "cores", "gpus")):
        raise PilotRunError(
            f"--pilot-resource={resource!r}: give the pilot's size with --pilot-nodes or "
            "--pilot-cores (and --pilot-gpus)"
        )
    try:
        return ComputePilotDescription(**fields)
    except ValueError as exc:
        raise PilotRunError(f"--pilot-* options: {exc}") from None


class PilotRun:
    """One Snakemake run's session, pilot and rp.Executor (see the module's header)."""

    def __init__(self, settings: ExecutorSettings) -> None:
        self.settings = settings
        if settings.session is not None:
            self.session, self.pilot = self._attach(settings.session, settings.pilot)
        else:
            description = pilot_description(settings)
            self.session = Session()
            try:
                self.pilot = PilotManager(self.session).submit_pilots(description)
            except ValueError as exc:
                self.session.close()
                raise PilotRunError(f"--pilot-* options: {exc}") from None
        self.executor = Executor(session=self.session, pilot=self.pilot, bundle=False)
        size = self.pilot.size
        local = self.pilot.description.resource.startswith("local.")
        memory = self.pilot.description.memory
        self.node = NodeSize(
            cores=size["cores_per_node"],
            gpus=size["gpus_per_node"],
            mem_mb=memory or (local_mem_mb() if local else None),
        )

    @staticmethod
    def _attach(uid: str, pilot_uid: str | None):
        try:
            session = Session(uid=uid)
        except PilotOwned as exc:
            raise PilotRunError(
                f"--pilot-session={uid!r}: its pilot is owned by another live client "
                f"({exc}); end that client, or let it leave the pilot (--pilot-keep)"
            ) from None
        except ValueError as exc:
            raise PilotRunError(f"--pilot-session={uid!r}: {exc}") from None
        try:  # (an attached session's pilots come back with its PilotManager)
            adopted = PilotManager(session).get_pilots()
        except PilotOwned as exc:
            session.close(terminate=False)
            raise PilotRunError(
                f"--pilot-session={uid!r}: its pilot is owned by another live client "
                f"({exc}); end that client, or let it leave the pilot (--pilot-keep)"
            ) from None
        live = {p.uid: p for p in adopted if not p.final}
        if pilot_uid is not None:
            pilot = live.get(pilot_uid)
            if pilot is None:
                session.close(terminate=False)
                raise PilotRunError(
                    f"--pilot-pilot={pilot_uid!r} is no live pilot of session {uid}; "
                    f"live: {sorted(live) or 'none'}"
                )
            return session, pilot
        if len(live) != 1:
            session.close(terminate=False)
            raise PilotRunError(
                f"--pilot-session={uid!r} has {len(live)} live pilots ({sorted(live)}); "
                "name one with --pilot-pilot"
                if live
                else f"--pilot-session={uid!r} has no live pilot"
            )
        return session, next(iter(live.values()))

    def submit(self, description: ComputeUnitDescription, runtime: float | None):
        """The unit's future: its result is the final Unit."""
        return self.executor.submit_unit(description, _final_unit, runtime)

    def cancel(self, futures: list, reason: str) -> None:
        """Drop the futures not started; cancel the units of the others (CANCELED, `reason`)."""
        running = [f.unit for f in futures if not f.cancel() and f.unit is not None]
        self.executor.cancel_units(running, reason)

    def end(self) -> str | None:
        """Wait for every future (at most END_WAIT s), then close the session; the pilot ends
        with it (and what still runs in it), or is left running with --pilot-keep (then the
        session id is returned)."""
        waiting = threading.Thread(  # (bounded: a unit whose cancel was lost must not hang
            target=self.executor.shutdown,  # Snakemake's exit; the close below ends it)
            kwargs={"wait": True, "cancel_futures": True},
            daemon=True,
        )
        waiting.start()
        waiting.join(END_WAIT)
        if waiting.is_alive():
            log.warning("units still running %g s after the workflow's end", END_WAIT)
        keep = self.settings.keep and not self.pilot.final
        self.session.close(terminate=not keep)
        return self.session.uid if keep else None

    @property
    def ended_early(self) -> str | None:
        """Why the pilot ended while jobs were to run (None while it lives)."""
        if self.pilot.state in (S.FAILED, S.CANCELED, S.DONE):
            return f"{self.pilot.uid} ended {self.pilot.state}: {self.pilot.reason}"
        return None
