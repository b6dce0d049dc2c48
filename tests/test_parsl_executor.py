"""pilot.parsl.PilotExecutor (pmgr/compat/parsl/executor.py), black-box through Parsl's own API, and
Parsl's own config-agnostic tests run with it (as Parsl's Makefile runs htex_local_test)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

parsl = pytest.importorskip(
    "parsl", reason="Parsl is not installed (pip install 'pilot-partitions[parsl]')"
)
from parsl.app.errors import AppTimeout, BashExitFailure, MissingOutputs  # noqa: E402
from parsl.data_provider.files import File  # noqa: E402
from parsl.dataflow.dflow import DataFlowKernel  # noqa: E402
from parsl.executors.errors import InvalidResourceSpecification  # noqa: E402

import pilot as rp  # noqa: E402
from pilot.parsl import PilotExecutor  # noqa: E402
from tests.conftest import ROOT  # noqa: E402

# Parsl's suite: the test directories that hold for any executor (the list) ...
PARSL_SUITE = (
    "test_python_apps test_bash_apps test_callables.py test_docs test_error_handling "
    "test_staging test_regression"
).split()
# ... and, as root, without the tests whose premise is that /bad/dir cannot be made
ROOT_ONLY_PREMISE = "unix_filesystem_permissions_required"


class Odd(Exception):
    pass


@parsl.python_app
def add(a, b, parsl_resource_specification=None):
    return a + b


@parsl.python_app
def where(parsl_resource_specification=None):
    return os.environ["PILOT_PARTITION_ID"], os.environ["PILOT_CPU_IDS"]


@parsl.python_app
def odd():
    raise Odd("odd")


@parsl.python_app
def nap(s, parsl_resource_specification=None):
    time.sleep(s)


@parsl.bash_app
def shell(command, stdout=None, stderr=None, outputs=(), walltime=None):
    return command


@pytest.fixture(scope="module")
def dfk(tmp_path_factory):
    run = tmp_path_factory.mktemp("parsl")
    mp = pytest.MonkeyPatch()  # (the autouse sessions_dir fixture is per test)
    mp.setenv("PILOT_SESSIONS_DIR", str(run / "sessions"))
    ex = PilotExecutor(label="pilot", max_workers=2)
    dfk = parsl.load(parsl.Config(executors=[ex], run_dir=str(run / "runinfo")))
    yield dfk
    dfk.cleanup()
    mp.undo()
    assert ex.executor.pilot.final


def test_python_apps_and_their_exceptions(dfk):
    assert add(1, 2).result(timeout=60) == 3
    assert sum(f.result(60) for f in [add(i, 1) for i in range(100)]) == 5050
    with pytest.raises(Odd, match="odd"):
        odd().result(timeout=60)


def test_bash_apps_are_executable_units(dfk, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out, err = tmp_path / "o.txt", tmp_path / "sub" / "e.txt"
    cmd = 'echo "$PWD"; echo "$PILOT_UNIT_ID" >&2; touch made'
    assert shell(cmd, stdout=str(out), stderr=str(err)).result(timeout=60) == 0
    assert out.read_text() == f"{tmp_path}\n"  # in the client's directory, as htex workers
    unit = err.read_text().split("\n")[-2]
    assert err.read_text().startswith(f"--> executable follows <--\n{cmd}\n")
    assert unit.startswith("unit.") and (tmp_path / "made").exists()
    shell("echo again", stdout=(str(out), "w")).result(timeout=60)
    assert out.read_text() == "again\n"  # "w": truncated first
    with pytest.raises(BashExitFailure) as failed:
        shell("exit 3").result(timeout=60)
    assert failed.value.exitcode == 3
    with pytest.raises(MissingOutputs):
        shell("true", outputs=[File(str(tmp_path / "never"))]).result(timeout=60)
    with pytest.raises(AppTimeout):
        shell("sleep 30", walltime=0.5).result(timeout=60)


def test_resource_specification_maps_to_unit_fields(dfk):
    ex = dfk.executors["pilot"].executor
    part = ex.pilot.partitions[0].uid
    got = where(parsl_resource_specification={"cores": 2}).result(60)
    assert got[0] == part and sorted(got[1].split(",")) == ["0", "1"]
    spec = {"partition": part, "memory": 1, "disk": 1}  # (not used here: logged once)
    assert add(2, 2, parsl_resource_specification=spec).result(60) == 4
    with pytest.raises(InvalidResourceSpecification):
        add(1, 1, parsl_resource_specification={"ranks": 2}).result(60)
    with pytest.raises(AppTimeout):
        nap(30, parsl_resource_specification={"running_time_min": 0.01}).result(60)


@parsl.bash_app
def prefixes(stdout=None, parsl_resource_specification=None):
    seen = (
        "$PARSL_MPI_PREFIX|$PARSL_MPIEXEC_PREFIX|$PARSL_SRUN_PREFIX|$PILOT_CPU_IDS|$PILOT_NODE_NAME"
    )
    return f'echo "{seen}"'


@parsl.bash_app
def meet(me, other, parsl_resource_specification=None):
    # both MPI apps must run at once: each waits (at most 30 s) for the other's mark
    return f"touch {me}; for i in $(seq 300); do [ -e {other} ] && exit 0; sleep 0.1; done; exit 1"


def test_parsl_mpi_apps_get_parsls_prefixes_over_their_node(dfk, tmp_path):
    """A Parsl MPI app runs once, holding its ranks' cores on one node, with the PARSL_*_PREFIX
    variables Parsl's own composer makes for that node; two share a node."""
    from parsl.executors.high_throughput.mpi_prefix_composer import compose_all

    spec = {"num_ranks": 2, "launcher_options": "--bind-to core"}
    out = tmp_path / "prefixes.out"
    prefixes(stdout=str(out), parsl_resource_specification=spec).result(60)
    mpi, mpiexec, srun, cpus, node = out.read_text().strip().split("|")
    want = compose_all("mpiexec", {"num_ranks": 2, "ranks_per_node": 2, **spec}, [node])
    assert (mpi, mpiexec) == (want["PARSL_MPI_PREFIX"], want["PARSL_MPIEXEC_PREFIX"])
    # srun's: a step beside the node daemons' (tests/test_cluster.py runs a real one)
    assert srun == want["PARSL_SRUN_PREFIX"].replace("srun ", "srun --overlap --cpu-bind=none ", 1)
    assert mpi.startswith(f"mpiexec -n 2 -ppn 2 -hosts {node} --bind-to core")
    assert sorted(cpus.split(",")) == ["0", "1"]  # both ranks' cores, held by the one process
    one = {"num_nodes": 1, "ranks_per_node": 1}
    a, b = tmp_path / "a", tmp_path / "b"
    apps = [
        meet(a, b, parsl_resource_specification=one),
        meet(b, a, parsl_resource_specification=one),
    ]
    assert [f.result(60) for f in apps] == [0, 0]
    with pytest.raises(InvalidResourceSpecification, match="num_ranks=3 is not num_nodes=2"):
        prefixes(parsl_resource_specification={"num_nodes": 2, "num_ranks": 3}).result(60)
    with pytest.raises(InvalidResourceSpecification, match="give one kind"):
        prefixes(parsl_resource_specification={"num_ranks": 2, "mpi": True}).result(60)
    with pytest.raises(ValueError, match="mpi_launcher='mpirun'"):
        PilotExecutor(mpi_launcher="mpirun")


