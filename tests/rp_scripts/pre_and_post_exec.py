#!/usr/bin/env python3
# pre_exec lines prepare the unit's shell, post_exec lines run after it; the exit code is the
# executable's.
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
    for i in range(4):
        cud = rp.ComputeUnitDescription()
        cud.pre_exec = ["export TEST=jabberwocky", f"export N={i}"]
        cud.executable = "/bin/sh"
        cud.arguments = ["-c", "echo $TEST $N; exit $N"]
        cud.post_exec = [f"echo post {i}"]
        cuds.append(cud)
    units = umgr.submit_units(cuds)
    umgr.wait_units()
    for i, unit in enumerate(units):
        print(unit.uid, unit.state, unit.exit_code, repr(unit.stdout))
        assert unit.stdout == f"jabberwocky {i}\npost {i}\n", unit.stdout
        assert unit.exit_code == i
        assert unit.state == (rp.DONE if i == 0 else rp.FAILED)
finally:
    session.close()
print("OK pre_and_post_exec")
