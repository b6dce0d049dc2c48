#!/usr/bin/env python3
# The scheduler is chosen by name; backfilling sends a unit to whichever pilot has room.
import sys

import pilot as rp

resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    pilots = pmgr.submit_pilots(
        [
            rp.ComputePilotDescription({"resource": resource, "cores": 1, "runtime": 10})
            for _ in range(2)
        ]
    )
    for scheduler in (rp.SCHEDULER_ROUND_ROBIN, rp.SCHEDULER_BACKFILLING):
        umgr = rp.UnitManager(session=session, scheduler=scheduler)
        umgr.add_pilots(pilots)
        units = umgr.submit_units(
            [rp.ComputeUnitDescription({"executable": "/bin/true"}) for _ in range(8)]
        )
        umgr.wait_units()
        used = {u.as_dict()["pilot"] for u in units}
        print(scheduler, [u.state for u in units], sorted(used))
        assert all(u.state == rp.DONE for u in units)
        pilots = pmgr.submit_pilots(
            [
                rp.ComputePilotDescription({"resource": resource, "cores": 1, "runtime": 10})
                for _ in range(2)
            ]
        )
    try:
        rp.UnitManager(session=session, scheduler="fastest")
    except ValueError as exc:
        print("refused:", exc)
        assert "accepted" in str(exc)
    else:
        raise AssertionError("an unknown scheduler was accepted")
finally:
    session.close()
print("OK scheduler_selection")
