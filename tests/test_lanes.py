"""LaneThreads lanes (agent/runners/lanes.py): single-core units whose successors a thread starts
the moment the unit before them exits.  What they must keep of the agent's contract: the ids a
unit sees, the start journal (each unit once, before it runs), cancel and stop of units queued
in a lane, a successor that cannot exec, and sandboxes that go when nothing was left in them."""

from __future__ import annotations

import os
import re
import time

import pytest

import pilot as rp
from pilot.agent.runners import lanes
from tests.conftest import active_pilot
from tests.faults import check_exactly_once, read_truth, truth_unit

pytestmark = pytest.mark.skipif(not lanes.available(), reason="agent/_spawn-src/ not built here")


def _agent_log(pilot, part) -> str:
    with open(os.path.join(pilot.sandbox, f"{part.uid}.agent.log")) as f:
        return f.read()


def _journal(pilot, part) -> list[str]:
    with open(os.path.join(pilot.sandbox, f"{part.uid}.started")) as f:
        return f.read().split()


def test_units_in_lanes_see_their_cores_and_are_journaled_once(session):
    pilot, umgr = active_pilot(session, parts=((2,),))
    names = "PILOT_CPU_IDS PILOT_UNIT_ID RP_UNIT_ID PILOT_UNIT_SANDBOX RP_UNIT_SANDBOX"
    names += " RP_UNIT_NAME PILOT_RANK PILOT_RANKS PILOT_PARTITION_ID PATH"
    script = "".join(f'echo "${n}"\n' for n in names.split())
    units = umgr.submit_units(
        [rp.ComputeUnitDescription(executable="/bin/sh", arguments=["-c", script])] * 60
    )
    assert set(umgr.wait_units(timeout=60)) == {rp.DONE}
    for u in units:  # (successors' variables are encoded apart from their slot's shared ones)
        cpus, uid, rp_uid, box, rp_box, name, rank, ranks, part, path = u.stdout.splitlines()
        assert cpus == ",".join(map(str, u.slots["cpus"])), (u.uid, u.slots)
        assert uid == rp_uid == name == u.uid and box == rp_box == u.sandbox, u.stdout
        assert (rank, ranks, part) == ("0", "1", u.part), u.stdout
        assert path == os.environ["PATH"], path
    part = pilot.partitions[0]
    journal = _journal(pilot, part)
    assert sorted(journal) == sorted(u.uid for u in units)  # each once
    pilot.cancel()
    pilot.wait(timeout=30)
    found = re.search(r"(\d+) started in lanes, (\d+) queued ahead", _agent_log(pilot, part))
    assert found, "the agent did not say what its lanes did"
    started, queued = map(int, found.groups())
    assert started == 60 and queued > 0, found.group(0)
    # nothing was written into their sandboxes but STDOUT: the directories hold just that
    for u in units:
        assert os.listdir(u.sandbox) == ["STDOUT"], u.sandbox


def test_units_queued_in_a_lane_are_canceled_without_ever_starting(session, tmp_path):
    log = str(tmp_path / "truth.log")
    pilot, umgr = active_pilot(session, parts=((1,),))
    units = umgr.submit_units([truth_unit(log, sleep=0.4) for _ in range(12)])
    deadline = time.monotonic() + 20
    while not any(u.state == rp.EXECUTING for u in units) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.1)  # its successors are queued in the lane by now
    waiting = [u for u in units if u.state not in (rp.EXECUTING, *rp.FINAL)]
    assert len(waiting) >= 8
    umgr.cancel_units([u.uid for u in waiting])
    umgr.wait_units(timeout=30)
    check_exactly_once(session, units, log)
    starts, _ = read_truth(log)
    journal = set(_journal(pilot, pilot.partitions[0]))
    for u in waiting:
        if u.state == rp.CANCELED:
            assert not starts[u.uid] and u.uid not in journal, f"{u.uid} started"
    assert sum(u.state == rp.CANCELED for u in waiting) >= len(waiting) - 1
    # a successor's sandbox was made ahead of it: one canceled before it ran leaves none
    pilot.cancel()
    pilot.wait(timeout=30)
    for u in waiting:
        if u.state == rp.CANCELED and not starts[u.uid]:
            assert not os.path.exists(u.sandbox), f"{u.sandbox} was left behind"


