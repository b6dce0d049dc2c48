"""RADICAL-EnTK's AppManager: the resources (one pilot), the workflow, run() and terminate().

    amgr = AppManager()                        EnTK's arguments (see __init__)
    amgr.resource_desc = {'resource': 'local.localhost', 'walltime': 10, 'cpus': 4}
    amgr.shared_data = ['input.dat']           into the pilot sandbox ($SHARED) at run()
    amgr.workflow = {p1, p2}                   a set or list of Pipelines, checked here
    amgr.run()                                 until every pipeline ended (see below)
    amgr.workflow = [p3]; amgr.run()           again, on the same pilot
    amgr.terminate()                           the pilot ends, the session closes

run() makes, at its first call, a session, a PilotManager, a TaskManager and the pilot
(pmgr/compat/entk/resources.py), stages shared_data in (it waits for the pilot to be ACTIVE), then
runs the workflow (pmgr/compat/entk/processor.py) in the caller's thread; outputs are staged out
when it ended and run() returns them (None when there are none).  The pilot stays for the next run()
until terminate() or the end of the script (the session closes at exit), whatever autoterminate
says: EnTK's autoterminate=True releases it after the first workflow, which made a second run()
submit a new pilot; here the second run() uses the same one.  A run() that raises (a pipeline
failed, a post_exec raised, the pilot ended) has terminated first, as EnTK's does.  A second
resource_desc is taken for the next pilot (after terminate()).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import warnings

from pilot.pmgr.compat.entk import partitions, resources
from pilot.pmgr.compat.entk.describe import Catalog
from pilot.pmgr.compat.entk.errors import (
    EnTKError,
    EnTKMissingError,
    EnTKValueError,
    bad_type,
    bad_value,
)
from pilot.pmgr.compat.entk.pipeline import Pipeline
from pilot.pmgr.compat.entk.processor import Processor
from pilot.pmgr.compat.entk.report import Reporter

log = logging.getLogger("pmgr.entk")
RTS = "radical.pilot"
DEFAULTS = {  # EnTK's appman/config.json
    "reattempts": 3,
    "resubmit_failed": False,
    "autoterminate": True,
    "write_workflow": False,
    "rts": RTS,
    "rts_config": {"sandbox_cleanup": False, "db_cleanup": False},
}
OLD_ARGS = ("hostname", "port", "username", "password")  # EnTK's RabbitMQ, gone in EnTK 1.x


class AppManager:
    """RADICAL-EnTK's AppManager: the resources (one pilot), the workflow, run() and
    terminate().

        amgr = AppManager()
        amgr.resource_desc = {'resource': 'local.localhost', 'walltime': 10, 'cpus': 4}
        amgr.workflow = {p1, p2}
        amgr.run()

    The first run() makes a session, a PilotManager, a TaskManager and the pilot, stages
    `shared_data` in, and runs the workflow in the caller's thread; the pilot stays for the
    next run() until terminate() or the end of the script, whatever autoterminate says (EnTK
    released it after the first workflow).

    Args:
        config_path (str | None): a directory with EnTK's config.json (or the file), whose
            keys are the next ones' defaults.
        reattempts (int | None): runs a failed task gets with resubmit_failed (default 3).
        resubmit_failed (bool | None): run a failed task again, up to `reattempts` runs
            (default False).
        autoterminate (bool | None): EnTK's (default True); the pilot stays for the next
            run() either way (see above).
        write_workflow (bool | None): True: the workflows as JSON in the session directory
            (entk.workflows.json) at terminate() (default False).
        rts (str | None): 'radical.pilot' only: this project is the runtime system.
        rts_config (dict | None): {'sandbox_cleanup': True: the pilot sandbox is removed at
            the end, 'db_cleanup': ...} (default both False).
        name (str | None): the AppManager's name (default "").
        base_path (str | None): refused (must be None): sessions live in
            $PILOT_SESSIONS_DIR.
        **kwargs (object): EnTK's old RabbitMQ arguments (hostname, port, username,
            password): a DeprecationWarning each, otherwise ignored.

    Raises:
        EnTKValueError: an unknown keyword argument, a `base_path`, an `rts` other than
            'radical.pilot', or a `config_path` that is not EnTK's config.json (unreadable,
            or keys it does not have).
        EnTKTypeError: an `rts_config` that is not a dict.
    """

    def __init__(self, config_path=None, reattempts=None, resubmit_failed=None,
                 autoterminate=None, write_workflow=None, rts=None, rts_config=None, name=None,
                 base_path=None, **kwargs):  # fmt: skip
        # (EnTK's arguments: the class docstring)
        unknown = sorted(set(kwargs) - set(OLD_ARGS))
        if unknown:
            raise bad_value("AppManager", "arguments", unknown, "EnTK's (config_path, ...)")
        for arg in set(kwargs) & set(OLD_ARGS):
            warnings.warn(f"{arg} argument is not required anymore", DeprecationWarning, 2)
        if base_path is not None:
            raise bad_value("AppManager", "base_path", base_path, "None: sessions live in "
                            "$PILOT_SESSIONS_DIR (default ~/.pilot/sessions)")  # fmt: skip
        cfg = _config(config_path)
        given = {"reattempts": reattempts, "resubmit_failed": resubmit_failed,
                 "autoterminate": autoterminate, "write_workflow": write_workflow, "rts": rts,
                 "rts_config": rts_config}  # fmt: skip
        cfg.update({k: v for k, v in given.items() if v is not None})
        if cfg["rts"] != RTS:
            raise bad_value("AppManager", "rts", cfg["rts"], f"{RTS!r} (this project)")
        if not isinstance(cfg["rts_config"], dict):
            raise bad_type("AppManager", "rts_config", cfg["rts_config"], "a dict")
        self._cfg = cfg
        self._name = name or ""
        self._report = Reporter()
        self._resource_desc: dict | None = None
        self._workflow = None
        self._workflows: list = []
        self._shared_data: list[str] = []
        self._outputs: list[str] | None = None
        self._catalog = Catalog()
        self._session = self._pmgr = self._tmgr = self._pilot = None
        self._processor: Processor | None = None
        self._running = threading.Lock()
        self._report.info("EnTK AppManager: this project's pilot (pilot.entk)")

    # -- EnTK's attributes -------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The AppManager's name; set to a str (else EnTKTypeError)."""
        return self._name

    @name.setter
    def name(self, value) -> None:
        if not isinstance(value, str):
            raise bad_type("AppManager", "name", value, "a string")
        self._name = value

    @property
    def sid(self) -> str | None:
        """The session's uid (its directory holds the store and the pilot sandbox); None
        before the first run()."""
        return self._session.uid if self._session else None

    @property
    def resource_desc(self) -> dict | None:
        """EnTK's resource description of the pilot: `resource`, `walltime` (minutes) and
        `cpus` mandatory; `gpus`, `memory` (MB per node), `project`, `queue`,
        `access_schema` (or `schema`), and this project's `partitions` (the pilot's initial
        partitions, each a ComputePartitionDescription or a dict of its fields, 'cpus' for
        cores).  Checked when set: EnTKMissingError for a mandatory key left out,
        EnTKValueError for another key or a value not accepted.  None until set."""
        return self._resource_desc

    @resource_desc.setter
    def resource_desc(self, value) -> None:
        checked = resources.checked(value)
        resources.pilot_description(checked)  # (every key checked now, not at run())
        self._resource_desc = dict(checked)

    @property
    def workflow(self):
        """The workflow the next run() runs: a set or list of Pipelines, checked when set
        (EnTKTypeError for anything else, EnTKValueError for a pipeline that ran already or
        a Task object in it twice, EnTKMissingError for a pipeline without stages or a stage
        without tasks).  None until set."""
        return self._workflow

    @workflow.setter
    def workflow(self, value) -> None:
        if isinstance(value, Pipeline) or not isinstance(value, (set, frozenset, list, tuple)):
            raise bad_type("AppManager", "workflow", value, "a set or list of Pipelines")
        for i, p in enumerate(value):
            if not isinstance(p, Pipeline):
                raise bad_type("AppManager", f"workflow[{i}]", p, "a Pipeline")
            p.check_runnable()
        self._check_unique(value)
        self._workflows.append(value)
        self._workflow = value

    def _check_unique(self, pipelines) -> None:
        seen: dict = {}
        for p in [*self._catalog.pipelines(), *pipelines]:
            for s in p.stages:
                for t in s.tasks:
                    if seen.setdefault(t.uid, t) is not t:
                        raise bad_value("AppManager", "workflow", t.uid, "tasks of unique uids "
                                        "(a Task object is run once)")  # fmt: skip

    @property
    def workflows(self) -> list:
        """Every workflow set so far, in order (what write_workflow writes)."""
        return self._workflows

    @property
    def shared_data(self) -> list[str]:
        """Files staged into the pilot sandbox ($SHARED) at the first run() (once the pilot is
        ACTIVE): paths, each 'source' or 'source > target'.  Set to a str or a list of them
        (else EnTKTypeError)."""
        return self._shared_data

    @shared_data.setter
    def shared_data(self, value) -> None:
        self._shared_data = _paths("shared_data", value)

    @property
    def outputs(self) -> list[str] | None:
        """Files staged out of the pilot sandbox when run() ended ('source' or
        'source > target', a source relative to $SHARED), which run() returns; None until
        set."""
        return self._outputs

    @outputs.setter
    def outputs(self, value) -> None:
        self._outputs = _paths("outputs", value)

    @property
    def services(self) -> list:
        """EnTK's service tasks: always [] here; setting any is an EnTKValueError (run the
        service as a task of a stage)."""
        return []

    @services.setter
    def services(self, value) -> None:
        if value:
            raise bad_value("AppManager", "services", value, "empty: service tasks are not run "
                            "here; run the service as a task of a stage")  # fmt: skip

    # -- this project's ----------------------------------------------------------------------
    @property
    def pilot(self):
        """The pilot (rp.Pilot) the workflows run on; None before run()."""
        return self._pilot

    @property
    def session(self):
        """The rp.Session the workflows run in; None before the first run() and after
        terminate()."""
        return self._session

    def reconfig(self, stop=None, start=None) -> list:
        """Stop the live partitions named in `stop` (a name or a list), start `start`
        (ComputePartitionDescriptions); e.g. from a post_exec.  Returns the new partitions.

        Args:
            stop (str | list[str] | None): the names of live partitions to stop.
            start (ComputePartitionDescription | dict | list | None): partitions to start.

        Returns:
            list[Partition]: the partitions started, in order.

        Raises:
            EnTKError: no pilot runs (before run(), or after it ended).
            EnTKValueError: a name no live partition has, or a description not accepted.
        """
        spec = partitions.reconfig_spec("AppManager", {"stop": stop, "start": start})
        assert spec is not None  # (None only for a value of None)
        if self._pilot is None or self._pilot.final:
            raise EnTKError("AppManager.reconfig: no pilot runs (run() makes it)")
        return partitions.Partitions(self._pilot).reconfig(
            "AppManager.reconfig", spec["stop"], spec["start"]
        )

    # -- run and terminate -------------------------------------------------------------------
    def run(self):
        """Run the workflow to its end on the pilot (made at the first call); the outputs
        staged out, or None.  EnTKError when it cannot go on (after terminate()).

        Returns:
            list[str] | None: `outputs`, staged out; None when there are none.

        Raises:
            EnTKMissingError: `workflow` or `resource_desc` not set.
            EnTKError: run() going on in another thread; a pipeline failed (a task that
                failed with error_is_fatal, or past its reattempts), a post_exec raised, the
                pilot ended, or terminate() was called: the pilot has ended then.
            EnTKValueError: the resource description names a resource this project cannot
                run a pilot on.
        """
        if self._workflow is None:
            raise EnTKMissingError("AppManager: workflow is not set (amgr.workflow = [...])")
        if self._resource_desc is None:
            raise EnTKMissingError("AppManager: resource_desc is not set")
        if not self._running.acquire(blocking=False):
            raise EnTKError("AppManager.run: already running (in another thread)")
        try:
            self._resources()
            pipelines = list(self._workflow)
            self._catalog.add(pipelines)
            retry = self._cfg["reattempts"] if self._cfg["resubmit_failed"] else 1
            self._processor = Processor(
                pipelines, self._tmgr, self._pilot, self._catalog, self._report, max(1, retry)
            )
            self._processor.run()
            if self._processor.stopped:
                raise EnTKError(f"AppManager.run: {self._processor.stopped}")
            self._stage_out()
        except BaseException:
            self._processor = None
            self._terminate()
            raise
        finally:
            self._processor = None
            self._running.release()
        return list(self._outputs) if self._outputs else None

    def terminate(self) -> None:
        """The pilot ends, the session closes (bounded); a run() going on in another thread
        ends with EnTKError.  Called again: nothing."""
        processor = self._processor
        if processor is not None:  # (run() terminates once it saw the stop)
            processor.stop("terminate() was called")
            return
        self._terminate()

    def resource_terminate(self) -> None:  # EnTK's older name
        """`terminate()` (EnTK's older name)."""
        self.terminate()

    def _terminate(self) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        self._report.info(f"Terminating: {self._pilot.uid if self._pilot else 'no pilot'}")
        if self._cfg["write_workflow"]:
            self._write_workflows(session.dir)
        self._pilot = self._tmgr = self._pmgr = None
        session.close()
        self._report.info("All components terminated")

    def _resources(self) -> None:
        """The session, managers and pilot, made at the first run() (or again after the
        pilot ended); shared_data staged into the pilot sandbox."""
        from pilot.pmgr.compat.rp1 import PilotManager, TaskManager
        from pilot.pmgr.core import Session

        if self._pilot is not None and not self._pilot.final:
            return
        assert self._resource_desc is not None  # (run() checked it)
        pd = resources.pilot_description(
            self._resource_desc, bool(self._cfg["rts_config"].get("sandbox_cleanup"))
        )
        if self._session is None:
            self._session = Session()
            self._report.info(f"EnTK session: {self._session.uid}")
            self._pmgr = PilotManager(self._session)
            self._pmgr.register_callback(self._on_pilot)
            self._tmgr = TaskManager(self._session)
            self._tmgr.register_callback(self._on_task)
        assert self._pmgr is not None and self._tmgr is not None  # (made with the session)
        try:
            self._pilot = self._pmgr.submit_pilots(pd)
        except EnTKError:
            raise
        except ValueError as exc:  # (e.g. a resource this project has no config for)
            raise EnTKValueError(f"resource_desc: {exc}") from None
        self._tmgr.add_pilots(self._pilot)
        self._catalog.pilot_sandbox = self._pilot.pilot_sandbox
        self._report.info(f"Pilot {self._pilot.uid} submitted ({pd.resource}, {pd.cores} cores)")
        if self._shared_data:
            self._pilot.stage_in([_directive(d, "pilot") for d in self._shared_data])

    def _stage_out(self) -> None:
        if self._outputs:
            assert self._pilot is not None  # (run: _resources submitted it)
            self._pilot.stage_out([_directive(d, "client") for d in self._outputs])

    def _on_task(self, task, state=None) -> None:
        processor = self._processor
        if processor is not None:  # (a list: RADICAL_PILOT_BULK_CB is set)
            for t in task if isinstance(task, list) else [task]:
                processor.on_task(t, t.state)

    def _on_pilot(self, pilot, state) -> None:
        processor = self._processor
        if processor is not None and pilot is self._pilot:
            processor.on_pilot(pilot, state)

    def _write_workflows(self, where: str) -> None:
        doc = [[_pipeline_doc(p) for p in wf] for wf in self._workflows]
        with open(os.path.join(where, "entk.workflows.json"), "w") as f:
            json.dump(doc, f, indent=1, default=str)


