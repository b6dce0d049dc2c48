"""rp.MPI units: one launcher process (the resource's mpi_command) over the unit's ranks.
SLURM's srun is tested in tests/test_slurm.py; here Open MPI's mpirun on a local pilot."""

from __future__ import annotations

import shutil

import pytest

import pilot as rp
from tests.conftest import active_pilot

CUD = rp.ComputeUnitDescription


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun (apt install openmpi-bin)")
def test_mpirun_starts_the_ranks_of_an_mpi_unit(session):
    pilot, umgr = active_pilot(session, parts=((2,),))
    mpi, posix = umgr.submit_units(
        [
            CUD(
                executable="/bin/sh",
                arguments=["-c", "echo rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE"],
                cpu_processes=2,
                cpu_process_type=process_type,
            )
            for process_type in (rp.MPI, rp.POSIX)
        ]
    )
    assert umgr.wait_units(timeout=60) == [rp.DONE, rp.DONE], (mpi.reason, mpi.stderr)
    assert sorted(mpi.stdout.splitlines()) == ["rank 0 of 2", "rank 1 of 2"]
    assert posix.stdout.splitlines() == ["rank of", "rank of"]  # two plain processes


def test_an_mpi_unit_without_a_launcher_fails_saying_so(session, tmp_path):
    cfg = tmp_path / "nompi.yaml"
    cfg.write_text("batch_system: local\ncores_per_node: 2\nmpi_command: null\n")
    pilot = rp.PilotManager(session).submit_pilots(
        rp.ComputePilotDescription(resource=str(cfg), cores=2)
    )
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    unit = umgr.submit_units(CUD(executable="/bin/true", cpu_process_type=rp.MPI))
    assert unit.wait(timeout=60) == rp.FAILED
    assert "sets no mpi_command" in unit.reason