def test_a_successor_that_cannot_exec_fails_and_its_lane_goes_on(session, tmp_path):
    bad = tmp_path / "not-a-program"
    bad.write_bytes(b"\x00\x01\x02 not an executable format\n")
    bad.chmod(0o755)
    pilot, umgr = active_pilot(session, parts=((1,),))
    sleep = rp.ComputeUnitDescription(executable="/bin/sleep", arguments=["0.3"])
    wrong = rp.ComputeUnitDescription(executable=str(bad), shell=False)
    true = rp.ComputeUnitDescription(executable="/bin/true")
    units = umgr.submit_units([sleep, wrong, true, wrong, true, true])
    umgr.wait_units(timeout=30)
    states = [u.state for u in units]
    assert states == [rp.DONE, rp.FAILED, rp.DONE, rp.FAILED, rp.DONE, rp.DONE], states
    for u in (units[1], units[3]):
        assert "cannot start" in u.reason and "Exec format error" in u.reason, u.reason
        assert u.exit_code is None


def test_quiet_pipes_are_polled_only_once_they_hold_data(tmp_path):
    """A lane unit's pipes are read by sweeps: one that stays silent is closed at its end
    without ever being polled; one that writes is polled from its first byte on, and its file
    gets everything, past a full pipe."""
    from pilot.agent.runners.streams import StreamSet

    class Poller:
        def __init__(self):
            self.fds: set[int] = set()

        def register(self, fd, _events):
            self.fds.add(fd)

        def unregister(self, fd):
            self.fds.remove(fd)

    poller = Poller()
    streams = StreamSet(poller)
    silent_r, silent_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    chatty_r, chatty_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    silent = streams.adopt(str(tmp_path), ("STDOUT", "STDOUT"), (silent_r, silent_r))
    chatty = streams.adopt(str(tmp_path / "c"), ("STDOUT", "STDOUT"), (chatty_r, chatty_r))
    os.mkdir(tmp_path / "c")
    os.close(silent_w)  # it ended without a word
    streams.sweep()
    assert not poller.fds and silent.pair[0].fd < 0  # read to its end, never polled
    assert streams.finish(silent) and not silent.made
    sent = os.write(chatty_w, b"x" * 100_000)  # (a pipe holds 64 KB: the rest waits)
    streams.sweep()
    assert poller.fds == {chatty_r}  # it writes: polled from now on
    rest = b"y" * 100_000
    while rest:  # the agent's loop would read it as it becomes readable
        try:
            rest = rest[os.write(chatty_w, rest) :]
        except BlockingIOError:
            streams.on_readable(chatty_r)
    os.close(chatty_w)
    assert streams.finish(chatty) and chatty.made and not poller.fds
    assert os.path.getsize(tmp_path / "c" / "STDOUT") == sent + 100_000
    assert not os.path.exists(tmp_path / "STDOUT")


@pytest.mark.parametrize("cores", [1, 2])  # 1: in a lane (its thread looks); 2: the agent's own
def test_a_sandbox_is_kept_while_its_process_group_outlives_its_unit(session, cores):
    """A unit that leaves a silent process in its process group, working elsewhere, has its
    sandbox kept (that process may still write there); one that leaves nothing has its empty
    sandbox removed once the partition is idle."""
    pilot, umgr = active_pilot(session, parts=((2,),))
    left = umgr.submit_units(
        rp.ComputeUnitDescription(
            executable="/bin/sh",
            arguments=["-c", "(cd / && exec sleep 5) >/dev/null 2>&1 &"],
            cores=cores,
        )
    )
    quiet = umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/true", cores=cores))
    assert umgr.wait_units(timeout=30) == [rp.DONE, rp.DONE]
    deadline = time.monotonic() + 10  # (the agent removes idle spares after a second)
    while os.path.exists(quiet.sandbox) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(quiet.sandbox), "an empty sandbox was left behind"
    assert os.path.isdir(left.sandbox), "a sandbox was recycled under a process of its unit"


def test_the_agent_hears_its_own_childrens_exits_without_sigchld(session):
    """Units the agent's thread starts (two cores: not in a lane) end as their process exits,
    even when a process they left holds their output open (no end-of-file wakes the agent),
    while SIGCHLD is left at its default: the kernel drops the one of every unit a lane's
    thread started, where a handler woke the agent for each."""
    pilot, umgr = active_pilot(session, parts=((2,),))
    script = "(sleep 3; echo late) & sleep 0.3"  # the agent's updates are sent by then
    units = umgr.submit_units(
        [
            rp.ComputeUnitDescription(executable="/bin/sh", arguments=["-c", script], cores=2)
            for _ in range(4)
        ]
    )
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 4
    for u in units:
        times = dict(u.history)
        took = times[rp.DONE] - times[rp.EXECUTING]
        assert took < 0.6, f"{u.uid} ended {took - 0.3:.2f} s after its process exited"
    with open(os.path.join(pilot.sandbox, f"{pilot.partitions[0].uid}.agent.log")) as f:
        agent = int(re.search(r": up, pid (\d+)", f.read())[1])
    with open(f"/proc/{agent}/status") as f:
        caught = int(re.search(r"SigCgt:\s*([0-9a-f]+)", f.read())[1], 16)
    assert not caught & (1 << (17 - 1)), "the agent catches SIGCHLD"


