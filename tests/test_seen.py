"""pilot/seen.py: the agent's memory of the units that ended (a bit per generated uid)."""

from pilot.seen import SeenUnits


def test_generated_uids_take_a_bit_and_others_a_string():
    seen = SeenUnits()
    for uid in ("unit.000000", "unit.000009", "task.000009", "unit.1234567", "mine"):
        seen.add(uid)
    assert "unit.000009" in seen and "task.000009" in seen and "mine" in seen
    assert "unit.000008" not in seen and "task.000000" not in seen  # one bitmap per prefix
    assert "unit.1234567" in seen and "unit.1234566" not in seen
    assert len(seen.others) == 1  # only "mine" is kept as a string
    assert len(seen.bits["unit"]) < 200_000  # 1.2 M numbers: bits, not strings


def test_no_two_uids_share_a_bit():
    seen = SeenUnits()
    seen.add("task.07")  # a user's own uid: not the generated task.000007
    seen.add("unit.0000007")  # a leading zero beyond six digits: not unit.000007
    assert "task.000007" not in seen and "unit.000007" not in seen
    assert "task.07" in seen and "unit.0000007" in seen
    assert seen.others == {"task.07", "unit.0000007"}
