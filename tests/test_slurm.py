"""Pilots as SLURM jobs through PSI/J, against a real SLURM of four logical nodes started by
tests/slurm.sh (root only; skipped with the reason otherwise)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
import yaml

import pilot as rp

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "slurm.sh")
CONFIGS = os.path.join(os.path.dirname(HERE), "configs")


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "a local SLURM needs root (tests/slurm.sh starts munged, slurmctld, slurmd)"
    if shutil.which("apt-get") is None and shutil.which("slurmctld") is None:
        return "no SLURM installed and no apt-get to install it"
    try:
        import psij  # noqa: F401
    except ImportError:
        return "psij-python is not installed (pip install -e '.[batch]')"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))


@pytest.fixture(scope="module")
def slurm():
    was_up = subprocess.run(["bash", SCRIPT, "status"], capture_output=True).returncode == 0
    up = subprocess.run(["bash", SCRIPT, "up"], capture_output=True, text=True, timeout=600)
    assert up.returncode == 0, up.stderr[-2000:]
    env = dict(line[len("export ") :].split("=", 1) for line in up.stdout.splitlines())
    # every node is this host: the pilot reaches its client on loopback, and the traffic of
    # these tests stays on 127.0.0.0/8 (a cluster of hosts, where the job probes the login
    # node's addresses with nothing configured, is tests/test_cluster.py's)
    mine = {"SLURM_CONF": env["SLURM_CONF"], "PILOT_CLIENT_ADDRESS": "127.0.0.1"}
    old = {key: os.environ.get(key) for key in mine}
    os.environ.update(mine)
    try:
        yield env
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if not was_up:
            subprocess.run(["bash", SCRIPT, "down"], capture_output=True, timeout=120)


def squeue(*args: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", *args], capture_output=True, text=True, timeout=20)
    return out.stdout.split()


def submit(session, parts, runtime=2, **kw):
    pd = rp.ComputePilotDescription(resource="slurm.localhost", parts=parts, runtime=runtime, **kw)
    return rp.PilotManager(session).submit_pilots(pd)


def test_four_node_pilot_runs_units_on_every_node(slurm, session):
    pilot = submit(
        session, [rp.ComputePartitionDescription(nodes=2), rp.ComputePartitionDescription(nodes=2)]
    )
    assert pilot.size["nodes"] == 4
    assert pilot.wait(rp.ACTIVE, timeout=60) == rp.ACTIVE, pilot.reason
    assert pilot.job.pid in squeue("-o", "%i")
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    units = []
    for part in pilot.partitions:
        assert part.wait(rp.ACTIVE, timeout=30) == rp.ACTIVE, part.reason
        units += umgr.submit_units(
            [
                rp.ComputeUnitDescription(executable="/bin/hostname", ranks=2, partition=part.uid)
                for _ in range(2)
            ]
        )
    umgr.wait_units(timeout=60)
    assert [u.state for u in units] == [rp.DONE] * 4, [u.reason for u in units]
    assert {n for u in units for n in u.node} == {"node1", "node2", "node3", "node4"}
    for u in units:  # the daemon of the node it names ran it: hostname is the node's
        assert sorted(t.strip() for _, _, s, t in u.output if s == "stdout") == sorted(u.node)
    pilot.cancel(timeout=60)
    assert pilot.state == rp.CANCELED
    with open(os.path.join(pilot.sandbox, "bootstrap.log")) as f:
        log = f.read()
    assert "daemon(s) by srun" in log and "down.nodes: 4 daemon(s) said bye" in log


def test_an_mpi_unit_is_one_srun_step_over_its_ranks(slurm, session):
    """rp.MPI: the resource's mpi_command (srun here) starts the ranks, one per node, inside
    the pilot's allocation; SLURM numbers them."""
    pilot = submit(session, [rp.ComputePartitionDescription(nodes=2)])
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    unit = umgr.submit_units(
        rp.ComputeUnitDescription(
            executable="/bin/sh",
            arguments=["-c", "echo $SLURM_PROCID of $SLURM_NTASKS on $(hostname)"],
            cpu_processes=2,
            cpu_threads=2,  # a whole node per rank
            cpu_process_type=rp.MPI,
        )
    )
    assert unit.wait(timeout=90) == rp.DONE, (unit.reason, unit.stderr)
    assert sorted(unit.stdout.splitlines()) == ["0 of 2 on node1", "1 of 2 on node2"]
    pilot.cancel(timeout=60)


