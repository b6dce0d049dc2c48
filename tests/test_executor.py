"""rp.Executor, the concurrent.futures front door (pmgr/compat/futures/executor.py), black-box:
real pilots, and CPython's own concurrent.futures tests run against it
(tests/cpython_futures.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from concurrent import futures

import pytest

import pilot as rp
from pilot import functions as rp_functions, remote_call
from pilot.pmgr.core import reaper
from tests.conftest import ROOT, local_pilot

CPD = rp.ComputePartitionDescription


class Odd(Exception):
    pass


def raise_odd(x):
    raise Odd(f"odd {x}")


def where(_=None):
    return os.environ["PILOT_PARTITION_ID"]


def nap(s, value=None):
    time.sleep(s)
    return value


def left_behind(ex) -> list[int]:
    return reaper.session_processes(ex.session.uid)


@pytest.fixture(scope="module")
def ex(tmp_path_factory):
    mp = pytest.MonkeyPatch()  # (the autouse sessions_dir fixture is per test)
    mp.setenv("PILOT_SESSIONS_DIR", str(tmp_path_factory.mktemp("sessions")))
    ex = rp.Executor(max_workers=2)
    yield ex
    ex.shutdown()
    mp.undo()
    assert not left_behind(ex)


def test_results_map_and_chunks(ex):
    assert isinstance(ex, futures.Executor)
    fut = ex.submit(pow, 2, 10)
    assert isinstance(fut, futures.Future) and fut.result(timeout=60) == 1024
    assert ex.submit(lambda *a, **k: (a, k), 1, fn=2).result(60) == ((1,), {"fn": 2})
    assert list(ex.map(pow, range(20), [2] * 20, timeout=60)) == [i * i for i in range(20)]
    assert list(ex.map(abs, range(-7, 0), chunksize=3)) == [7, 6, 5, 4, 3, 2, 1]
    assert fut.unit.state == rp.DONE and fut.unit.return_value == 1024


def test_exceptions_come_back_as_their_type_with_the_traceback(ex):
    with pytest.raises(Odd, match="odd 3") as err:
        ex.submit(raise_odd, 3).result(timeout=60)
    assert "raise_odd" in str(err.value.__cause__)  # the worker's traceback text
    with pytest.raises(ZeroDivisionError):
        list(ex.map(divmod, [1, 1], [1, 0]))

    class Local(ValueError):  # a class of this function: travels by value, comes back as itself
        pass

    def raise_local():
        raise Local("mine")

    with pytest.raises(Local, match="mine"):
        ex.submit(raise_local).result(timeout=60)


def odd_or_value(i):
    if i % 97 == 0:
        raise Odd(i)
    return -i


def test_short_calls_share_units(ex):
    """Short calls (measured) are bundled, each still its own future, value and exception."""
    for _ in range(2):  # (measured: the first round also pays each worker's import of this module)
        [f.result(60) for f in [ex.submit(odd_or_value, 1) for _ in range(20)]]
    fs = [ex.submit(odd_or_value, i) for i in range(1, 3000)]
    for i, f in enumerate(fs, 1):
        if i % 97:
            assert f.result(timeout=120) == -i
        else:
            with pytest.raises(Odd):
                f.result(timeout=120)
    units = {f.unit.uid for f in fs}
    assert len(units) < len(fs)  # bundled: units hold several calls (once measured short)
    assert all(f.unit.state == rp.DONE for f in fs)
    with rp.Executor(max_workers=1, bundle=False) as one:
        fs = [one.submit(odd_or_value, i) for i in range(1, 200)]
        assert [f.result(60) for f in fs[:5]] == [-1, -2, -3, -4, -5]
        assert len({f.unit.uid for f in fs}) == len(fs)  # a unit per call


def negate(i):
    return -i


def large(i):
    return bytes(70_000) + bytes([i % 256])


def slow_first(flag: str, i: int) -> int:
    """Slow the first time in any worker (an import the function makes on its first call)."""
    if not os.path.exists(flag):
        open(flag, "w").close()
        time.sleep(0.2)
    return i


def test_one_warm_up_call_measures_a_function(ex, tmp_path):
    """A call's worker says how long the call itself took (not the worker's start, which the
    first call of an executor pays): after one call, the next batch goes in bundles from its
    first units on; a single call's unit still gives its plain value."""
    fut = ex.submit(negate, 1)
    assert fut.result(60) == -1 and fut.unit.return_value == -1  # (the value, not its time)
    fs = [ex.submit(negate, i) for i in range(2000)]
    assert [f.result(60) for f in fs] == [-i for i in range(2000)]
    units = [f.unit.uid for f in fs]
    assert len(set(units)) < 2000 // 4, len(set(units))
    # a value that is LARGE never goes in a bundle (a bundle's values must fit together)
    assert ex.submit(large, 1).result(60)[-1] == 1
    fs = [ex.submit(large, i) for i in range(60)]
    assert all(f.result(60)[-1] == i % 256 for i, f in enumerate(fs))
    assert len({f.unit.uid for f in fs}) == 60
    # nor do LARGE arguments (a bundle's must fit PACKED_MAX together)
    assert ex.submit(len, bytes(70_000)).result(60) == 70_000
    fs = [ex.submit(len, bytes(70_000 + i)) for i in range(300)]
    assert [f.result(60) for f in fs] == [70_000 + i for i in range(300)]
    assert len({f.unit.uid for f in fs}) == 300
    # a slow first call is replaced by the second measurement, not averaged with it
    flag = str(tmp_path / "imported")
    for _ in range(2):
        assert ex.submit(slow_first, flag, 0).result(60) == 0
    fs = [ex.submit(slow_first, flag, i) for i in range(1000)]
    assert [f.result(60) for f in fs] == list(range(1000))
    assert len({f.unit.uid for f in fs}) < 1000 // 4


