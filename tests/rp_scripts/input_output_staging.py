#!/usr/bin/env python3
# Data staging as RP writes it: strings and dicts, TRANSFER between the client and the units,
# COPY / LINK on the pilot's file system, TARBALL of a directory, output back to the client,
# and a failing directive that fails its unit with the directive in the reason.
import os
import sys

import pilot as rp

resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
with open("input.dat", "w") as f:
    f.write("x" * 1000 + "\n")
os.makedirs("inputs", exist_ok=True)
for i in range(3):
    with open(f"inputs/part{i}.txt", "w") as f:
        f.write(f"part {i}\n")

session = rp.Session()
try:
    pmgr = rp.PilotManager(session=session)
    pilot = pmgr.submit_pilots(
        rp.ComputePilotDescription({"resource": resource, "cores": 2, "runtime": 10})
    )
    umgr = rp.UnitManager(session=session)
    umgr.add_pilots(pilot)

    # a shared input, put once into the pilot sandbox, then copied and linked by each unit
    shared = rp.ComputeUnitDescription()
    shared.executable = "/bin/true"
    shared.input_staging = [
        {
            "source": "client:///input.dat",
            "target": "pilot:///shared.dat",
            "action": rp.TRANSFER,
        }
    ]
    umgr.submit_units(shared)
    umgr.wait_units()

    cuds = []
    for i in range(4):
        cud = rp.ComputeUnitDescription()
        cud.executable = "/bin/sh"
        cud.arguments = [
            "-c",
            "wc -c < input.dat > output.dat; cat copied.dat linked.dat | wc -c >> output.dat",
        ]
        cud.input_staging = [
            "input.dat",
            {"source": "pilot:///shared.dat", "target": "unit:///copied.dat", "action": rp.COPY},
            {"source": "pilot:///shared.dat", "target": "linked.dat", "action": rp.LINK},
        ]
        cud.output_staging = [f"output.dat > result.{i}.dat"]
        cuds.append(cud)
    tar = rp.ComputeUnitDescription()
    tar.executable = "/bin/sh"
    tar.arguments = ["-c", "'cat inputs/part*.txt > collected/all.txt'"]  # RP: quote globs
    tar.pre_exec = ["mkdir -p collected"]
    tar.input_staging = [{"source": "inputs", "target": "unit:///", "action": rp.TARBALL}]
    tar.output_staging = [
        {
            "source": "unit:///collected",
            "target": "client:///back/",  # a directory to put it in: back/collected
            "action": rp.TARBALL,
        }
    ]
    missing = rp.ComputeUnitDescription()
    missing.executable = "/bin/true"
    missing.input_staging = ["no-such-input.dat"]
    units = umgr.submit_units(cuds + [tar, missing])
    umgr.wait_units()
    for u in units:
        print(u.uid, u.state, u.reason or "")
    assert [u.state for u in units[:5]] == [rp.DONE] * 5
    for i in range(4):
        with open(f"result.{i}.dat") as f:
            assert f.read().split() == ["1001", "2002"], i
    with open("back/collected/all.txt") as f:
        assert f.read() == "part 0\npart 1\npart 2\n"
    assert units[5].state == rp.FAILED and "no-such-input.dat" in units[5].reason, units[5].reason
    assert "input staging" in units[5].reason
finally:
    session.close()
print("OK input_output_staging")