def _pipeline_doc(p: Pipeline) -> dict:
    return {
        **p.as_dict(),
        "stages": [
            {**s.as_dict(), "tasks": [t.as_dict() for t in s.ordered_tasks()]} for s in p.stages
        ],
    }


def _directive(text: str, far: str) -> dict:
    """A shared_data / outputs entry ('a > b' or 'a') as a pilot.stage_in / stage_out
    directive; `far` is where the target is."""
    parts = [x.strip() for x in text.split(">")]
    source = parts[0].rstrip("/")
    target = parts[1] if len(parts) > 1 else os.path.basename(source)
    if far == "pilot":
        target = target.removeprefix("$SHARED/")
    else:
        source = source.removeprefix("$SHARED/")
    return {"source": source, "target": target}


def _paths(field: str, value) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise bad_type("AppManager", field, value, "a list of paths ('a' or 'a > b')")
    for i, v in enumerate(items):
        if not isinstance(v, str) or not v.strip() or v.count(">") > 1:
            raise bad_type("AppManager", f"{field}[{i}]", v, "a path, or 'source > target'")
    return list(items)


def _config(path) -> dict:
    cfg = json.loads(json.dumps(DEFAULTS))
    if path is None:
        return cfg
    name = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        with open(name) as f:
            given = json.load(f)
    except (OSError, ValueError) as exc:
        raise bad_value("AppManager", "config_path", path, f"EnTK's config.json ({exc})") from None
    unknown = sorted(set(given) - set(DEFAULTS) - {"hostname", "port"})
    if unknown:
        raise bad_value("AppManager", "config_path", path, f"keys of {sorted(DEFAULTS)}")
    cfg.update({k: v for k, v in given.items() if k in DEFAULTS})
    return cfg