def echo(x):
    return x


@pytest.mark.parametrize("sees", [True, False], ids=["by-reference", "as-bytes"])
def test_large_calls_one_at_a_time_leave_no_files_and_are_stored_as_they_go(
    sees, monkeypatch, tmp_path
):
    """A call's LARGE arguments and value are files of the session's data directory: the
    executor removes them once the store has the call's final state (its future has the
    outcome; kept, a session of many such calls filled the disk, each file's new pages a
    writeback for the kernel), whether the pilot sees the directory (only file names cross
    it; the worker writes the value's file) or not (the bytes cross it; the store writes the
    value's file).  And calls one at a time are stored as they go: the final states of the
    first calls are in the store while later ones still run (each call's send put them off
    before, until 2,000 records had gathered: the units and their megabytes held in memory)."""
    from pilot import functions
    from pilot.pmgr.core import pilot_manager

    if not sees:  # (the directory of another host: not there where the agent looks)
        elsewhere = {"dir": "/nonexistent/data", "token": "0" * 32, "sync": True}
        monkeypatch.setattr(pilot_manager.data_files, "for_pilot", lambda d, local: elsewhere)
    monkeypatch.setenv("PILOT_SESSIONS_DIR", str(tmp_path))
    with rp.Executor(max_workers=1) as ex:
        data = os.path.join(ex.session.dir, "data")
        blob = bytes(200_000)
        fs = []
        for _ in range(40):
            fs.append(ex.submit(echo, blob))
            assert fs[-1].result(60) == blob
        assert functions.is_value_ref(fs[0].unit.value) is sees
        first = [f.unit.uid for f in fs[:20]]
        docs = ex.session.read_store().get_many("units", first)
        assert [docs[uid]["state"] for uid in first] == [rp.DONE] * 20
        ex.session.writer.flush(timeout=30)
        assert [n for n in os.listdir(data) if not n.startswith(".")] == []


def test_what_a_call_took_is_its_own_time():
    """remote_call's timed call: the seconds of fn(*args) itself, outside the unpickling; an
    exception is timed too; one whose function does not load is not."""
    call = remote_call.prepare(time.sleep, (0.05,), {})
    timed = remote_call.call_with(call.fn_text, None, True, 0.05)
    assert type(timed) is rp_functions.Timed and timed.value is None
    assert 0.05 <= timed.seconds < 1
    packed = rp_functions.wrap(rp_functions.dumps(timed))
    assert rp_functions.unpack_value(packed) is None
    assert rp_functions.unpack_timed(packed) == (None, timed.seconds)
    assert rp_functions.unpack_timed(rp_functions.wrap(rp_functions.dumps(3))) == (3, None)
    bad = remote_call.prepare(divmod, (1, 0), {})
    timed = remote_call.call_with(bad.fn_text, None, True, 1, 0)
    assert type(timed.value) is remote_call.Raised and timed.seconds >= 0
    assert type(remote_call.call_with("bm90IGEgcGlja2xl", None, True)) is remote_call.Raised
    # the unit's function is call_with bound to the call; its arguments, the call's own pickle
    unit = remote_call.packed([call], None, True)
    f, args, kwargs = rp_functions.unpack_call(unit)
    assert args == (0.05,) and type(f(*args, **kwargs)) is rp_functions.Timed
    assert unit["args"] == rp_functions.wrap(call.blob)
    assert remote_call.packed([call], None, True)["pickle"] == unit["pickle"]  # (made once)
    # a user's keyword named as call_with's own parameters is the user's
    kw = remote_call.prepare(dict, (), {"cwd": 1, "timed": 2, "fn_text": 3})
    f, args, kwargs = rp_functions.unpack_call(remote_call.packed([kw], None, False))
    assert f(*args, **kwargs) == {"cwd": 1, "timed": 2, "fn_text": 3}


