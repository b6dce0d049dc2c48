"""RADICAL-Pilot 1.x's pilots: the PilotManager that takes a PilotDescription, and what an RP 1.x
pilot can do beyond this project's Pilot: named environments (prepare_env), Raptors
(submit_raptors, pmgr/compat/rp1/raptor.py) and tasks pinned to it (submit_tasks).

rp.PilotManager is this PilotManager for RP 0.90 and 1.x scripts alike: a ComputePilotDescription
is submitted as it is, a PilotDescription as its ComputePilotDescription (`as_pilot`; the keys
RP 1.x has that are not run here are refused, each naming itself), and every pilot it makes is
an RPPilot.  A PilotDescription's input_staging is copied into the pilot sandbox before its
job is submitted, its output_staging back once the pilot is final
(pmgr/compat/rp1/pilot_staging.py).

Named environments are pmgr/compat/rp1/named_envs.py's.
"""

from __future__ import annotations

import copy
import os
from collections import deque
from typing import Protocol

from pilot import staging, states as S
from pilot.config import resource_config
from pilot.descriptions import ComputePilotDescription
from pilot.pilot_description import PilotDescription
from pilot.pmgr.compat.rp1 import named_envs, pilot_staging
from pilot.pmgr.compat.rp1.task_events import bulk_from_env
from pilot.pmgr.core import PILOT_STATE, Pilot, PilotManager as CorePilotManager, pilot_directives


class _Tasks(Protocol):
    """What a pilot asks of the TaskManager it was added to (pmgr/compat/rp1/tasks.py, which
    imports this module: named here, not imported)."""

    def submit_tasks(self, descriptions): ...

    def submit_raptors(self, descriptions, pilot: str): ...


class RPPilot(Pilot):
    """A Pilot with RADICAL-Pilot 1.x's methods (made by this module's PilotManager)."""

    # the TaskManager it was added to (RP's attach_tmgr; set by add_pilots)
    tmgr: _Tasks | None = None
    rp_description: dict | None = None  # the PilotDescription it was submitted with (as_dict)

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.named_envs: dict = {}  # name -> spec (prepare_env)
        self.workdir = os.getcwd()  # RP's client sandbox: where the script runs

    @property
    def client_sandbox(self) -> str:
        """RP 1.x's client sandbox: the working directory the pilot was submitted from."""
        return self.workdir

    def as_dict(self) -> dict:
        """RP 1.x's view of the pilot (Pilot.as_dict), its description the PilotDescription it
        was submitted with, every key (RP's defaults for those not given)."""
        out = super().as_dict()
        if self.rp_description is not None:
            out["description"] = copy.deepcopy(self.rp_description)
        return out

    def stage_in(self, directives) -> list[str]:
        """Pilot.stage_in; the targets as RP 1.x returns them (its complete_url): a place on
        the resource as a URL of its file system (`file://localhost/<pilot sandbox>/x`), one
        at the client as its path."""
        return [self._rp_place(t) for t in super().stage_in(directives)]

    def stage_out(self, directives) -> list[str]:
        """Pilot.stage_out; the targets as RP 1.x returns them (stage_in's): `client:///x` is
        the path of x in the client's working directory."""
        return [self._rp_place(t) for t in super().stage_out(directives)]

    def _rp_place(self, url: str) -> str:
        scheme, path = staging.split(url)
        if scheme == "client":
            return path  # (absolute: pilot/staging.py's normal form)
        if scheme in ("pilot", "resource"):
            return self.endpoint_fs.rstrip("/") + staging.resolve(url, self.sandbox, None)
        return url  # (file://: as RP leaves it)

    def prepare_env(self, env_name: str, env_spec: dict) -> None:
        """RP 1.x's named environment (pmgr/compat/rp1/named_envs.py): made by the first task that
        names it, where the tasks run; returns at once."""
        self.named_envs[env_name] = named_envs.checked(env_name, env_spec)

    def env_lines(self, name: str) -> list[str] | None:
        """The lines that enter named environment `name` here (None: not prepared)."""
        return named_envs.lines(name, self.named_envs.get(name), self.resource.python)

    def submit_raptors(self, descriptions) -> list:
        """RP's pilot.submit_raptors: Raptor masters on this pilot (pmgr/compat/rp1/raptor.py),
        through the TaskManager it was added to."""
        return self._task_manager("submit_raptors").submit_raptors(descriptions, self.uid)

    def submit_tasks(self, descriptions):
        """RP's pilot.submit_tasks: tasks pinned to this pilot, through its TaskManager."""
        tmgr = self._task_manager("submit_tasks")
        many = isinstance(descriptions, (list, tuple))
        descs = list(descriptions) if many else [descriptions]
        for d in descs:
            d.pilot = self.uid
        return tmgr.submit_tasks(descs if many else descs[0])

    def _task_manager(self, what: str):
        if self.tmgr is None:
            raise RuntimeError(
                f"{what}: {self.uid} is not added to a TaskManager yet (tmgr.add_pilots)"
            )
        return self.tmgr

    def rpc(self, cmd: str, *args, **kwargs):
        raise ValueError(
            f"Pilot.rpc({cmd!r}): the pilot's RPC commands are RP's own; here a pilot is "
            "driven by its methods (reconfig, stage_in, prepare_env, cancel)"
        )

    def register_service(self, uid: str, info) -> None:
        raise ValueError("Pilot.register_service: service tasks are not run here")


