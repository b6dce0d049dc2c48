"""Pilots on a cluster of hosts: a SLURM whose slurmctld and login side live in one network
namespace and whose compute nodes each live in their own (`PILOT_SLURM_NETNS=1 tests/slurm.sh`).
The client runs in the login namespace, the pilot job on compute nodes; nothing is shared with
them but the file system, as on a cluster.  Another local user (`nobody`) who finds the pilot's
ports gets nowhere.  Root only (skipped with the reason otherwise); nothing here addresses a
namespace IP from the root namespace (the scenarios run inside the login namespace).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from pilot.pmgr.core import reaper
from tests import netns
from tests.test_slurm import _why_not as slurm_unavailable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tests", "slurm.sh")
SLURM = dict(PILOT_SLURM_NETNS="1", PILOT_SLURM_NODES="3", PILOT_SLURM_TAG="pc")
LOGIN = "pclogin"
SYSTEM_PYTHON = "/usr/bin/python3"  # what `nobody` runs (the venv's interpreter is root's)


def open_to_others(path: str) -> bool:
    """Every directory up to `path` lets other users through (o+x)."""
    path = os.path.abspath(path)
    while True:
        if not os.stat(path).st_mode & 0o001:
            return False
        if path == "/":
            return True
        path = os.path.dirname(path)


def _why_not() -> str | None:
    return netns.unavailable() or slurm_unavailable()  # tests/test_slurm.py says why not


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))


@pytest.fixture(scope="module")
def cluster():
    env = dict(os.environ, **SLURM)
    up = subprocess.run(
        ["bash", SCRIPT, "up"], capture_output=True, text=True, timeout=600, env=env
    )
    assert up.returncode == 0, up.stderr[-2000:]
    exports = dict(line[len("export ") :].split("=", 1) for line in up.stdout.splitlines())
    # a directory other users may enter: what keeps them out is the session's own 0700
    base = next((d for d in ("/var/tmp", tempfile.gettempdir(), ROOT) if open_to_others(d)), None)
    top = tempfile.mkdtemp(prefix="pilot-cluster-", dir=base)
    os.chmod(top, 0o755)
    try:
        yield {
            "top": top,
            # the shipped resource, nothing configured: the client listens on every address
            # of the login node, the job probes them (partition/client/probe.py)
            "resource": "slurm.localhost",
            "env": dict(
                os.environ,
                SLURM_CONF=exports["SLURM_CONF"],
                PILOT_SESSIONS_DIR=os.path.join(top, "sessions"),
                PYTHONPATH=ROOT,
            ),
        }
    finally:
        subprocess.run(["bash", SCRIPT, "down"], capture_output=True, timeout=180, env=env)
        shutil.rmtree(top, ignore_errors=True)
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert LOGIN not in left, f"namespaces left behind: {left}"


def code_for_others(top: str) -> str:
    """A copy, readable by other users, of what `nobody` runs: the project's packages, the
    intruder script and the few libraries they import (the checkout and the virtualenv may
    sit in directories only root may enter)."""
    import zmq

    code = os.path.join(top, "code")
    if os.path.isdir(code):
        return code
    site = os.path.dirname(os.path.dirname(zmq.__file__))
    shutil.copytree(os.path.join(ROOT, "pilot"), os.path.join(code, "pilot"))
    for name in ("pmgr", "agent", "partition", "configs"):  # (as installed: pilot.agent, ...)
        shutil.copytree(os.path.join(ROOT, name), os.path.join(code, "pilot", name))
    for name in ("zmq", "pyzmq.libs", "yaml", "_yaml", "transitions"):
        if os.path.exists(os.path.join(site, name)):
            shutil.copytree(os.path.join(site, name), os.path.join(code, name))
    shutil.copy(os.path.join(ROOT, "tests", "scenarios", "intruder.py"), code)
    subprocess.run(["chmod", "-R", "a+rX", code], check=True)
    return code


def in_login(argv: list[str]) -> list[str]:
    return ["nsenter", f"--net=/run/netns/{LOGIN}", *argv]


def client(cluster, *args: str, timeout: float = 240, env: dict | None = None) -> dict:
    out = subprocess.run(
        in_login([sys.executable, "-m", "tests.scenarios.cluster_client", *args]),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**cluster["env"], **(env or {})},
    )
    assert out.returncode == 0, out.stderr[-3000:] + logs(cluster)
    return json.loads(out.stdout.strip().splitlines()[-1])


def logs(cluster, lines: int = 30) -> str:
    """The ends of the pilots' logs, for a failure's message."""
    import glob

    out = []
    pattern = os.path.join(cluster["env"]["PILOT_SESSIONS_DIR"], "*", "pilot.*", "**", "*.log")
    for path in sorted(glob.glob(pattern, recursive=True)):
        with open(path, errors="replace") as f:
            out.append(f"\n--- {path}\n" + "".join(f.readlines()[-lines:]))
    return "".join(out)


def job_gone(cluster, job: str, within: float = 30) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        q = subprocess.run(
            in_login(["squeue", "-h", "-j", job, "-t", "PD,R,CG", "-o", "%i"]),
            capture_output=True,
            text=True,
            timeout=20,
            env=cluster["env"],
        )
        if not q.stdout.strip():
            return True
        time.sleep(0.5)
    return False


def no_processes_left(session: str, within: float = 20) -> list[int]:
    """The session's processes on every node (one pid namespace: /proc sees them all)."""
    deadline = time.monotonic() + within
    while (left := reaper.session_processes(session)) and time.monotonic() < deadline:
        time.sleep(0.3)
    if left:
        reaper.kill_session_processes(session)
    return left