def test_unpicklable_call_fails_at_submit(ex):
    import threading

    with pytest.raises(ValueError, match="cannot be pickled"):
        ex.submit(pow, threading.Lock(), 2)
    with pytest.raises(TypeError):
        ex.submit(42)


def test_cancel_only_before_it_starts(ex, caplog):
    running = ex.submit(nap, 1.5, "slept")
    blocker = ex.submit(nap, 1.5)  # both cores busy now
    deadline = time.monotonic() + 30
    while not (running.running() and blocker.running()) and time.monotonic() < deadline:
        time.sleep(0.01)
    waiting = ex.submit(nap, 0, "never")
    assert waiting.cancel() and waiting.cancelled()
    with caplog.at_level("DEBUG", logger="concurrent.futures"):
        assert waiting.cancel()  # again: True, and nothing more (as the standard library's)
    assert not [r for r in caplog.records if r.name == "concurrent.futures"], caplog.text
    assert not running.cancel()  # it runs: as the standard library documents
    done, _ = futures.wait([waiting, running], timeout=60)
    assert waiting in done and running.result() == "slept"
    deadline = time.monotonic() + 30
    while waiting.unit is not None and not waiting.unit.final and time.monotonic() < deadline:
        time.sleep(0.01)
    assert waiting.unit is None or waiting.unit.state == rp.CANCELED


def test_shutdown_semantics(tmp_path):
    ex = rp.Executor(max_workers=1)
    fs = [ex.submit(nap, 0.05, i) for i in range(30)]
    ex.shutdown(wait=True, cancel_futures=True)
    canceled = [f for f in fs if f.cancelled()]
    assert canceled and len(canceled) < len(fs)
    assert all(f.result() == fs.index(f) for f in fs if not f.cancelled())
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit(pow, 2, 2)
    assert ex.pilot.state == rp.CANCELED and not left_behind(ex)

    with rp.Executor(max_workers=1) as ex2:
        late = ex2.submit(nap, 0.5, "late")
        ex2.shutdown(wait=False)  # returns at once; the call still runs
        assert late.result(timeout=60) == "late"
    deadline = time.monotonic() + 30
    while not ex2.pilot.final and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ex2.pilot.final


def test_shutdown_sees_the_calls_being_submitted(monkeypatch):
    """cancel_futures and wait cover the calls the feeder has taken and is still packing."""
    from pilot.pmgr.compat.futures import executor_feed

    packing, slow = executor_feed.remote_call.packed, threading.Event()

    def packed(calls, cwd, timed=False):
        slow.set()
        time.sleep(0.5)  # shutdown() runs meanwhile
        return packing(calls, cwd, timed)

    with rp.Executor(max_workers=1) as ex:
        assert ex.submit(pow, 2, 3).result(timeout=60) == 8
        monkeypatch.setattr(remote_call, "packed", packed)
        fs = [ex.submit(nap, 0.05, i) for i in range(10)]
        assert slow.wait(10)
        ex.shutdown(wait=True, cancel_futures=True)
        assert all(f.done() for f in fs)
        canceled = [f for f in fs if f.cancelled()]
        assert len(canceled) == len(fs) - 1, [f.cancelled() for f in fs]
        assert fs[0].result() == 0


def test_max_workers_is_checked():
    with pytest.raises(ValueError, match="max_workers must be greater than 0"):
        rp.Executor(max_workers=0)
    with pytest.raises(TypeError):
        rp.Executor(max_workers="2")


