"""The faces on the client's core, one subpackage each: what users of another tool already
know, over this project's pilots, partitions and units.

    rp1/      RADICAL-Pilot 1.x: TaskManager, Task, TaskDescription, its PilotManager,
              Raptor, named environments, pilot staging, node lists
    entk/     RADICAL-EnTK: Pipeline, Stage, Task, AppManager (pilot.entk)
    futures/  rp.Executor, a concurrent.futures.Executor of function units
    parsl/    pilot.parsl.PilotExecutor, a Parsl executor

A face uses the core through the names pmgr/core/__init__.py declares, and another face
through the names that face's package declares; the core imports no face
(tests/test_layers.py)."""
