"""Property-based fuzzing (hypothesis) of what reaches a pilot: decoding, command bodies on the
control socket, and unit batches on the pilot link.  Whatever arrives, the answer is an error
or a result, never a dead component; afterwards the pilot still runs units."""

from __future__ import annotations

import json

import zmq
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

import pilot as rp
from pilot.partition.control import OPS
from pilot.wire.protocol import ProtocolError, pack, unpack
from tests.conftest import active_pilot

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
ARG_NAMES = ["stop", "start", "uids", "units", "reason", "client", "cores", "gpus", "size"]
# ops that would end the pilot or point its link away when they succeed are left out
SAFE_OPS = sorted(set(OPS) - {"cancel_pilot", "attach"})
commands = st.fixed_dictionaries(
    {
        "cid": st.none() | st.text(max_size=12) | json_values,
        "op": st.sampled_from(SAFE_OPS) | st.text(max_size=10),
        "args": st.dictionaries(st.sampled_from(ARG_NAMES), json_values, max_size=4) | json_values,
    }
)
record = st.dictionaries(
    st.sampled_from(["uid", "executable", "arguments", "environment", "cpus", "ranks", "x"]),
    json_values,
    max_size=6,
)
uids = st.lists(st.sampled_from(["unit.900001", "unit.900002", "x/y"]) | json_values, max_size=3)
bulk = st.fixed_dictionaries(  # (a bulk: units of one template, each with its own arguments)
    {"of": record | json_values, "uids": uids | json_values},
    optional={"arguments": st.lists(st.lists(json_values, max_size=2) | json_values, max_size=3)},
)
units = st.lists(record | bulk, max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_decoding_never_raises_anything_but_protocol_errors(data):
    try:
        unpack(data)
    except ProtocolError:
        pass


def test_fuzzed_messages_never_stop_a_pilot(session):
    pilot, umgr = active_pilot(session, parts=((1,), (1,)))
    ctx = zmq.Context.instance()

    def ask(body: bytes) -> dict:
        sock = ctx.socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, 5_000)
        session.keys.client(sock)
        try:
            sock.connect(pilot.control)
            sock.send(body)
            return json.loads(sock.recv())
        finally:
            sock.close()

    # no shrinking: a pilot a message killed stays dead, so the first failure is the report
    once = dict(
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        phases=(Phase.explicit, Phase.generate),
    )

    @settings(max_examples=200, **once)
    @given(commands)
    def control(body):
        assert pilot.state == rp.ACTIVE, pilot.reason  # a message before this one killed it
        args = body.get("args")
        if isinstance(args, dict) and args.get("stop") == rp.ALL:
            return
        reply = ask(pack(body))
        assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool), reply

    @settings(max_examples=100, **once)
    @given(units, st.sampled_from([0, 1]))
    def link(batch, which):
        assert all(p.state == rp.ACTIVE for p in pilot.partitions[:2]), pilot.partitions
        part = pilot.partitions[which]
        session.channel.send(pilot.uid, [b"units", part.uid.encode(), pack(batch)])

    control()
    link()
    assert pilot.state == rp.ACTIVE
    assert all(p.state == rp.ACTIVE for p in pilot.partitions[:2]), pilot.partitions
    after = umgr.submit_units([rp.ComputeUnitDescription(executable="/bin/true")] * 4)
    assert umgr.wait_units([u.uid for u in after], timeout=30) == [rp.DONE] * 4
    with open(f"{pilot.sandbox}/bootstrap.log") as f:
        assert "Traceback" not in f.read()
    for part in pilot.partitions[:2]:
        with open(f"{pilot.sandbox}/{part.uid}.agent.log") as f:
            assert "Traceback" not in f.read()
