"""RADICAL-EnTK's face on this project's pilots; `pilot.entk` (pilot/entk.py) is its name in the
user API:

    import pilot.entk as re
    p = re.Pipeline(); s = re.Stage(); t = re.Task()
    t.executable = '/bin/echo'; t.arguments = ['hello']
    s.add_tasks(t); p.add_stages(s)
    amgr = re.AppManager()
    amgr.resource_desc = {'resource': 'local.localhost', 'walltime': 10, 'cpus': 2}
    amgr.workflow = [p]
    amgr.run()

The modules, each one thing:
    states.py      EnTK's state names           errors.py      EnTK's exceptions
    task.py        Task                         reqs.py        cpu_reqs, gpu_reqs
    stage.py       Stage                        pipeline.py    Pipeline (suspend, resume)
    references.py  $SHARED, $Pipeline_..._Task_... and the data directives
    describe.py    an EnTK task as an RP 1.x TaskDescription; where sandboxes are
    partitions.py  partitions per stage and reconfigs between stages (beyond EnTK)
    resources.py   resource_desc as a PilotDescription
    processor.py   the workflow processor: stages in order, pipelines side by side, post_exec
    report.py      what a run prints            appmanager.py  AppManager
"""

from pilot.exports import declare

__getattr__, __dir__, __all__ = declare(
    __name__,
    {
        "AppManager": "pilot.pmgr.compat.entk.appmanager",
        "Pipeline": "pilot.pmgr.compat.entk.pipeline",
        "Stage": "pilot.pmgr.compat.entk.stage",
        "Task": "pilot.pmgr.compat.entk.task",
        "CpuReqs": "pilot.pmgr.compat.entk.reqs",
        "GpuReqs": "pilot.pmgr.compat.entk.reqs",
        "EnTKError": "pilot.pmgr.compat.entk.errors",
        "EnTKMissingError": "pilot.pmgr.compat.entk.errors",
        "EnTKTypeError": "pilot.pmgr.compat.entk.errors",
        "EnTKValueError": "pilot.pmgr.compat.entk.errors",
    },
)
