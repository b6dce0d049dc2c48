"""An EnTK-style pipeline on top of the public API, driven by unit state callbacks.

A Pipeline is a list of Stages, a Stage a list of Tasks (unit descriptions).  Stages run one
after the other: the UnitManager's callback counts each stage's final units and, when the last
one ends, reshapes the pilot and submits the next stage from the callback itself (no polling,
no wait() there); the main thread only waits for an Event.  The pipeline here:

    simulate 1   GPU units (gpus=1) on a partition of 2 cores and 2 GPUs
    analyse 1    CPU units on the analysis partition plus the simulation's cores, lent to it:
                 a reconfig stops the GPU partition and starts a CPU one of its size
    simulate 2   the lent cores go back: a reconfig stops that CPU partition and starts a
                 GPU partition again
    analyse 2    lent again

The pilot runs on `local.simulated` (logical nodes of 4 cores and 2 GPUs; every process runs
on this machine).  At the end the session's timeline is drawn (pmgr/observe/plot.py).

    python examples/pipeline.py [--plot docs/timeline.png]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pilot as rp  # noqa: E402

CPD, CUD = rp.ComputePartitionDescription, rp.ComputeUnitDescription
SIM = {"cores": 2, "gpus": 2, "name": "simulate"}


class Stage:
    """Tasks (unit description fields) that run on `kind` ("gpu" or "cpu") partitions."""

    def __init__(self, name: str, kind: str, tasks: list[dict]) -> None:
        self.name, self.kind, self.tasks = name, kind, tasks
        self.units: list = []  # as they end
        self.left = len(tasks)
        self.span = [0.0, 0.0]  # epoch seconds: submitted, last unit final


class Pipeline:
    """Runs its stages in order on one pilot; between stages of different kinds, a reconfig
    lends the GPU partition's cores to the CPU stage (or takes them back)."""

    def __init__(self, stages: list[Stage], pilot, umgr) -> None:
        self.todo, self.pilot, self.umgr = list(stages), pilot, umgr
        self.gpu, self.cpu = pilot.partitions  # the simulation's and the analysis' partition
        self.lent = None  # the CPU partition that holds the GPU partition's cores
        self.by_name: dict[str, Stage] = {}
        self.lock = threading.Lock()
        self.finished = threading.Event()
        self.error: str | None = None
        umgr.register_callback(self.on_unit)

    def next_stage(self) -> None:
        if not self.todo:
            return self.finished.set()
        stage = self.todo.pop(0)
        where = self.reshape(stage.kind)
        descs = []
        for i, fields in enumerate(stage.tasks):
            part = where[i % len(where)].uid  # pinned: a unit waits until its partition is up
            descs.append(CUD(name=f"{stage.name}.{i}", partition=part, **fields))
            self.by_name[descs[-1].name] = stage
        stage.span[0] = time.time()
        self.umgr.submit_units(descs)

    def reshape(self, kind: str) -> list:
        """The partitions a stage of `kind` runs on, after a reconfig when needed."""
        if kind == "cpu" and self.gpu is not None:
            self.lent = self.reconfig(self.gpu, CPD(cores=self.gpu.cores, name="analyse+"))
            self.gpu = None
        elif kind == "gpu" and self.gpu is None:
            self.gpu = self.reconfig(self.lent, CPD(**SIM))
            self.lent = None
        return [self.gpu] if kind == "gpu" else [p for p in (self.cpu, self.lent) if p]

    def reconfig(self, stop, start):
        new = self.pilot.reconfig(stop=stop.uid, start=[start])[0]
        print(f"reconfig: stop {stop.uid} ({stop.description.name}), start {new.uid} "
              f"({start.name}: {start.cores} cores, {start.gpus or 0} GPUs)")  # fmt: skip
        return new

    def on_unit(self, unit, state) -> None:
        """UnitManager callback (the session's delivery thread): count, then go on."""
        stage = self.by_name.get(unit.description.name)
        if stage is None or state not in rp.FINAL:
            return
        with self.lock:  # a unit failed at submit reports on the submitting thread
            stage.units.append(unit)
            stage.left -= 1
            if stage.left:
                return
        stage.span[1] = time.time()
        report(stage)
        if any(u.state != rp.DONE for u in stage.units):
            self.error = f"stage {stage.name}: not every unit DONE"
            return self.finished.set()
        try:
            self.next_stage()
        except Exception as e:  # an exception in a callback is only logged: say so here
            self.error = f"after stage {stage.name}: {e!r}"
            self.finished.set()


