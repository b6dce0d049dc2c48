#!/usr/bin/env python3
# Two pilots, the default (round robin) scheduler: units spread evenly, in submit order.
import sys
from collections import Counter

import pilot as rp

resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    pdescs = [
        rp.ComputePilotDescription({"resource": resource, "cores": 1, "runtime": 10})
        for _ in range(2)
    ]
    pilots = pmgr.submit_pilots(pdescs)
    umgr = rp.UnitManager(session=session)
    umgr.add_pilots(pilots)
    cuds = []
    for _i in range(10):
        cud = rp.ComputeUnitDescription()
        cud.executable = "/bin/echo"
        cud.arguments = ["$RP_PILOT_ID"]
        cuds.append(cud)
    units = umgr.submit_units(cuds)
    umgr.wait_units()
    seen = Counter(u.as_dict()["pilot"] for u in units)
    print("units per pilot:", dict(seen))
    assert all(u.state == rp.DONE for u in units)
    assert seen == {pilots[0].uid: 5, pilots[1].uid: 5}, seen
    assert [u.stdout.strip() for u in units] == [pilots[i % 2].uid for i in range(10)]
finally:
    session.close()
print("OK multiple_pilots")
