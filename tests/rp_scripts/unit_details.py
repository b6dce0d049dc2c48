#!/usr/bin/env python3
# RP's unit description fields: processes and threads, a named sandbox and output files,
# metadata, tag, pilot pinning, cleanup; descriptions from dicts and item access.
import os
import sys

import pilot as rp

resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    pilot = pmgr.submit_pilots(
        rp.ComputePilotDescription({"resource": resource, "cores": 4, "runtime": 10})
    )
    umgr = rp.UnitManager(session=session)
    umgr.add_pilots(pilot)
    first = umgr.submit_units(
        rp.ComputeUnitDescription(
            {
                "name": "first",
                "executable": "/bin/sh",
                "arguments": ["-c", "echo $OMP_NUM_THREADS $PILOT_RANKS > threads; echo hello"],
                "cpu_processes": 2,
                "cpu_threads": 2,
                "cpu_process_type": rp.POSIX,
                "cpu_thread_type": rp.OpenMP,
                "sandbox": "shared_dir",
                "stdout": "first.out",
                "metadata": {"step": 1},
                "pilot": pilot.uid,
            }
        )
    )
    cud = rp.ComputeUnitDescription()
    cud["executable"] = "/bin/cat"
    cud["arguments"] = ["threads"]
    cud.tag = first.uid  # where the first one ran
    cud.sandbox = "shared_dir"
    second = umgr.submit_units(cud)
    gone = umgr.submit_units(
        rp.ComputeUnitDescription(
            {"executable": "/bin/echo", "arguments": ["bye"], "cleanup": True}
        )
    )
    umgr.wait_units()
    d = first.as_dict()
    print(d["state"], d["unit_sandbox"], d["metadata"], repr(first.stdout), repr(second.stdout))
    assert first.state == second.state == gone.state == rp.DONE
    assert d["unit_sandbox"].endswith("shared_dir") and d["metadata"] == {"step": 1}
    assert first.stdout == "hello\nhello\n"  # two processes, as cpu_processes=2 says
    assert os.path.exists(os.path.join(d["unit_sandbox"], "first.out"))
    assert second.stdout.split()[:2] == ["2", "2"]  # OMP_NUM_THREADS = cpu_threads, 2 ranks
    assert second.as_dict()["partition"] == d["partition"]
    assert gone.stdout == "bye\n" and not os.path.exists(gone.as_dict()["unit_sandbox"])
    try:
        umgr.submit_units(rp.ComputeUnitDescription())
    except ValueError as exc:
        print("refused:", exc)
        assert "executable is required" in str(exc)
    else:
        raise AssertionError("a unit without an executable was accepted")
finally:
    session.close(cleanup=True)
assert not os.path.exists(pilot.sandbox)
print("OK unit_details")
