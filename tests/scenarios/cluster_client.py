"""A client on a cluster's login node (tests/test_cluster.py): run in the login namespace of
the SLURM that `PILOT_SLURM_NETNS=1 tests/slurm.sh up` starts, its pilot job on compute nodes.

    python -m tests.scenarios.cluster_client run RESOURCE.yaml
    python -m tests.scenarios.cluster_client start RESOURCE.yaml  (prints, waits to be killed)
    python -m tests.scenarios.cluster_client attach SESSION_UID
    python -m tests.scenarios.cluster_client expire RESOURCE.yaml
    python -m tests.scenarios.cluster_client grow RESOURCE.yaml
    python -m tests.scenarios.cluster_client parsl_mpi RESOURCE.yaml  (PILOT_TEST_MPI_HELLO=BIN)

run     a two-partition pilot over two compute nodes: units print their host, output comes back
        here, `pilot partitions` (the CLI) answers, a reconfig, a cancel
start   a pilot with slow units; prints what it started and waits, to be SIGKILLed by the test
attach  a new client process takes the session over: its units end, more run, a cancel
expire  a pilot whose runtime (6 s) runs out while a two-node unit runs
grow    a one-node pilot (max_nodes=4) grows by a second SLURM job of two nodes, asked for from
        a shell (`pilot reconfig PILOT --start nodes=2`); units run on its hosts; stopping the
        partition gives the job back; a grow of three more nodes (the cluster has three in all,
        one the pilot's) SLURM refuses: that fails only its partition
parsl_mpi
        Parsl on a two-node pilot (pilot.parsl.PilotExecutor, mpi_launcher="srun"): MPI apps
        as Parsl writes them, `$PARSL_MPI_PREFIX BIN` with num_ranks / ranks_per_node /
        launcher_options; BIN a real MPI program (tests/test_cluster.py compiles it): two
        two-rank apps, two one-rank apps; then an app of a rank on each of the two nodes,
        whose step runs a shell on each
Each prints one JSON line last.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pilot as rp

CUD = rp.ComputeUnitDescription


def host_unit(part: str):
    return CUD(executable="/bin/sh", arguments=["-c", "echo host=$(hostname)"], partition=part)


def two_partitions(session, resource: str):
    parts = [rp.ComputePartitionDescription(nodes=1), rp.ComputePartitionDescription(nodes=1)]
    t0 = time.monotonic()
    pilot = rp.PilotManager(session).submit_pilots(
        rp.ComputePilotDescription(resource=resource, nodes=3, parts=parts, runtime=3)
    )
    if pilot.wait([rp.ACTIVE, rp.FAILED, rp.CANCELED], timeout=90) != rp.ACTIVE:
        raise SystemExit(f"pilot {pilot.state}: {pilot.reason}")
    active = time.monotonic() - t0
    for part in pilot.partitions:
        part.wait([rp.ACTIVE, rp.FAILED], timeout=30)
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    pilot.startup = {"pilot ACTIVE s": active, "partitions ACTIVE s": time.monotonic() - t0}
    return pilot, umgr


def hosts(units) -> list:
    return [[u.state, (u.stdout or "").strip(), u.node] for u in units]


def control(pilot) -> dict:
    with open(os.path.join(pilot.sandbox, "control.json")) as f:
        return json.load(f)


def run(session, resource: str) -> dict:
    pilot, umgr = two_partitions(session, resource)
    out: dict = {"parts": [[p.state, p.reason] for p in pilot.partitions]}
    out["startup"] = pilot.startup
    seen: list = []
    umgr.register_output_callback(lambda u, node, rank, stream, text: seen.append([u.uid, text]))
    units = []
    for part in pilot.partitions:
        units += umgr.submit_units([host_unit(part.uid) for _ in range(2)])
    umgr.wait_units([u.uid for u in units], timeout=60)
    out["units"] = hosts(units)
    out["forwarded"] = seen
    out["control"] = control(pilot)
    # data from the login node to a compute node and back, over the pilot link
    greeting = os.path.join(session.dir, "greeting.txt")
    with open(greeting, "w") as f:
        f.write("hello from the login node\n")
    staged = umgr.submit_units(
        CUD(
            executable="/bin/sh",
            arguments=["-c", "cat greeting.txt; hostname > where.txt"],
            input_staging=[greeting],
            output_staging=[f"where.txt > {session.dir}/where.txt"],
            partition=pilot.partitions[1].uid,
        )
    )
    staged.wait(timeout=60)
    where = os.path.join(session.dir, "where.txt")
    out["staged"] = [
        staged.state,
        staged.reason,
        staged.stdout,
        open(where).read() if os.path.exists(where) else None,
    ]
    cli = subprocess.run(
        [sys.executable, "-m", "pilot", "partitions", pilot.uid],
        capture_output=True,
        text=True,
        timeout=60,
    )
    out["cli"] = [cli.returncode, cli.stdout, cli.stderr]
    (new,) = pilot.reconfig(
        stop=pilot.partitions[0].uid, start=[rp.ComputePartitionDescription(nodes=1)]
    )
    new.wait([rp.ACTIVE, rp.FAILED], timeout=30)
    later = umgr.submit_units([host_unit(new.uid) for _ in range(2)])
    umgr.wait_units([u.uid for u in later], timeout=60)
    out["reconfig"] = {
        "parts": [[p.uid, p.state] for p in pilot.partitions],
        "new": [new.state, new.reason],
        "units": hosts(later),
    }
    t0 = time.monotonic()
    pilot.cancel(timeout=60)
    out["cancel"] = [pilot.state, pilot.reason, round(time.monotonic() - t0, 2)]
    out["job"] = pilot.job.pid
    return out


def start(session, resource: str) -> dict:
    pilot, umgr = two_partitions(session, resource)
    units = []
    for part in pilot.partitions:
        units += umgr.submit_units(
            [
                CUD(executable="/bin/sh", arguments=["-c", "sleep 3; hostname"], partition=part.uid)
                for _ in range(3)
            ]
        )
    units[0].wait(rp.EXECUTING, timeout=30)
    session.writer.flush(timeout=30)
    daemons = json.loads(open(os.path.join(pilot.sandbox, "daemons.json")).read())
    return {
        "pilot": pilot.uid,
        "job": pilot.job.pid,
        "units": [u.uid for u in units],
        "parts": [p.uid for p in pilot.partitions],
        "control": control(pilot)["endpoint"],
        "daemons": [d["endpoint"] for d in daemons.values()],
        "server_key": session.keys.server_public.decode(),
        "files": sorted(os.path.join(root, f) for root, _, fs in os.walk(session.dir) for f in fs),
        "dirs": [session.dir, pilot.sandbox, os.path.join(session.dir, "keys")],
    }


def expire(session, resource: str) -> dict:
    pilot = rp.PilotManager(session).submit_pilots(
        rp.ComputePilotDescription(
            resource=resource, nodes=2, parts=[rp.ComputePartitionDescription(nodes=2)], runtime=0.1
        )
    )
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    unit = umgr.submit_units(CUD(executable="/bin/sleep", arguments=["60"], ranks=2))
    ended = pilot.wait([rp.DONE, rp.FAILED, rp.CANCELED], timeout=90)
    unit.wait(timeout=30)
    return {
        "pilot": [ended, pilot.reason],
        "unit": [unit.state, unit.reason],
        "parts": [p.state for p in pilot.partitions],
        "job": pilot.job.pid,
    }


def grow(session, resource: str) -> dict:
    pilot = rp.PilotManager(session).submit_pilots(
        rp.ComputePilotDescription(
            resource=resource, nodes=1, max_nodes=4, runtime=4,
            parts=[rp.ComputePartitionDescription(nodes=1)],
        )
    )  # fmt: skip
    if pilot.wait([rp.ACTIVE, rp.FAILED, rp.CANCELED], timeout=90) != rp.ACTIVE:
        raise SystemExit(f"pilot {pilot.state}: {pilot.reason}")
    first = pilot.partitions[0]
    first.wait([rp.ACTIVE, rp.FAILED], timeout=30)
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    out: dict = {"first": [first.state, first.reason], "job": pilot.job.pid}
    t0 = time.monotonic()
    cli = subprocess.run(
        [sys.executable, "-m", "pilot", "reconfig", pilot.uid, "--start", "nodes=2", "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    out["cli"] = [cli.returncode, cli.stdout[-2000:], cli.stderr[-2000:]]
    deadline = time.monotonic() + 30
    while len(pilot.partitions) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    new = pilot.partitions[-1]
    new.wait([rp.ACTIVE, rp.FAILED], timeout=90)
    out["grow_s"] = round(time.monotonic() - t0, 2)
    out["new"] = [new.uid, new.state, new.reason, [n["name"] for n in (new.resources or {})
                                                    .get("nodes", [])]]  # fmt: skip
    units = umgr.submit_units([host_unit(new.uid) for _ in range(4)])
    units += umgr.submit_units([host_unit(first.uid) for _ in range(2)])
    umgr.wait_units([u.uid for u in units], timeout=60)
    out["units"] = hosts(units)
    out["jobs"] = pilot.jobs
    pilot.reconfig(stop=new.uid)
    new.wait(rp.FINAL, timeout=30)
    deadline = time.monotonic() + 30
    while pilot.jobs[1].get("state") != "released" and time.monotonic() < deadline:
        time.sleep(0.1)
    out["released"] = pilot.jobs[1]
    # three more nodes: the cluster has three in all, one of them the pilot's: SLURM refuses
    (big,) = pilot.reconfig(start=rp.ComputePartitionDescription(nodes=3))
    big.wait(rp.FINAL, timeout=90)
    out["big"] = [big.state, big.reason]
    out["after"] = [pilot.state, first.state, [j.get("state") for j in pilot.jobs]]
    more = umgr.submit_units(host_unit(first.uid))
    more.wait(timeout=30)
    out["more"] = hosts([more])
    pilot.cancel(timeout=60)
    out["cancel"] = [pilot.state, pilot.reason]
    out["jobs_after"] = pilot.jobs
    return out


def attach(session, _: str | None = None) -> dict:
    (pilot,) = rp.PilotManager(session).get_pilots()
    out: dict = {
        "pilot": [pilot.state, pilot.reason],
        "parts": [[p.uid, p.state] for p in pilot.partitions],
    }
    umgr = rp.UnitManager(session)
    units = umgr.get_units()
    umgr.wait_units(timeout=90)
    out["units"] = [[u.uid, u.state, (u.stdout or "").strip()] for u in units]
    more = umgr.submit_units([host_unit(p.uid) for p in pilot.partitions])
    umgr.wait_units([u.uid for u in more], timeout=60)
    out["more"] = hosts(more)
    pilot.cancel(timeout=60)
    out["cancel"] = [pilot.state, pilot.reason]
    return out


def parsl_mpi(session, resource: str) -> dict:
    import parsl

    from pilot.parsl import PilotExecutor

    hello = os.environ["PILOT_TEST_MPI_HELLO"]
    pd = rp.ComputePilotDescription(resource=resource, nodes=2, runtime=5)
    ex = PilotExecutor(pilot_description=pd, session=session, mpi_launcher="srun")

    @parsl.bash_app
    def mpi_hello(stdout=None, stderr=None, parsl_resource_specification=None):
        return f"$PARSL_MPI_PREFIX {hello}"

    @parsl.bash_app
    def across(stdout=None, stderr=None, parsl_resource_specification=None):
        said = "echo rank $SLURM_PROCID of $SLURM_NTASKS on $SLURMD_NODENAME"
        return f"$PARSL_MPI_PREFIX /bin/sh -c '{said}'"

    out: dict = {"apps": []}
    top = os.environ["PILOT_SESSIONS_DIR"]
    config = parsl.Config(executors=[ex], strategy="none", run_dir=os.path.join(top, "runinfo"))
    with parsl.load(config):
        pmix = {"launcher_options": "--mpi=pmix"}  # (the cluster's MpiDefault is none)
        specs = [{"num_ranks": 2, "ranks_per_node": 2, "num_nodes": 1, **pmix}] * 2
        specs += [{"num_ranks": 1, **pmix}] * 2
        specs += [{"num_nodes": 2, "ranks_per_node": 1}]  # (both nodes, whole; see below)
        futures = []
        for i, spec in enumerate(specs):
            path = os.path.join(top, f"mpi_hello.{i}.out")
            # (across nodes SLURM's PMIx fails to start the ranks in this cluster of
            # namespaces: that app's srun step runs a shell on each node instead)
            how = across if spec.get("num_nodes", 1) > 1 else mpi_hello
            app = how(stdout=path, stderr=path + ".err", parsl_resource_specification=spec)
            futures.append((path, app))
        for path, f in futures:
            try:
                code = f.result(timeout=120)
                why = None
            except Exception as e:  # (said in the JSON: the test names it)
                code, why = None, repr(e)
            said = [open(p).read() if os.path.exists(p) else "" for p in (path, path + ".err")]
            out["apps"].append(
                {"code": code, "error": why, "lines": said[0].splitlines(), "stderr": said[1]}
            )
        out["job"] = ex.executor.pilot.job.pid
    return out


def main() -> int:
    scenario, arg = sys.argv[1], sys.argv[2]
    if scenario == "attach":
        session = rp.Session(uid=arg)
    else:
        session = rp.Session()
    try:
        scenarios = {
            "run": run,
            "start": start,
            "attach": attach,
            "expire": expire,
            "grow": grow,
            "parsl_mpi": parsl_mpi,
        }
        result = scenarios[scenario](session, arg)
        result["session"] = session.uid
        print(json.dumps(result), flush=True)
        if scenario == "start":
            time.sleep(600)  # killed by the test: the client dies without a word
    finally:
        session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