def test_a_dask_graph_runs_on_it_with_many_calls_in_flight(ex, monkeypatch):
    # Dask's local scheduler keeps at most `_max_workers` calls of an Executor submitted: a
    # process pool's count of processes would leave the cores waiting out each call's hops
    dask = pytest.importorskip("dask")
    da = pytest.importorskip("dask.array")
    from dask import local

    from pilot.pmgr.compat.futures.executor import IN_FLIGHT

    assert ex._max_workers == 2 + IN_FLIGHT  # noqa: SLF001 (what Dask reads: 2 cores' + more)
    most, submitted = [0], []
    get_async = local.get_async

    def counted(submit, num_workers, *args, **kwargs):
        def submit_counted(fn, *a, **k):
            fut = submit(fn, *a, **k)
            submitted.append(fut)
            most[0] = max(most[0], sum(not f.done() for f in submitted))
            return fut

        return get_async(submit_counted, num_workers, *args, **kwargs)

    monkeypatch.setattr(local, "get_async", counted)
    x = da.ones((400, 400), chunks=(50, 50))
    total = (x + x.T).sum(axis=0).mean()
    assert dask.compute(total, scheduler=ex)[0] == 800.0
    assert most[0] > 8, f"at most {most[0]} calls of the graph were in flight"
    # set lower (less of a wide graph held at once), Dask keeps to it
    ex._max_workers = 3  # noqa: SLF001
    most[0] = 0
    submitted.clear()
    try:
        assert dask.compute(total, scheduler=ex)[0] == 800.0
    finally:
        ex._max_workers = 2 + IN_FLIGHT  # noqa: SLF001 (the module's executor, shared)
    assert 1 <= most[0] <= 3, most[0]
    with pytest.raises(ValueError, match="_max_workers=0 must be an int above 0"):
        ex._max_workers = 0  # noqa: SLF001


def test_two_executors_share_a_pilot_in_partitions_of_their_own(session):
    pilot = local_pilot(session, parts=((1,),), runtime=5, cores=2)
    first = rp.Executor(session=session, pilot=pilot, partition=pilot.partitions[0].uid)
    second = rp.Executor(session=session, pilot=pilot, partition=CPD(cores=1))
    assert first.unit_manager is second.unit_manager
    a = [first.submit(where) for _ in range(6)]
    b = [second.submit(where) for _ in range(6)]
    assert {f.result(60) for f in a} == {pilot.partitions[0].uid}
    assert {f.result(60) for f in b} == {second.partition.uid}
    second.shutdown()
    assert second.partition.state == rp.CANCELED  # it started it: it stops it
    first.shutdown()
    assert pilot.partitions[0].state == rp.ACTIVE and not pilot.final  # given: it stays


def test_reconfig_under_a_running_executor_loses_nothing(session):
    pilot = local_pilot(session, parts=((1,),), runtime=5, cores=2)
    with rp.Executor(session=session, pilot=pilot) as ex:
        [f.result(60) for f in [ex.submit(abs, -1) for _ in range(20)]]  # (measured: short)
        fs = [ex.submit(nap, 0.02, i) for i in range(200)]
        short = [ex.submit(abs, -i) for i in range(3000)]
        time.sleep(0.5)
        old = pilot.partitions[0]
        new = pilot.reconfig(stop=old.uid, start=[CPD(cores=2)])[0]
        assert [f.result(timeout=120) for f in fs] == list(range(200))
        assert [f.result(timeout=120) for f in short] == list(range(3000))
        parts = {f.unit.part for f in fs}
        assert new.uid in parts and old.state == rp.CANCELED
        reran = [f for f in fs if f.runs > 1]  # running when it stopped: ran again
        assert all(f.unit.part == new.uid for f in reran)