def report(stage: Stage) -> None:
    states = Counter(u.state for u in stage.units)
    parts = Counter(u.part for u in stage.units)
    seen = sorted({u.stdout.strip() for u in stage.units})
    print(
        f"stage {stage.name:10} {states[rp.DONE]}/{len(stage.units)} units DONE in "
        f"{stage.span[1] - stage.span[0]:.1f} s on "
        + ", ".join(f"{p} ({n})" for p, n in sorted(parts.items()))
        + f"; output {', '.join(seen[:3])}{' ...' if len(seen) > 3 else ''}"
    )


def plot_stages(session_uid: str, url: str, stages: list, names: dict, path: str) -> None:
    """The session's timeline (pmgr/observe/plot.py), each stage shaded and named, each
    partition's name after its uid in the legends."""
    from pilot.pmgr.observe import plot, timeline
    from pilot.pmgr.store import open_store

    store = open_store(url)
    try:
        tl = timeline.load(store, session_uid)
    finally:
        store.close()
    fig, drawn = plot.figure(tl)
    main = [ax for ax in fig.axes if "dashed" not in ax.get_ylabel()]  # not the twin axis
    for s in stages:
        a, b = tl.rel(s.span[0]), tl.rel(s.span[1])
        for ax in main:
            color = "gold" if s.kind == "gpu" else "skyblue"
            ax.axvspan(a, b, color=color, alpha=0.15, lw=0, zorder=0)
        main[-1].annotate(s.name, xy=((a + b) / 2, 0.97), xycoords=("data", "axes fraction"),
                          ha="center", va="top", fontsize=9, fontweight="bold")  # fmt: skip
    for text in [t for ax in main if ax.get_legend() for t in ax.get_legend().get_texts()]:
        text.set_text(names.get(text.get_text(), text.get_text()))
    fig.savefig(path, format=plot.output_format(path))
    print(f"timeline: {path} ({drawn['partitions']} partitions, {drawn['reconfigs']} reconfigs)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plot", default="docs/timeline.png", help="the timeline picture")
    ap.add_argument("--tasks", type=int, default=4, help="units per simulation stage")
    args = ap.parse_args()

    sim = {
        "executable": "echo",
        "arguments": ["gpu=$CUDA_VISIBLE_DEVICES"],
        "pre_exec": ["sleep 1.5"],
        "gpus": 1,
    }
    ana = {"executable": "echo", "arguments": ["cpus=$PILOT_CPU_IDS"], "pre_exec": ["sleep 1"]}
    stages = [
        Stage("simulate-1", "gpu", [sim] * args.tasks),
        Stage("analyse-1", "cpu", [ana] * 2 * args.tasks),
        Stage("simulate-2", "gpu", [sim] * args.tasks),
        Stage("analyse-2", "cpu", [ana] * 2 * args.tasks),
    ]
    pd = rp.ComputePilotDescription(
        resource="local.simulated", parts=[CPD(**SIM), CPD(cores=2, name="analyse")], runtime=5
    )
    t0 = time.monotonic()
    with rp.Session() as session:
        print(f"session {session.uid}")
        pilot = rp.PilotManager(session).submit_pilots(pd)
        for part in pilot.partitions:
            part.wait(rp.ACTIVE, timeout=60)
        umgr = rp.UnitManager(session)
        umgr.add_pilots(pilot)
        pipeline = Pipeline(stages, pilot, umgr)
        pipeline.next_stage()
        if not pipeline.finished.wait(timeout=120):
            pipeline.error = "pipeline: not finished after 120 s"
        url = session.store.url
        names = {p.uid: f"{p.uid} {p.description.name}" for p in pilot.partitions}
    print(f"session {session.uid}: {len(stages)} stages in {time.monotonic() - t0:.1f} s")
    if args.plot:
        os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
        plot_stages(session.uid, url, stages, names, args.plot)
    if pipeline.error:
        print(pipeline.error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
