#!/usr/bin/env python3
# Units canceled while queued or running end CANCELED; the others run to DONE.
import sys
import time

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
    for i in range(6):
        cud = rp.ComputeUnitDescription()
        cud.executable = "/bin/sleep"
        cud.arguments = ["30" if i < 4 else "0"]
        cuds.append(cud)
    units = umgr.submit_units(cuds)
    units[0].wait(rp.AGENT_EXECUTING, timeout=30)
    umgr.cancel_units([u.uid for u in units[:4]])
    t0 = time.time()
    umgr.wait_units(timeout=60)
    print([u.state for u in units], f"{time.time() - t0:.1f} s")
    assert [u.state for u in units] == [rp.CANCELED] * 4 + [rp.DONE] * 2
    assert time.time() - t0 < 20  # the sleepers were killed, not waited for
finally:
    session.close()
print("OK cancelation")
