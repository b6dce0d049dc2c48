#!/usr/bin/env python3
# A pilot from a dict of RP's keys, units described field by field, results from as_dict().
import os
import sys

import pilot as rp

resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
print(f"Getting Started (RP version {rp.version})")
session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    pd_init = {
        "resource": resource,
        "runtime": 15,
        "exit_on_error": True,
        "project": None,
        "queue": None,
        "access_schema": "local",
        "cores": 2,
    }
    pdesc = rp.ComputePilotDescription(pd_init)
    pilot = pmgr.submit_pilots(pdesc)
    umgr = rp.UnitManager(session=session)
    umgr.add_pilots(pilot)
    cuds = []
    for _i in range(16):
        cud = rp.ComputeUnitDescription()
        cud.executable = "/bin/date"
        cuds.append(cud)
    units = umgr.submit_units(cuds)
    umgr.wait_units()
    for unit in units:
        print(
            f"  * {unit.uid}: {unit.state[:4]}, exit: {unit.exit_code}, "
            f"out: {unit.stdout.strip()[:35]}"
        )
    unit_dict = units[0].as_dict()
    print("unit workdir : {}".format(unit_dict["unit_sandbox"]))
    print("pilot id     : {}".format(unit_dict["pilot"]))
    print("exit code    : {}".format(unit_dict["exit_code"]))
    assert [u.state for u in units] == [rp.DONE] * 16
    assert unit_dict["pilot"] == pilot.uid and unit_dict["exit_code"] == 0
    assert os.path.isdir(unit_dict["unit_sandbox"])
    assert pilot.as_dict()["uid"] == pilot.uid and pilot.log
finally:
    session.close(download=True)
print("OK getting_started")
