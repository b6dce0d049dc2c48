#!/usr/bin/env python3
# Some units fail: a missing executable (exit 127, the shell's message in stderr), a false.
import sys

import pilot as rp

resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    pilot = pmgr.submit_pilots(
        rp.ComputePilotDescription({"resource": resource, "cores": 2, "runtime": 10})
    )
    umgr = rp.UnitManager(session=session)
    umgr.add_pilots(pilot)
    cuds = []
    for i in range(12):
        cud = rp.ComputeUnitDescription()
        if i % 3 == 0:
            cud.executable = "/bin/data"  # does not exist
        elif i % 3 == 1:
            cud.executable = "/bin/false"
        else:
            cud.executable = "/bin/date"
        cuds.append(cud)
    units = umgr.submit_units(cuds)
    umgr.wait_units()
    for unit in units:
        print(
            f"  * {unit.uid}: {unit.state}, exit: {unit.exit_code}, err: {unit.stderr.strip()[:60]}"
        )
    for i, unit in enumerate(units):
        if i % 3 == 0:
            assert unit.state == rp.FAILED and unit.exit_code == 127, unit
            assert "not found" in unit.stderr, unit.stderr
        elif i % 3 == 1:
            assert unit.state == rp.FAILED and unit.exit_code == 1
        else:
            assert unit.state == rp.DONE and unit.exit_code == 0
finally:
    session.close()
print("OK failing_units")
