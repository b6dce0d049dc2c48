#!/usr/bin/env python3
# Callbacks as RP calls them: cb(obj, state) and cb(obj, state, cb_data); a unit's final-state
# callbacks have run when wait_units returns; pilot callbacks go to the PilotManager.
import sys
import threading

import pilot as rp

resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
pilot_states, unit_states, with_data = [], {}, []
lock = threading.Lock()


def pilot_state_cb(pilot, state):
    pilot_states.append(state)


def unit_state_cb(unit, state):
    with lock:
        unit_states.setdefault(unit.uid, []).append(state)


def unit_state_cb_data(unit, state, data):
    if state in rp.FINAL:
        with_data.append((unit.uid, data))


session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    pmgr.register_callback(pilot_state_cb)
    pilot = pmgr.submit_pilots(
        rp.ComputePilotDescription({"resource": resource, "cores": 2, "runtime": 10})
    )
    umgr = rp.UnitManager(session=session)
    umgr.register_callback(unit_state_cb, metric=rp.UNIT_STATE)
    umgr.register_callback(unit_state_cb_data, cb_data="my data")
    umgr.add_pilots(pilot)
    units = umgr.submit_units(
        [rp.ComputeUnitDescription({"executable": "/bin/true"}) for _ in range(20)]
    )
    umgr.wait_units()
    # every unit's final callback has run by now (no sleep, no polling)
    assert len(with_data) == 20 and {d for _, d in with_data} == {"my data"}
    for u in units:
        assert unit_states[u.uid][0] == rp.NEW and unit_states[u.uid][-1] == rp.DONE, unit_states[
            u.uid
        ]
    pilot.cancel()
    pilot.wait(rp.FINAL, timeout=30)
finally:
    session.close()
print("pilot states:", pilot_states)
assert pilot_states[-1] == rp.CANCELED and rp.PMGR_ACTIVE in pilot_states
print("OK callbacks")