def test_a_reconfig_that_stops_the_executors_own_partition_fails_its_calls_saying_so(session):
    """An executor on a partition of its own has nowhere else to run its calls: when a reconfig
    stops that partition, each call not done raises ExecutorError naming the stop (the running
    ones raised CancelledError before, on futures that were not cancelled()); none is lost."""
    pilot = local_pilot(session, parts=((1,),), runtime=5, cores=4)
    with rp.Executor(session=session, pilot=pilot, partition=CPD(cores=2), bundle=False) as ex:
        fs = [ex.submit(nap, 0.3, i) for i in range(12)]
        fs[0].result(timeout=60)
        pilot.reconfig(stop=ex.partition.uid, start=[CPD(cores=1)])
        outcomes = []
        for i, f in enumerate(fs):
            try:
                assert f.result(timeout=60) == i
                outcomes.append("ok")
            except rp.ExecutorError as exc:
                outcomes.append("stopped")
                assert "stopped" in str(exc) and not f.cancelled(), str(exc)
            except futures.CancelledError:
                assert f.cancelled()  # (only a future that says so)
                outcomes.append("cancelled")
        assert outcomes.count("ok") >= 1 and "stopped" in outcomes, outcomes


def test_an_executor_on_a_partition_that_does_not_fit_says_what_was_missing(session):
    pilot = local_pilot(session, parts=((1,),), runtime=5, cores=2)
    with rp.Executor(session=session, pilot=pilot, partition=CPD(cores=99)) as ex:
        with pytest.raises(rp.ExecutorError, match="FAILED .*needs 99 cores"):
            ex.submit(pow, 2, 5).result(timeout=60)


def test_runtime_limit_and_a_dead_worker(ex):
    desc = rp.ComputeUnitDescription(
        function=remote_call.pack_call(nap, (30,), {}), **ex.call_fields()
    )
    slow = ex.submit_unit(desc, runtime=0.5)
    with pytest.raises(TimeoutError, match="runtime limit of 0.5 s"):
        slow.result(timeout=60)
    with pytest.raises(rp.ExecutorError, match="died"):
        ex.submit(os._exit, 3).result(timeout=60)


def test_pending_calls_finish_at_interpreter_exit(tmp_path):
    """As concurrent.futures' own executors (CPython's test_interpreter_shutdown and
    test_submit_after_interpreter_shutdown, which import a standard-library executor by name)."""
    script = textwrap.dedent(
        """
        import atexit, time
        import pilot as rp

        def late():
            try:
                ex.submit(pow, 2, 2)
            except RuntimeError as exc:
                print("refused:", exc)

        atexit.register(late)
        ex = rp.Executor(max_workers=1)
        f = ex.submit(time.sleep, 0.5)
        f.add_done_callback(lambda f: print("done", f.result()))
        """
    )
    env = {**os.environ, "PYTHONPATH": ROOT}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr
    assert "done None" in out.stdout
    assert "refused: cannot schedule new futures after interpreter shutdown" in out.stdout


def test_cpython_concurrent_futures_suite(tmp_path):
    """CPython's generic test_concurrent_futures classes with rp.Executor (ExecutorTest,
    WaitTests, AsCompletedTests, ExecutorShutdownTest): tests/cpython_futures.py."""
    from tests import cpython_futures

    if cpython_futures.load() is None:
        pytest.skip(
            "CPython's test.test_concurrent_futures is not installed: this interpreter ships "
            "no `test` package with it and make could not unpack Debian's "
            "libpython3.X-testsuite into .venv/cpython-tests"
        )
    # the four classes in two processes side by side (each test makes its own executor, a
    # pilot; most of the time is the suite's own sleeps and timeouts: ~55 s in one process)
    shards = [("ExecutorTest", "AsCompletedTests"), ("WaitTests", "ExecutorShutdownTest")]
    assert sorted(sum(shards, ())) == sorted(cpython_futures.GENERIC)
    procs = []
    try:
        for i, classes in enumerate(shards):
            env = {**os.environ, "PYTHONPATH": ROOT, "PILOT_SESSIONS_DIR": str(tmp_path / str(i))}
            argv = [sys.executable, "-m", "tests.cpython_futures", "--classes", ",".join(classes)]
            out = open(tmp_path / f"out{i}.txt", "w+")  # (files, not pipes: read at the end)
            procs.append((subprocess.Popen(argv, stdout=out, stderr=out, env=env, cwd=ROOT), out))
        passed = 0
        for proc, out in procs:
            proc.wait(timeout=600)
            out.seek(0)
            text = out.read()
            assert proc.returncode == 0, text[-6000:]
            lines = text.strip().splitlines()
            counts = [x for x in lines if re.fullmatch(r"\d+ passed, \d+ failed, \d+ skipped", x)]
            assert counts and " 0 failed" in counts[-1], text[-6000:]
            passed += int(counts[-1].split()[0])
        assert passed == 25, passed
    finally:
        for proc, out in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            out.close()
