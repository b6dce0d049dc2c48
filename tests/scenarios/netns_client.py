"""A client run inside a test-host namespace (tests/test_netns.py): one scenario, JSON out.

    python -m tests.scenarios.netns_client SCENARIO RESOURCE.yaml [NETWORK_CONFIG]

spread   two partitions (2 nodes + 1 node) over three hosts; multi-rank units on each
silent   one host never reports: the pilot goes on without it (or fails, per the config)
four     a pilot of four nodes (one partition over all of it), ACTIVE; a unit on every core of
         every node, each saying where it ran (tests/test_netns.py, tests/test_rp_sites.py:
         ssh, mpiexec);
         a third argument: what the units echo instead of $PILOT_NODE_NAME (shell words)
"""

from __future__ import annotations

import json
import os
import sys
import time

import pilot as rp


def read(pilot, name):
    try:
        with open(os.path.join(pilot.sandbox, name)) as f:
            return f.read()
    except OSError:
        return None


def spread(session, resource: str, network_config: str | None = None) -> dict:
    parts = [rp.ComputePartitionDescription(nodes=2), rp.ComputePartitionDescription(nodes=1)]
    pilot = rp.PilotManager(session).submit_pilots(
        rp.ComputePilotDescription(resource=resource, parts=parts, runtime=2)
    )
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    for part in pilot.partitions:
        part.wait(rp.ACTIVE, timeout=30)
    units = []
    for part, ranks in zip(pilot.partitions, (2, 1)):
        units += umgr.submit_units(
            [
                rp.ComputeUnitDescription(
                    executable="/bin/sh",
                    arguments=["-c", "echo $PILOT_NODE_NAME; cat /proc/net/dev | grep -c eth0"],
                    ranks=ranks,
                    partition=part.uid,
                )
                for _ in range(2)
            ]
        )
    umgr.wait_units(timeout=30)
    daemons = json.loads(read(pilot, "daemons.json") or "{}")
    return {
        "rogues": rogues(session, daemons["0"]["endpoint"]),
        "parts": [[p.state, p.reason] for p in pilot.partitions],
        "units": [
            {"state": u.state, "node": u.node, "reason": u.reason, "output": u.output}
            for u in units
        ],
        "daemons": daemons,
        "node0_log": read(pilot, "nodes/node.0.log"),
        "pilot": pilot,
    }


def rogues(session, endpoint: str) -> dict:
    """Peers without the session's keys try to run a unit on a daemon: nothing may run."""
    import zmq

    from pilot.wire.protocol import pack

    ctx = zmq.Context.instance()
    out = {}
    for kind in ("no keys", "other keys"):
        marker = os.path.join(session.dir, f"rogue-{kind.replace(' ', '-')}")
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if kind == "other keys":
            public, secret = zmq.curve_keypair()
            sock.curve_publickey, sock.curve_secretkey = public, secret
            with open(os.path.join(session.dir, "keys", "server.key")) as f:
                sock.curve_serverkey = f.read().split('public-key = "')[1].split('"')[0].encode()
        sock.connect(endpoint)
        body = {
            "uid": "rogue",
            "rank": 0,
            "argv": ["/bin/touch", marker],
            "env": {},
            "gpu_var": None,
            "sandbox": session.dir,
            "cpus": [],
        }
        try:
            sock.send_multipart([b"exec", pack({"env": {}, "ranks": [body]})], zmq.NOBLOCK)
        except zmq.Again:
            pass  # no connection completed: refused before a byte of it was sent
        time.sleep(1.5)
        out[kind] = os.path.exists(marker)
        sock.close()
    return out


def silent(session, resource: str, network_config: str | None = None) -> dict:
    t0 = time.monotonic()
    pilot = rp.PilotManager(session).submit_pilots(
        rp.ComputePilotDescription(
            resource=resource,
            nodes=3,
            parts=[rp.ComputePartitionDescription(nodes=2)],
            runtime=2,
            network_config=network_config,
        )
    )
    state = pilot.wait([rp.ACTIVE, rp.FAILED, rp.CANCELED, rp.DONE], timeout=60)
    waited = time.monotonic() - t0
    out = {"state": state, "waited": waited, "reason": pilot.reason}
    if state == rp.ACTIVE:
        part = pilot.partitions[0]
        out["part"] = part.wait(rp.ACTIVE, timeout=30)
        umgr = rp.UnitManager(session)
        umgr.add_pilots(pilot)
        u = umgr.submit_units(
            rp.ComputeUnitDescription(executable="/bin/true", ranks=2, partition=part.uid)
        )
        out["unit"] = [u.wait(timeout=30), u.node]
        (big,) = pilot.reconfig(start=[rp.ComputePartitionDescription(nodes=2)])
        out["big"] = [big.wait(timeout=30), big.reason]
        out["free"] = pilot.free
        out["nodes"] = pilot.nodes
    out["network"] = json.loads(read(pilot, "network.json") or "{}")
    out["pilot"] = pilot
    return out


def four(session, resource: str, say: str = "$PILOT_NODE_NAME") -> dict:
    pilot = rp.PilotManager(session).submit_pilots(
        rp.ComputePilotDescription(resource=resource, nodes=4, runtime=2)
    )
    state = pilot.wait([rp.ACTIVE, rp.FAILED, rp.CANCELED, rp.DONE], timeout=60)
    out = {"state": state, "reason": pilot.reason, "pilot": pilot, "units": []}
    if state != rp.ACTIVE:
        return out
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    # (the Unit objects held here: a UnitList iterated after its units were released reads
    # them back from the store, which a null:// session has not: they would be left out)
    units = list(
        umgr.submit_units(
            [
                rp.ComputeUnitDescription(
                    executable="/bin/sh", arguments=["-c", f"echo {say}; sleep 0.5"]
                )
                for _ in range(8)
            ]
        )
    )
    umgr.wait_units(timeout=60)
    out["units"] = [{"state": u.state, "node": u.node, "out": u.stdout.strip()} for u in units]
    out["nodes"] = pilot.nodes
    return out


def main() -> int:
    scenario, resource = sys.argv[1], sys.argv[2]
    session = rp.Session(database_url="null://")
    try:
        result = {"spread": spread, "silent": silent, "four": four}[scenario](
            session, resource, *sys.argv[3:]
        )
        pilot = result.pop("pilot")
    finally:
        session.close()
    result["session"] = session.uid
    result["final"] = [pilot.state, pilot.reason]
    result["log"] = read(pilot, "bootstrap.log")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
