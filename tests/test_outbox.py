"""The bootstrap's outbox (partition/client/outbox.py): outcomes kept until the client acknowledges
them, and a lost agent's start journal narrowed to the units whose outcome the client may not
have, without holding the journal in memory."""

from __future__ import annotations

import io

from pilot.partition.client.outbox import Outbox
from pilot.wire import updates


def _moves(*moves) -> list:
    """The Groups of an agent's `ustates` batch of these (uid, state) moves, as they arrive."""
    batch = updates.Moves()
    for uid, state in moves:
        batch.add(uid, state, 1.0, {"exit_code": 0} if state == "DONE" else None)
    _, head, times = batch.frames()
    return updates.read(head, times)


def _final(uid: str, state: str = "DONE") -> tuple:
    return (uid, state)


def test_acknowledged_outcomes_are_let_go_of_and_left_out_of_a_lost_journal():
    box = Outbox()
    box.add(_moves(_final("unit.000001"), _final("unit.000002", "FAILED"), _final("mine.7")))
    box.add(_moves(("unit.000003", "EXECUTING")))  # (not final: not kept)
    assert set(box.kept) == {"unit.000001", "unit.000002", "mine.7"}
    box.ack(["unit.000001", "mine.7", "unit.000009"])  # (000009: never kept here)
    assert set(box.kept) == {"unit.000002"} and box.acked == 2
    journal = io.StringIO(
        "unit.000001\nunit.000002\nunit.000003\nmine.7\n\nunit.000009\nunit.000010\n"
    )
    # 000001: acknowledged (final in the client's store); 000002: ended, kept, not acknowledged
    # (the client may not have it); 000003 and 000010: in flight; 000009: the client
    # acknowledged an outcome this bootstrap never kept; mine.7, a user's own uid, is not
    # remembered (a string a unit would grow with the work): all of these stay named
    assert list(box.not_acknowledged(journal)) == [
        "unit.000002",
        "unit.000003",
        "mine.7",
        "unit.000009",
        "unit.000010",
    ]
    assert not box.acknowledged.others


def test_a_long_journal_is_streamed_down_to_the_units_in_flight():
    box = Outbox()
    n = 300_000
    for first in range(0, n, 1000):
        uids = [f"unit.{k:06d}" for k in range(first, first + 1000)]
        box.add(_moves(*[_final(u) for u in uids]))
        box.ack(uids[:-1] if first == n - 1000 else uids)  # the very last one not acked
    assert len(box.kept) == 1
    assert sum(len(b) for b in box.acknowledged.bits.values()) <= n // 4  # (a bit, doubling)
    lines = (f"unit.{k:06d}\n" for k in range(n + 5))  # 5 more started, none ended
    assert list(box.not_acknowledged(lines)) == [f"unit.{k:06d}" for k in range(n - 1, n + 5)]


def test_a_sync_is_answered_with_the_kept_outcomes_as_they_came():
    box = Outbox()
    box.add(_moves(("unit.000001", "EXECUTING"), ("unit.000001", "DONE"), ("u.2", "FAILED")))
    found, rest = box.answer(["unit.000001", "u.2", "unit.000005"])
    assert rest == ["unit.000005"]
    assert found == [("unit.000001", "DONE", 1.0, {"exit_code": 0}), ("u.2", "FAILED", 1.0, {})]
    groups = updates.read(*updates.of_records(found).frames()[1:])
    assert [(g.state, g.uids, g.info(0)) for g in groups] == [
        ("DONE", ["unit.000001"], {"exit_code": 0}),
        ("FAILED", ["u.2"], {}),
    ]


def test_handed_back_units_are_remembered_by_partition_until_they_end_elsewhere(
    tmp_path, monkeypatch
):
    """A hand-back is remembered (by uid, with the partition that handed it back), bounded,
    and forgotten once the unit's outcome comes; a sync of a partition whose agent is gone is
    answered `back` for those the partition handed back, except those its start journal shows
    it started since (sent there again), and names every unit of that journal `started`: the
    others never started there (back too)."""
    from types import SimpleNamespace

    from pilot.partition import control
    from pilot.partition.client import outbox
    from pilot.wire.journal import journal_path
    from pilot.wire.protocol import unpack

    box = Outbox()
    box.handed_back("p.0", [{"uid": "unit.000001"}, {"uid": "unit.000002"}, {"uid": "u.x"}])
    box.handed_back("p.0", ["junk", {"uid": 7}, {"no": "uid"}, {"uid": "../x"},
                            {"uid": "u" * 100_000}])  # (hostile: passed over)  # fmt: skip
    assert len(box.back) == 3
    box.handed_back("p.1", [{"uid": "unit.000003"}])
    assert box.back_of("p.0", ["unit.000003", "unit.000001", "u.x", "unit.000009"]) == (
        ["unit.000001", "u.x"],
        ["unit.000003", "unit.000009"],
    )
    box.add(_moves(_final("unit.000001")))  # it ran elsewhere and ended: not back any more
    assert box.back_of("p.0", ["unit.000001", "unit.000002"]) == (["unit.000002"], ["unit.000001"])
    box.handed_back("p.1", [{"uid": "unit.000002"}])  # handed back again, by another partition
    assert box.back_of("p.0", ["unit.000002"]) == ([], ["unit.000002"])

    sent = []
    boot = SimpleNamespace(outbox=box, sandbox=str(tmp_path), link=SimpleNamespace(
        to_client=sent.append, flush=lambda: None), pm=SimpleNamespace(parts={}),
        agents=SimpleNamespace(procs={}))  # fmt: skip
    box.handed_back("p.2", [{"uid": f"unit.00001{i}"} for i in range(4)])
    with open(journal_path(str(tmp_path), "p.2"), "w") as f:
        f.write("unit.000011\nunit.000099\n")  # 000011 was sent to p.2 again and started
    uids = [f"unit.00001{i}" for i in range(5)] + ["unit.000099"]
    assert control.sync(boot, "c.1", {"units": {"p.2": uids}}) == {"asked": []}
    back, synced = (unpack(m[1]) for m in sent)
    assert [m[0] for m in sent] == [b"back", b"synced"]
    # (its start journal has 000011 and 000099: they may have run; every other one never
    # started there, handed back or not: back, to be routed again)
    never = ("unit.000010", "unit.000012", "unit.000013", "unit.000014")
    assert back == {"part": "p.2", "units": [{"uid": u} for u in never]}
    assert synced["unknown"] == []
    assert synced["started"] == ["unit.000011", "unit.000099"]

    monkeypatch.setattr(outbox, "BACK_KEPT", 3)
    small = Outbox()
    small.handed_back("p", [{"uid": f"unit.{k:06d}"} for k in range(5)])
    assert list(small.back) == ["unit.000002", "unit.000003", "unit.000004"]  # (the newest)