def spread(mark, parsl_resource_specification=None):
    # once per app: its prefixes, its node list, then holds its nodes a moment
    return (
        f'echo "$PARSL_MPI_PREFIX|$PARSL_MPIEXEC_PREFIX|$PILOT_NODE_LIST|$PILOT_RANKS" >> {mark}'
        f"; sleep 1; echo end >> {mark}"
    )


def test_a_parsl_mpi_app_of_two_nodes_holds_both_and_runs_once(tmp_path, monkeypatch):
    """num_nodes=2: whole nodes, as MPIExecutor's blocks; the command runs once, its prefixes
    over both nodes (local.simulated: three logical nodes of 4 cores)."""
    monkeypatch.setenv("PILOT_SESSIONS_DIR", str(tmp_path / "sessions"))
    pd = rp.ComputePilotDescription(resource="local.simulated", nodes=3)
    ex = PilotExecutor(label="multi", pilot_description=pd)
    # (a kernel of its own beside the module's loaded one: the app names it)
    dfk = DataFlowKernel(parsl.Config(executors=[ex], run_dir=str(tmp_path / "runinfo")))
    app = parsl.bash_app(spread, data_flow_kernel=dfk)
    try:
        mark = tmp_path / "spread.out"
        spec = {"num_nodes": 2, "ranks_per_node": 3, "launcher_options": "-l"}
        assert app(mark, parsl_resource_specification=spec).result(60) == 0
        lines = mark.read_text().splitlines()
        assert len(lines) == 2 and lines[1] == "end", lines  # once, not once a node
        mpi, mpiexec, nodes, ranks = lines[0].split("|")
        names = nodes.split(",")
        assert len(names) == 2 and set(names) <= {"n0", "n1", "n2"} and ranks == "2", lines
        assert mpi == mpiexec == f"mpiexec -n 6 -ppn 3 -hosts {nodes} -l", mpi
        with pytest.raises(InvalidResourceSpecification, match="more than the 4 cores"):
            app(mark, parsl_resource_specification={"num_nodes": 2, "ranks_per_node": 5}).result(60)
    finally:
        dfk.cleanup()
    assert ex.executor.pilot.final


def test_parsl_own_suite(tmp_path):
    """Parsl's config-agnostic tests, `pytest <parsl.tests dirs> --config
    tests/parsl_pilot_config.py` (Parsl's conftest needs pytest < 9: make installs one into
    .venv/parsl-pytest, with pandas for a regression test)."""
    extra = os.path.join(ROOT, ".venv", "parsl-pytest")
    if not os.path.isdir(os.path.join(extra, "pytest")):
        pytest.skip("pytest < 9 for Parsl's conftest is not in .venv/parsl-pytest (make does it)")
    import parsl.tests

    where = parsl.tests.__path__[0]
    args = [os.path.join(where, d) for d in PARSL_SUITE]
    select = ["-k", "not cleannet"]
    if os.getuid() == 0:
        select += ["-m", f"not {ROOT_ONLY_PREMISE}"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([extra, ROOT]),
        "PILOT_SESSIONS_DIR": str(tmp_path / "sessions"),
    }
    config = os.path.join(ROOT, "tests", "parsl_pilot_config.py")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull]
        + ["--rootdir", str(tmp_path), *args, *select, "--config", config],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    tail = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-2000:]
    assert out.returncode == 0 and " passed" in tail and "failed" not in tail, (
        out.stdout[-4000:] + out.stderr[-2000:]
    )
    assert rp.Executor  # (the suite ran on it: pilot.parsl.PilotExecutor is an rp.Executor)