def test_the_client_on_the_login_node_runs_a_pilot_on_compute_nodes(cluster):
    r = client(cluster, "run", cluster["resource"])
    assert r["parts"] == [["ACTIVE", None], ["ACTIVE", None]]
    # each partition holds one compute node; units print the host they ran on
    states = {s for s, _, _ in r["units"]}
    assert states == {"DONE"}, r["units"]
    first, second = {h for _, h, _ in r["units"][:2]}, {h for _, h, _ in r["units"][2:]}
    assert len(first) == len(second) == 1 and first != second
    assert first | second <= {"host=node1", "host=node2", "host=node3"}
    assert all(h == f"host={node}" for _, h, node in r["units"])
    # the bootstrap ran on a compute node and listens there; output came back over the link
    assert r["control"]["host"] in ("node1", "node2", "node3")
    assert r["control"]["endpoint"].startswith("tcp://10.214.1.1")
    hosts_said = [t for _, t in r["forwarded"] if t.startswith("host=node")]
    assert len(hosts_said) == 6 and len(r["forwarded"]) == 7  # and the staged unit's greeting
    state, reason, stdout, where = r["staged"]
    assert state == "DONE", reason
    assert stdout == "hello from the login node\n" and where.strip() in ("node1", "node2", "node3")
    code, listing, err = r["cli"]
    assert code == 0, err
    assert listing.count("ACTIVE") == 2, listing
    rc = r["reconfig"]
    assert rc["new"] == ["ACTIVE", None]
    assert [s for _, s in rc["parts"]] == ["CANCELED", "ACTIVE", "ACTIVE"]
    assert {s for s, _, _ in rc["units"]} == {"DONE"}
    assert r["cancel"][:2] == ["CANCELED", "canceled by the user"]
    assert job_gone(cluster, r["job"]), "the SLURM job outlived the cancel"
    assert no_processes_left(r["session"]) == []


