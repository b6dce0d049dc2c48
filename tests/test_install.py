"""What installing the project adds to a user's Python: one import name, `pilot`.  A workflow in
a directory with packages of its own named like the project's folders (agent, configs,
partition, pmgr: common in science and ML code) runs as anywhere else."""

from __future__ import annotations

import subprocess
import sys
import textwrap

WORKFLOW = textwrap.dedent(
    """
    import pilot as rp

    pd = rp.ComputePilotDescription(
        resource="local.simulated", runtime=2,
        parts=[rp.ComputePartitionDescription(cores=2)],
    )
    with rp.Session() as session:
        pilot = rp.PilotManager(session).submit_pilots(pd)
        umgr = rp.UnitManager(session)
        umgr.add_pilots(pilot)
        units = umgr.submit_units(
            [rp.ComputeUnitDescription(executable="/bin/echo", arguments=[str(i)])
             for i in range(4)]
        )
        umgr.wait_units(timeout=60)
        pilot.reconfig(stop=pilot.partitions[0].uid,
                       start=[rp.ComputePartitionDescription(cores=1)])
        print(sorted(u.stdout.strip() for u in units), {u.state for u in units})
    """
)


def test_a_workflow_beside_its_own_agent_configs_partition_and_pmgr(tmp_path, sessions_dir):
    for name in ("agent", "configs", "partition", "pmgr"):
        pkg = tmp_path / name
        pkg.mkdir()
        (pkg / "__init__.py").write_text(f"raise ImportError('the workflow\\'s own {name}')\n")
    (tmp_path / "workflow.py").write_text(WORKFLOW)
    out = subprocess.run(
        [sys.executable, "workflow.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("['0', '1', '2', '3'] {'DONE'}"), out.stdout


def test_the_pilot_processes_import_nothing_above_what_they_need():
    """`import pilot.agent...` (what a pilot's processes do) loads no part of the client API:
    pilot/__init__.py loads the user API on first use."""
    code = (
        "import sys, pilot.agent.agent\n"
        "print(sorted(m for m in sys.modules if m.startswith(('pilot.pmgr', 'pilot.partition'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
