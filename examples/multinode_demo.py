"""Multi-node pilot: node daemons, partitions spanning nodes, forwarded output, a reconfig.

python examples/multinode_demo.py [RESOURCE]     (default local.nodes4: four logical nodes
                                                  on this machine; slurm.localhost for the
                                                  SLURM that tests/slurm.sh starts)
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pilot as rp  # noqa: E402

CPD = rp.ComputePartitionDescription


def main(resource: str) -> int:
    with rp.Session() as session:
        pilot = rp.PilotManager(session).submit_pilots(
            rp.ComputePilotDescription(
                resource=resource, parts=[CPD(nodes=2), CPD(nodes=2)], runtime=5
            )
        )
        umgr = rp.UnitManager(session)
        umgr.add_pilots(pilot)
        umgr.register_output_callback(
            lambda unit, node, rank, stream, text: print(f"  [{unit.uid}@{node}] {text}", end="")
        )
        for part in pilot.partitions:
            part.wait(rp.ACTIVE, timeout=60)
        with open(os.path.join(pilot.sandbox, "network.json")) as f:
            net = json.load(f)
        print(f"{pilot.uid} {pilot.state}: nodes", [n["name"] for n in net.values()])
        for part in pilot.partitions:
            print(f"  {part.uid} {part.state} on", [n["name"] for n in part.resources["nodes"]])
        print("units, one rank per node of their partition:")
        units = []
        for part in pilot.partitions:
            units += umgr.submit_units(
                [
                    rp.ComputeUnitDescription(
                        executable="/bin/sh",
                        arguments=[
                            "-c",
                            'echo "rank $PILOT_RANK on $(hostname) ($PILOT_NODE_NAME)"',
                        ],
                        ranks=2,
                        partition=part.uid,
                    )
                ]
            )
        umgr.wait_units(timeout=60)
        print("  states:", [u.state for u in units])
        first, second = pilot.partitions
        (fill,) = pilot.reconfig(stop=second.uid, start=[CPD(size=rp.FILL)])
        fill.wait(rp.ACTIVE, timeout=60)
        print(
            f"reconfig: {second.uid} {second.state}, {fill.uid} {fill.state} on",
            [n["name"] for n in fill.resources["nodes"]],
        )
        pilot.cancel(timeout=60)
        print(f"{pilot.uid} {pilot.state}; bootstrap log: {pilot.sandbox}/bootstrap.log")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "local.nodes4"))
