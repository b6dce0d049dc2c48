#!/usr/bin/env python3
# A unit's environment, and RP's variables, expand in its arguments.
import sys

import pilot as rp

resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    pilot = pmgr.submit_pilots(
        rp.ComputePilotDescription({"resource": resource, "cores": 1, "runtime": 10})
    )
    umgr = rp.UnitManager(session=session)
    umgr.add_pilots(pilot)
    cud = rp.ComputeUnitDescription()
    cud.executable = "/bin/echo"
    cud.arguments = ["$TEST", "$RP_UNIT_ID", "${RP_PILOT_ID}", "$(echo nested)", "'$NOT'"]
    cud.environment = {"TEST": "jabberwocky"}
    unit = umgr.submit_units(cud)
    umgr.wait_units()
    print(unit.state, repr(unit.stdout))
    assert unit.state == rp.DONE
    assert unit.stdout.split() == ["jabberwocky", unit.uid, pilot.uid, "nested", "$NOT"], (
        unit.stdout
    )
finally:
    session.close()
print("OK unit_environment")