def test_a_lane_thread_per_core_each_bound_to_it(tmp_path):
    """LaneThreads(..., cpus): one thread per distinct core, bound there (a unit's exit wakes the
    thread on the core it freed); no cpus: one thread, unbound; cpus must name a core per slot."""
    from pilot.agent._spawn import LaneThreads

    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two cores")

    def lane_threads() -> dict[int, str]:
        out = {}
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != "agent-lane":
                    continue
            with open(f"/proc/self/task/{tid}/status") as f:
                out[int(tid)] = re.search(r"Cpus_allowed_list:\s*(\S+)", f.read())[1]
        return out

    journal = os.open(tmp_path / "journal", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    before = set(lane_threads())
    cores = [allowed[0], allowed[1], allowed[0]]  # three slots on two cores
    per_core = LaneThreads(journal, 3, True, cores)
    one = LaneThreads(journal, 3, True)
    try:
        mine = {t: c for t, c in lane_threads().items() if t not in before}
        bound = sorted(c for c in mine.values() if "-" not in c and "," not in c)
        assert bound == sorted(str(c) for c in allowed[:2]), mine  # one per core, bound there
        assert len(mine) == 3, mine  # and the other LaneThreads' one thread, unbound
        for bad in ([allowed[0]], [0, 1, -1], [0, 1, "x"]):
            with pytest.raises((ValueError, TypeError)):
                LaneThreads(journal, 3, True, bad)
    finally:
        per_core.close()
        one.close()
        os.close(journal)
    deadline = time.monotonic() + 10  # closed: their threads are gone (each ends on its own)
    while set(lane_threads()) - before:
        assert time.monotonic() < deadline, set(lane_threads()) - before
        time.sleep(0.01)


def test_the_queue_ahead_is_one_queue_taken_by_the_first_freed_lane_of_its_shape(tmp_path):
    """agent/_spawn-src/lanes.c's LaneThreads: the units queued ahead are one queue; a freed
    slot takes its head when the head asks for the slot's shape (key), appends the slot's own
    environment entries to it and journals it first; otherwise the slot is left free, and the
    head waits (the agent places it).  withdraw() gives back what has not started, in order."""
    import select

    from pilot.agent._spawn import LaneThreads
    from pilot.agent.spawn import Spawner

    journal_path = tmp_path / "journal"
    journal = os.open(journal_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    spawner = Spawner({})
    envp = spawner.entries_without({"SLOT"})

    def handle(script: str):
        argv = ["/bin/sh", "-c", script]
        return spawner.prepare_envp(argv, str(tmp_path), envp, None, True)

    threads = LaneThreads(journal, 2, True)
    records, fds = [], []
    try:
        fds += threads.start(0, handle("sleep 0.6"), 0, (b"SLOT=zero",), None)[1:]
        fds += threads.start(1, handle("sleep 0.05"), 1, (b"SLOT=one",), None)[1:]
        assert threads.follow(0, handle('echo "$SLOT" > a'), b"a\n", 11)  # shape 0
        assert threads.follow(1, handle('echo "$SLOT" > c'), b"c\n", 12)  # shape 1, behind
        deadline = time.monotonic() + 10
        while sum(r[0] == "exit" for r in records) < 3 and time.monotonic() < deadline:
            select.select([threads.fd], [], [], 0.2)
            for r in threads.take():
                records.append(r)
                if r[0] == "start" and r[2]:
                    fds += r[4:6]
        kinds = [(r[0], r[1], r[7]) for r in records]
        # slot 1 freed first: the head asks for shape 0, so slot 1 stays free; slot 0 then
        # takes the head; when that ends, the next (shape 1) is not slot 0's either
        assert kinds == [("exit", 1, 0), ("exit", 0, 0), ("start", 0, 11), ("exit", 0, 0)], kinds
        assert threads.withdraw() == [12]
        assert threads.withdraw() == []
        assert (tmp_path / "a").read_text() == "zero\n"  # the slot's own entries, appended
        assert not (tmp_path / "c").exists()
        assert journal_path.read_text() == "a\n"  # journaled before it started; c never
    finally:
        threads.close()
        os.close(journal)
        for fd in set(fds):
            os.close(fd)