def test_cancel_while_queued(slurm, session):
    hold = subprocess.run(
        ["sbatch", "--parsable", "-N4", "-o", "/dev/null", "--wrap", "sleep 300"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert hold.returncode == 0, hold.stderr
    holder = hold.stdout.strip().split(";")[0]
    try:
        pilot = submit(session, [rp.ComputePartitionDescription(nodes=1)])
        deadline = time.monotonic() + 30
        while pilot.job.batch_state != "QUEUED":
            assert time.monotonic() < deadline, pilot.job.batch_state
            time.sleep(0.2)
        assert pilot.state == rp.PENDING
        assert squeue("-j", pilot.job.pid, "-o", "%T") == ["PENDING"]
        pilot.cancel(timeout=30)
        assert pilot.state == rp.CANCELED
        assert rp.ACTIVE not in [s for s, _ in pilot.history]
        assert squeue("-j", pilot.job.pid, "-t", "PD,R", "-o", "%i") == []
    finally:
        subprocess.run(["scancel", holder], timeout=30)


def test_walltime_expiry_tears_down_and_ends_the_job(slurm, session):
    pilot = submit(session, [rp.ComputePartitionDescription(nodes=2)], runtime=0.1)
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    u = umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/sleep", arguments=["300"]))
    assert pilot.wait(timeout=60) == rp.DONE, pilot.reason
    assert "runtime" in pilot.reason
    assert u.wait(timeout=10) == rp.CANCELED and u.reason
    assert pilot.job.wait(timeout=30) == 0
    assert squeue("-j", pilot.job.pid, "-t", "PD,R,CG", "-o", "%i") == []


def test_a_job_sbatch_refuses_fails_the_pilot_with_its_error(slurm, session):
    pilot = submit(session, [rp.ComputePartitionDescription(nodes=1)], queue="nosuchqueue")
    assert pilot.wait(timeout=30) == rp.FAILED
    assert "batch submission failed" in pilot.reason and "partition" in pilot.reason.lower()


def test_a_job_that_dies_before_its_bootstrap_reports_fails_with_the_batch_error(
    slurm, session, tmp_path
):
    with open(os.path.join(CONFIGS, "slurm.yaml")) as f:
        cfg = yaml.safe_load(f)["localhost"]
    cfg["python"] = "/nonexistent/python3"
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(cfg))
    pd = rp.ComputePilotDescription(
        resource=str(path), parts=[rp.ComputePartitionDescription(nodes=1)], runtime=2
    )
    pilot = rp.PilotManager(session).submit_pilots(pd)
    assert pilot.wait(timeout=60) == rp.FAILED
    assert "SLURM job" in pilot.reason and "without saying bye" in pilot.reason, pilot.reason


def test_network_config_in_an_allocation_describes_every_node(slurm, tmp_path):
    from pilot.config import network

    out = tmp_path / "net.yaml"
    job = subprocess.run(
        [
            "sbatch",
            "--wait",
            "-N4",
            "-o",
            str(tmp_path / "job.out"),
            "--wrap",
            f"{sys.executable} -m pilot network-config --output {out}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(HERE),
        env=dict(os.environ, PYTHONPATH=os.path.dirname(HERE)),
    )
    assert job.returncode == 0, (job.stderr, (tmp_path / "job.out").read_text())
    nodes = network.load(str(out))
    assert [n["name"] for n in nodes.values()] == ["node1", "node2", "node3", "node4"]
    assert [n["is_primary"] for n in nodes.values()] == [True, False, False, False]
    assert all(n["state"] == "up" and n["num_cpus"] >= 1 for n in nodes.values())
