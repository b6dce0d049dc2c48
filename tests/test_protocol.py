"""pilot/protocol.py's helpers shared by every component's loop."""

from __future__ import annotations

import time

import zmq

from pilot.protocol import wait_ms


def test_wait_ms_rounds_up_and_never_goes_negative():
    assert wait_ms(0.0004) == 1
    assert wait_ms(0.25) == 250
    assert wait_ms(0.2501) == 251
    assert wait_ms(0) == 0
    assert wait_ms(-3.0) == 0


def test_a_loop_waiting_for_a_sub_millisecond_deadline_sleeps_instead_of_spinning():
    # the agent's loop waits this way for its next batch of state updates: a poll of
    # `left * 1000` ms is truncated to poll(0) by pyzmq, and the loop turned about a hundred
    # times through its last millisecond
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    try:
        sock.bind("inproc://wait-ms")
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        for _ in range(20):
            deadline = time.monotonic() + 0.0008
            turns = 0
            while time.monotonic() < deadline:
                poller.poll(wait_ms(deadline - time.monotonic()))
                turns += 1
            assert turns <= 3, f"{turns} turns of the loop for a 0.8 ms wait"
    finally:
        sock.close(0)
        ctx.term()
