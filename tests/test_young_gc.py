"""The client's young-generation threshold (pilot/young_gc.py): raised while a Session is open,
Python's back once the last one closes; the user's own setting, or PILOT_GC=0, stands."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

import pytest

from pilot import young_gc
from tests.conftest import ROOT

DEFAULT = (700, 10, 10)
OURS = (young_gc.YOUNG, 10, 10)


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(*DEFAULT)
    yield
    gc.set_threshold(*saved)


def test_raised_while_sessions_hold_it_and_given_back_after_the_last(thresholds):
    young_gc.hold(environ={})
    assert gc.get_threshold() == OURS
    young_gc.hold(environ={})
    young_gc.release()
    assert gc.get_threshold() == OURS  # (one session still open)
    young_gc.release()
    assert gc.get_threshold() == DEFAULT
    young_gc.release()  # (one too many: nothing happens)
    assert gc.get_threshold() == DEFAULT


@pytest.mark.parametrize("off", ["0", "false", "No", " off "])
def test_pilot_gc_off_leaves_it(thresholds, off):
    young_gc.hold(environ={"PILOT_GC": off})
    assert gc.get_threshold() == DEFAULT
    young_gc.release()
    assert gc.get_threshold() == DEFAULT


def test_the_users_own_setting_stands(thresholds):
    gc.set_threshold(2_000, 20, 20)  # before the first session
    young_gc.hold(environ={})
    assert gc.get_threshold() == (2_000, 20, 20)
    young_gc.release()
    assert gc.get_threshold() == (2_000, 20, 20)
    young_gc.hold(environ={})  # set by the user while a session is open: kept after it
    gc.set_threshold(5_000, 10, 10)
    young_gc.release()
    assert gc.get_threshold() == (5_000, 10, 10)


def test_a_session_raises_it_and_close_gives_it_back(tmp_path):
    """End to end, in a fresh interpreter (this one's thresholds are the test run's)."""
    code = textwrap.dedent(
        f"""
        import gc, sys
        sys.path.insert(0, {ROOT!r})
        import pilot as rp
        before = gc.get_threshold()
        s = rp.Session(dir={str(tmp_path / "s")!r})
        during = gc.get_threshold()
        s.close()
        print(before, during, gc.get_threshold())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout.split("\n")[-2]
    assert out == f"{DEFAULT} {OURS} {DEFAULT}"


def test_two_threads_closing_one_session_run_its_close_once():
    """(pmgr/core/session_teardown.py claim) Both threads read `closed` before either sets it,
    as they can when they close a session at once: only one may go on (and give back its hold
    on the collector, and end its pilots)."""
    import threading
    import time

    from pilot.pmgr.core.session_teardown import Teardown

    class Slow:
        def __init__(self) -> None:
            self._closed = False

        @property
        def closed(self) -> bool:
            seen = self._closed
            time.sleep(0.05)  # (the other thread reads it meanwhile)
            return seen

        @closed.setter
        def closed(self, value: bool) -> None:
            self._closed = value

    teardown = Teardown(Slow())
    got: list[bool] = []
    threads = [threading.Thread(target=lambda: got.append(teardown.claim())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert sorted(got) == [False, True]