class PilotManager(CorePilotManager):
    """rp.PilotManager: takes RP 1.x's PilotDescription too; its pilots are RPPilots."""

    PILOT = RPPilot

    def __init__(self, session) -> None:
        super().__init__(session)
        self.staging_in: deque = deque()  # input steps of the pilots being submitted, in order
        self.staging_out: dict = {}  # pilot uid -> output steps, done once it is final
        self.callbacks.append(self._stage_out)

    def before_job(self, pilot) -> None:
        """RP 1.x's input_staging: into the pilot sandbox before the job
        (pmgr/compat/rp1/pilot_staging.py)."""
        steps, out = self.staging_in.popleft() if self.staging_in else ([], [])
        if out:
            self.staging_out[pilot.uid] = out
        pilot_staging.stage_in(pilot, steps)

    def _stage_out(self, pilot, state) -> None:
        if state in S.FINAL and pilot.uid in self.staging_out:
            pilot_staging.stage_out(pilot, self.staging_out.pop(pilot.uid))

    # (RP 1.x's order of arguments, not the base's RP 0.90 one: the override is on purpose)
    def register_callback(self, cb, cb_data=None, metric=PILOT_STATE) -> None:  # type: ignore[override]
        """`cb(pilot, state[, cb_data])` after every state change of this manager's pilots;
        RP 1.x's order (cb, cb_data, metric), and RP 0.90's (cb, metric, cb_data) when the
        second argument is the metric's name.  With RADICAL_PILOT_BULK_CB set (as RP 1.x):
        `cb([pilot][, cb_data])`.

        Args:
            cb (callable): the callback; it runs on the session's delivery thread.
            cb_data (object): passed to `cb` as its last argument when not None.
            metric (str): `rp.PILOT_STATE`, the one metric.
        """
        if cb_data == PILOT_STATE:  # RP 0.90's order
            cb_data, metric = (None if metric == PILOT_STATE else metric), cb_data
        if bulk_from_env() and callable(cb):
            one = cb
            cb = (lambda p, s, d: one([p], d)) if cb_data is not None else lambda p, s: one([p])
        super().register_callback(cb, metric, cb_data)

    def submit_pilots(self, descriptions):
        """Submit pilots: as the base class's, and RP 1.x's `PilotDescription` (or its dict)
        is taken too (its `prepare_env` entries are made where the pilot's tasks run).

        Args:
            descriptions (ComputePilotDescription | PilotDescription | dict | list): the
                pilots.

        Returns:
            Pilot | list[Pilot]: one handle, or a list for a list.

        Raises:
            ValueError: a key RP 1.x has that is refused here, or what the base class raises.
        """
        single = not isinstance(descriptions, (list, tuple))
        descs = [descriptions] if single else list(descriptions)
        envs: list[dict] = []
        steps: list[tuple] = []
        given: list[dict | None] = []
        for i, d in enumerate(descs):
            if isinstance(d, dict):
                d = PilotDescription(d)
            if isinstance(d, PilotDescription):
                error = d.submit_error()
                if error:
                    raise ValueError(f"submit_pilots: descriptions[{i}]: {error}")
                envs.append(d.prepare_env)
                given.append(d.as_dict())  # (as RP keeps it: a copy, as submitted)
                steps.append(
                    (
                        pilot_directives(d.input_staging, True),
                        pilot_directives(d.output_staging, False),
                    )
                )
                descs[i] = _rp_sandbox(d.as_pilot())
            elif isinstance(d, ComputePilotDescription):
                envs.append({})
                steps.append(([], []))
                given.append(None)
            else:
                raise ValueError(
                    f"submit_pilots: descriptions[{i}]={d!r} must be a PilotDescription"
                )
        self.staging_in = deque(steps)  # (taken in order by before_job)
        try:
            pilots = super().submit_pilots(descs)
        finally:
            self.staging_in = deque()
        for pilot, spec, rp_description in zip(pilots, envs, given):
            pilot.rp_description = rp_description
            for name, one in spec.items():
                pilot.prepare_env(name, one)
        return pilots[0] if single else pilots


def _rp_sandbox(pd: ComputePilotDescription) -> ComputePilotDescription:
    """RP 1.x's pilot sandbox, $HOME/radical.pilot.sandbox/<session>/<pilot>, when neither the
    description nor its resource config (`sandbox`, RP's default_remote_workdir) names one."""
    if pd.sandbox is not None:
        return pd
    try:
        if resource_config.load(pd.resource, pd.access_schema).sandbox is not None:
            return pd
    except ValueError:
        return pd  # (planning names the error)
    stored = pd.to_stored()
    stored["sandbox"] = os.path.join(os.path.expanduser("~"), "radical.pilot.sandbox")
    return ComputePilotDescription.from_stored(stored)