MPI_HELLO = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int rank, size, sum = 0;
    const char *node = getenv("SLURMD_NODENAME");
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d of %d on %s sum %d\n", rank, size, node ? node : "?", sum);
    MPI_Finalize();
    return 0;
}
"""


MPICC = "mpicc.openmpi"  # (Open MPI's, whichever MPI `mpicc` names: srun --mpi=pmix starts it)


@pytest.mark.skipif(shutil.which(MPICC) is None, reason="no mpicc.openmpi (tests/slurm.sh install)")
def test_parsl_mpi_apps_run_a_real_mpi_program_on_the_compute_nodes(cluster):
    """Parsl MPI apps as Parsl writes them (`$PARSL_MPI_PREFIX` with mpi_launcher="srun"):
    a real MPI program's ranks meet (an allreduce) on the node the pilot placed the app on;
    an app of num_nodes=2 runs once, its step over both nodes."""
    src = os.path.join(cluster["top"], "mpi_hello.c")
    binary = os.path.join(cluster["top"], "mpi_hello")
    with open(src, "w") as f:
        f.write(MPI_HELLO)
    cc = subprocess.run([MPICC, "-o", binary, src], capture_output=True, text=True, timeout=120)
    assert cc.returncode == 0, cc.stderr
    r = client(cluster, "parsl_mpi", cluster["resource"], env={"PILOT_TEST_MPI_HELLO": binary})
    apps = r["apps"]
    assert [a["code"] for a in apps] == [0, 0, 0, 0, 0], apps
    for a in apps[:2]:  # two ranks, one node, each rank saw the other's (0 + 1)
        nodes = {line.split()[5] for line in a["lines"]}
        assert len(nodes) == 1 and nodes <= {"node1", "node2", "node3"}, a
        node = nodes.pop()
        assert sorted(a["lines"]) == [f"rank {i} of 2 on {node} sum 1" for i in (0, 1)], a
    for a in apps[2:4]:
        assert len(a["lines"]) == 1 and a["lines"][0].startswith("rank 0 of 1 on node"), a
    # num_nodes=2: run once, its srun step over both nodes of the pilot, a task on each (its
    # ranks' PMIx across nodes fails in this cluster of namespaces: a shell runs there)
    ranks = sorted(line.split() for line in apps[4]["lines"])
    assert [(r[1], r[3]) for r in ranks] == [("0", "2"), ("1", "2")], apps[4]
    assert len({r[5] for r in ranks}) == 2, apps[4]
    assert job_gone(cluster, r["job"]), "the SLURM job outlived the executor's shutdown"
    assert no_processes_left(r["session"]) == []


def test_runtime_expiry_ends_the_pilot_on_its_nodes(cluster):
    r = client(cluster, "expire", cluster["resource"])
    assert r["pilot"][0] == "DONE" and "runtime of 0.1 min expired" in r["pilot"][1], r
    assert r["unit"][0] == "CANCELED", r
    assert job_gone(cluster, r["job"])
    assert no_processes_left(r["session"]) == []


def test_a_pilot_grows_by_a_second_job_on_other_hosts_and_gives_it_back(cluster):
    r = client(cluster, "grow", cluster["resource"], timeout=400)
    assert r["first"] == ["ACTIVE", None], r
    code, said, err = r["cli"]
    assert code == 0, err
    assert json.loads(said)["reconfig"]["started"][0]["state"] == "PENDING", said
    uid, state, reason, nodes = r["new"]
    assert state == "ACTIVE", reason
    first_host = {h for _, h, _ in r["units"][4:]}
    grown_hosts = {h for _, h, _ in r["units"][:4]}
    assert {s for s, _, _ in r["units"]} == {"DONE"}, r["units"]
    assert len(first_host) == 1 and len(grown_hosts) == 2 and not first_host & grown_hosts
    assert grown_hosts == {f"host={n}" for n in nodes}
    first_job, grown = r["jobs"][0], r["jobs"][1]
    assert grown["state"] == "joined" and grown["id"] != first_job["id"] == str(r["job"])
    assert sorted(grown["names"]) == sorted(nodes)
    assert r["released"]["state"] == "released", r["released"]
    assert job_gone(cluster, grown["id"]), "the second SLURM job outlived its release"
    big_state, big_reason = r["big"]
    assert big_state == "FAILED" and "batch submission failed" in big_reason, big_reason
    assert r["after"][:2] == ["ACTIVE", "ACTIVE"], r["after"]
    assert r["more"][0][0] == "DONE"
    assert r["cancel"][0] == "CANCELED"
    assert job_gone(cluster, str(r["job"]))
    for j in r["jobs_after"][1:]:
        if j.get("id"):
            assert job_gone(cluster, j["id"]), j
    assert no_processes_left(r["session"]) == []


def test_a_new_client_takes_over_and_another_user_gets_nowhere(cluster, tmp_path):
    first = subprocess.Popen(
        in_login(
            [sys.executable, "-m", "tests.scenarios.cluster_client", "start", cluster["resource"]]
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cluster["env"],
        start_new_session=True,
    )
    try:
        line = first.stdout.readline()  # the scenario's deadlines bound this
        assert line, first.stderr.read()[-3000:] if first.poll() is not None else "no output"
        started = json.loads(line)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the client dies without a word
        first.wait(timeout=30)
    # `nobody`, on the login node, knows the ports and the server's public key (the client's
    # pilot link died with it; tests/test_security.py knocks on a live one)
    marker = os.path.join(cluster["top"], "intruder-ran-a-command")
    targets = os.path.join(cluster["top"], "targets.json")
    with open(targets, "w") as f:
        json.dump(dict(started, marker=marker), f)
    os.chmod(targets, 0o644)
    for need in (SYSTEM_PYTHON, cluster["top"]):
        if not (os.path.exists(need) and open_to_others(need)):
            pytest.skip(f"the other user (nobody) cannot reach {need}")
    code = code_for_others(cluster["top"])
    as_nobody = ["runuser", "-u", "nobody", "--", "env", f"PYTHONPATH={code}"]
    intruder = subprocess.run(
        in_login([*as_nobody, SYSTEM_PYTHON, os.path.join(code, "intruder.py"), targets]),
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert intruder.returncode == 0, intruder.stderr[-2000:]
    seen = json.loads(intruder.stdout.strip().splitlines()[-1])
    assert seen["uid"] != 0
    assert len(seen["reached"]) == 1 + len(started["daemons"]), "the ports must be reachable"
    assert seen["answered"] == [], "a peer without the session's keys got an answer"
    assert seen["readable"] == [], "another user read the session's files"
    assert not os.path.exists(marker), "a node daemon ran another user's command"
    cli = subprocess.run(
        in_login(
            [
                *as_nobody,
                f"PILOT_SESSIONS_DIR={cluster['env']['PILOT_SESSIONS_DIR']}",
                SYSTEM_PYTHON,
                "-m",
                "pilot",
                "partitions",
                started["pilot"],
            ]
        ),
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert cli.returncode != 0 and "permission denied" in cli.stderr, cli.stderr
    # a new client process on the login node attaches: nothing the intruder sent was acted on
    r = client(cluster, "attach", started["session"])
    assert r["pilot"] == ["ACTIVE", None]
    assert r["parts"] == [[p, "ACTIVE"] for p in started["parts"]]
    assert [u for u, _, _ in r["units"]] == started["units"]
    assert {s for _, s, _ in r["units"]} == {"DONE"}, r["units"]
    assert {h for _, _, h in r["units"]} <= {"node1", "node2", "node3"}
    assert {s for s, _, _ in r["more"]} == {"DONE"}
    assert r["cancel"][0] == "CANCELED"
    assert job_gone(cluster, started["job"])
    log = os.path.join(
        cluster["env"]["PILOT_SESSIONS_DIR"], started["session"], started["pilot"], "bootstrap.log"
    )
    with open(log) as f:
        assert "refused a peer with an unknown CURVE key" in f.read()
    assert no_processes_left(started["session"]) == []
