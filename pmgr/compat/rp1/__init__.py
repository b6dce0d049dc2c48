"""RADICAL-Pilot 1.x's face: its TaskManager and Task (tasks.py, task.py, task_events.py), its
TaskDescription and how a task becomes a unit (task_description.py, task_form.py), its names
(names.py, over RP 0.90's in pilot/rp/names.py), its PilotManager and what its pilots add
(pilots.py, named_envs.py, pilot_staging.py), Raptor (raptor.py; what its workers know by name
is pilot/rp/raptor_functions.py, in the core: function workers run it) and its node lists
(nodes.py).  `import pilot as rp` names them all; the other faces use the names declared here."""

from pilot.exports import declare

__getattr__, __dir__, __all__ = declare(
    __name__,
    {
        "PilotManager": "pilot.pmgr.compat.rp1.pilots",
        "TaskManager": "pilot.pmgr.compat.rp1.tasks",
        "Task": "pilot.pmgr.compat.rp1.task",
        "TaskDescription": "pilot.pmgr.compat.rp1.task_description",
        "CUDA": "pilot.pmgr.compat.rp1.names",
        "ROCm": "pilot.pmgr.compat.rp1.names",
    },
)
