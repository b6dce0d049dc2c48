"""Function units: Python callables run by persistent workers of a partition (pilot/functions.py,
agent/runners/functions.py, agent/workers/function_worker.py), placed and accounted like any
unit."""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

import pilot as rp
from pilot.functions import unpack_value
from tests.conftest import active_pilot

CPD = rp.ComputePartitionDescription
CUD = rp.ComputeUnitDescription


def square(x, *, plus=0):
    print("squaring", x)
    return x * x + plus


def where_am_i():
    return {
        "pid": os.getpid(),
        "uid": os.environ.get("PILOT_UNIT_ID"),
        "rp_uid": os.environ.get("RP_UNIT_ID"),
        "cpus": os.environ.get("PILOT_CPU_IDS"),
        "mine": os.environ.get("MINE"),
        "affinity": sorted(os.sched_getaffinity(0)),
    }


def fails():
    raise KeyError("no such thing")


def dies():
    os._exit(7)


def forks_and_exits(x):
    if os.fork() == 0:
        raise SystemExit(0)  # the child returns into the worker's loop: it must not answer
    os.wait()
    return x


def writes_fd3():
    os.write(3, b"\xff\xff\xff\xff garbage")  # fd 3 was the worker's socket
    return "wrote"


def sets_home():
    return os.environ.get("HOME")


def big(n):
    return b"x" * n


def sleeps(s):
    time.sleep(s)
    return s


def test_values_output_exceptions_and_names(session):
    pilot, umgr = active_pilot(session, parts=((2,),))
    units = umgr.submit_units(
        [CUD(function=square, args=(i,), kwargs={"plus": 1}) for i in range(6)]
        + [CUD(function=lambda: [1, "two", {"three": 3.0}])]
        + [CUD(function="math.gcd", args=[12, 18])]
        + [CUD({"function": "os.path:join", "args": ("a", "b")})]
        + [CUD(function=fails)]
    )
    states = umgr.wait_units(timeout=60)
    assert states == [rp.DONE] * 9 + [rp.FAILED]
    assert [u.return_value for u in units[:6]] == [i * i + 1 for i in range(6)]
    assert units[0].stdout == "squaring 0\n" and units[0].stderr == ""
    assert units[6].return_value == [1, "two", {"three": 3.0}]  # a lambda travels by value
    assert units[7].return_value == 6 and units[8].return_value == "a/b"
    bad = units[9]
    assert bad.return_value is None and bad.exception == "KeyError: 'no such thing'"
    assert bad.reason == "exception: KeyError: 'no such thing'"
    assert "Traceback" in bad.stderr and 'raise KeyError("no such thing")' in bad.stderr
    assert [s for s, _ in units[0].history] == [
        "NEW",
        "SCHEDULING",
        "QUEUED",
        "EXECUTING",
        "DONE",
    ]
    session.writer.flush()
    doc = session.store.get("units", units[3].uid)  # the value is persisted with its state
    assert doc["state"] == "DONE" and unpack_value(doc["return_value"]) == 10
    assert doc["description"]["function"]["name"].endswith("square")


def test_environment_binding_and_persistent_workers(session):
    pilot, umgr = active_pilot(session, parts=((2,),))
    units = umgr.submit_units(
        [CUD(function=where_am_i, environment={"MINE": f"v{i}"}) for i in range(20)]
        + [CUD(function=where_am_i)]
    )
    assert umgr.wait_units(timeout=60) == [rp.DONE] * 21
    seen = [u.return_value for u in units]
    assert all(v["uid"] == u.uid == v["rp_uid"] for u, v in zip(units, seen))
    assert [v["mine"] for v in seen[:20]] == [f"v{i}" for i in range(20)]
    assert seen[20]["mine"] is None  # a unit's own variables leave with it
    assert len({v["pid"] for v in seen}) <= 2  # one worker per core, started once
    allowed = sorted(os.sched_getaffinity(0))
    for v in seen:  # bound to the core it was placed on (mapped onto this machine's cores)
        assert v["cpus"] in ("0", "1")
        if len(allowed) >= 2:
            assert v["affinity"] == [allowed[int(v["cpus"]) % len(allowed)]]
    assert os.path.isdir(units[0].sandbox) and units[0].sandbox.endswith(".functions")


def test_forks_fd3_and_environment_do_not_confuse_the_workers(session):
    pilot, umgr = active_pilot(session, parts=((1,),))
    units = umgr.submit_units(
        [CUD(function=forks_and_exits, args=(i,)) for i in range(4)]
        + [
            CUD(function=writes_fd3)
            if os.path.exists("/proc/self/fd/3")
            else CUD(function=sets_home)
        ]
        + [CUD(function=sets_home, environment={"HOME": "/nowhere"}), CUD(function=sets_home)]
        + [CUD(function=sets_home)]
    )
    states = umgr.wait_units(timeout=60)
    assert states[:4] == [rp.DONE] * 4
    assert [u.return_value for u in units[:4]] == [0, 1, 2, 3]  # every value on its own unit
    assert states[4] in (rp.DONE, rp.FAILED)  # fd 3 is nothing of the worker's now
    before = umgr.submit_units(CUD(function=sets_home))
    assert before.wait(timeout=30) == rp.DONE
    assert units[5].return_value == "/nowhere"
    assert units[6].return_value == units[7].return_value == before.return_value  # set back


def test_large_values_come_back_whole(session):
    pilot, umgr = active_pilot(session, parts=((1,),))
    units = umgr.submit_units([CUD(function=big, args=(n,)) for n in (10, 3 << 20)])
    assert umgr.wait_units(timeout=60) == [rp.DONE, rp.DONE]
    assert units[0].return_value == b"x" * 10 and units[1].return_value == b"x" * (3 << 20)


def digest_and_back(blob, n):
    import hashlib

    return hashlib.sha256(blob).hexdigest(), blob[:n]


@pytest.mark.parametrize("sees", [True, False], ids=["by-reference", "as-bytes"])
def test_large_arguments_and_values_are_kept_as_files(session, monkeypatch, sees):
    """From functions.LARGE bytes on, a call's arguments and its value are files beside the
    store.  A partition whose workers see the session's data directory gets the arguments'
    file name and sends back its value's (only names cross the pilot); one that does not (a
    pilot on another host: its agent finds no token there) gets and sends the bytes, as
    frames of their own.  Read back from the store, description and value are whole."""
    import gc
    import hashlib

    from pilot import functions
    from pilot.pmgr.core import pilot_manager, routing
    from pilot.pmgr.store import open_store

    if not sees:  # (the directory of another host: not there where the agent looks)
        elsewhere = {"dir": "/nonexistent/data", "token": "0" * 32, "sync": True}
        monkeypatch.setattr(pilot_manager.data_files, "for_pilot", lambda d, local: elsewhere)
    sent: list = []
    wire_list = routing.wire_list
    monkeypatch.setattr(routing, "wire_list", lambda u, r=False: sent.append(r) or wire_list(u, r))
    pilot, umgr = active_pilot(session, parts=((1,),))
    assert pilot.partitions[0].data_shared is sees
    blob = os.urandom(3 << 20)
    unit = umgr.submit_units(CUD(function=digest_and_back, args=(blob, 2 << 20)))
    assert umgr.wait_units(unit.uid, timeout=60) == [rp.DONE]
    assert sent == [sees]
    assert functions.is_value_ref(unit.value) is sees  # (a file's name, or the bytes)
    assert unit.return_value == (hashlib.sha256(blob).hexdigest(), blob[: 2 << 20])
    uid = unit.uid
    session.writer.flush(timeout=30)
    store = open_store(session.url)
    try:
        doc = store.get("units", uid)
        assert type(doc["return_value"]) is bytes  # (its file's bytes: no base64)
        assert functions.unpack_value(doc["return_value"])[1] == blob[: 2 << 20]
        call = doc["description"]["function"]
        assert type(call["args"]) is bytes and len(call["args"]) > len(blob)
        f, args, kwargs = functions.unpack_call(call)
        assert args[0] == blob
        if session.url.startswith("sqlite:///"):  # the store file holds references only
            assert os.path.getsize(session.url[10:]) < len(blob)
            names = os.listdir(os.path.join(session.dir, "data"))
            assert len([n for n in names if not n.startswith(".")]) == 2, names
    finally:
        store.close()
    del unit
    gc.collect()
    deadline = time.monotonic() + 10  # released (a byte in the ledger), then made again
    while umgr.units.live.get(uid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    (again,) = umgr.get_units([uid])
    assert again.return_value[1] == blob[: 2 << 20]


def test_a_dead_worker_fails_its_unit_and_is_replaced(session):
    pilot, umgr = active_pilot(session, parts=((1,),))
    units = umgr.submit_units(
        [CUD(function=where_am_i), CUD(function=dies), CUD(function=where_am_i)]
    )
    assert umgr.wait_units(timeout=60) == [rp.DONE, rp.FAILED, rp.DONE]
    assert "function worker" in units[1].reason and "exit code 7" in units[1].reason
    assert units[0].return_value["pid"] != units[2].return_value["pid"]  # a new worker


def test_cancel_a_running_call_and_stop_hands_queued_calls_back(session, tmp_path):
    cfg = tmp_path / "four.yaml"
    cfg.write_text("batch_system: local\ncores_per_node: 4\ngpus_per_node: 0\n")
    pilot, umgr = active_pilot(session, parts=((1,),), resource=str(cfg), cores=4)
    old = pilot.partitions[0]
    long = umgr.submit_units(CUD(function=sleeps, args=(30,)))
    long.wait(rp.EXECUTING, timeout=30)
    t0 = time.monotonic()
    umgr.cancel_units([long.uid])
    assert long.wait(timeout=30) == rp.CANCELED and time.monotonic() - t0 < 10
    calls = umgr.submit_units([CUD(function=sleeps, args=(0.2,)) for _ in range(6)])
    calls[-1].wait(rp.QUEUED, timeout=30)
    new = pilot.reconfig(stop=old.uid, start=[CPD(cores=2)])[0]
    umgr.wait_units(timeout=60)
    states = Counter(u.state for u in calls)
    assert states[rp.DONE] >= 4 and states[rp.DONE] + states[rp.CANCELED] == 6
    moved = [u for u in calls if [s for s, _ in u.history].count(rp.QUEUED) == 2]
    assert moved and all(u.part == new.uid and u.return_value == 0.2 for u in moved)


@pytest.mark.parametrize(
    "fields, says",
    [
        ({"function": square, "executable": "/bin/true"}, "give one"),
        ({"function": square, "ranks": 2}, "ranks must be 1"),
        ({"function": square, "pre_exec": ["x"]}, "pre_exec= does not apply"),
        ({"function": 42}, "a callable, or a dotted name"),
        ({"function": "not a name"}, "a callable, or a dotted name"),
        ({"args": (1,), "executable": "/bin/true"}, "args and kwargs are for a function unit"),
        ({"function": square, "args": [lambda: open(__file__)]}, None),  # fine: by value
    ],
)
def test_bad_function_units_are_refused_naming_the_field(session, fields, says):
    pilot, umgr = active_pilot(session, parts=((1,),))
    if says is None:
        umgr.submit_units(CUD(**fields)).cancel()
        return
    with pytest.raises(ValueError, match=says):
        umgr.submit_units(CUD(**fields))


def test_an_unpicklable_call_is_refused_at_submit(session):
    import threading

    pilot, umgr = active_pilot(session, parts=((1,),))
    with pytest.raises(ValueError, match="cannot be pickled"):
        umgr.submit_units(CUD(function=square, args=(threading.Lock(),)))


def test_a_function_is_pickled_once_and_its_arguments_each_call():
    import base64

    import cloudpickle

    from pilot import functions

    def local(x):  # by value: a function of this test, not importable
        return x + 1

    first = functions.pack(local, (1,), {})
    again = functions.pack(local, (2,), {})
    assert first["pickle"] is again["pickle"]  # the same text: pickled once
    assert first["args"] != again["args"]
    f, args, kwargs = functions.unpack_call(again)
    assert f(*args, **kwargs) == 3
    bare = functions.pack(local, (), {})
    assert "args" not in bare and functions.unpack_call(bare)[1:] == ((), {})
    older = {"name": "x", "pickle": base64.b64encode(cloudpickle.dumps((local, (4,), {}))).decode()}
    f, args, kwargs = functions.unpack_call(older)  # the form stores of earlier versions hold
    assert functions.is_packed(older) and f(*args, **kwargs) == 5
    assert not functions.is_packed({"name": "x", "pickle": "a", "args": 1})
    unhashable = functions.pack(Unhashable(), (), {})  # not kept, still packed
    assert functions.unpack_call(unhashable)[0]() == 7


class Unhashable:
    __hash__ = None

    def __call__(self):
        return 7


def test_a_kept_pickle_follows_rebound_globals_and_bound_methods():
    from pilot import functions

    script = {"__name__": "__main__", "FACTOR": 2}  # as if defined in a script: by value
    exec("def scaled(x):\n    return x * FACTOR\n", script)
    scaled = script["scaled"]

    class Box:
        def __init__(self):
            self.base = 1

        def plus(self, x):
            return self.base + x

    def call(packed):
        f, args, kwargs = functions.unpack_call(packed)
        return f(*args, **kwargs)

    assert call(functions.pack(scaled, (10,), {})) == 20
    assert call(functions.pack(scaled, (10,), {})) == 20  # (the kept pickle)
    script["FACTOR"] = 3
    assert call(functions.pack(scaled, (10,), {})) == 30  # rebound: pickled again
    box = Box()
    assert call(functions.pack(box.plus, (1,), {})) == 2
    box.base = 100
    assert call(functions.pack(box.plus, (1,), {})) == 101  # a method: pickled each time


def test_a_reference_names_a_file_of_the_data_directory_and_nothing_else(tmp_path):
    """What crosses for a large pickle is a file's name: a path, or a reference of another
    shape, is refused (a record that is not a packed call; a name that is not the store's)."""
    from pilot import functions

    name = functions.put_data(str(tmp_path), functions.dumps(((1, 2), {})))
    call = {"name": "m.f", "pickle": functions.pack(max, (), {})["pickle"]}
    ok = {**call, "args": {functions.FILE_REF: name}}
    assert functions.is_packed(ok) and functions.packed_size(ok) < 200
    assert functions.unpack_call(ok, None, str(tmp_path))[1:] == ((1, 2), {})
    with pytest.raises(ValueError, match="lacks"):
        functions.unpack_call(ok, None, None)
    for bad in ("../" + name, "/etc/passwd", "a.b", "", "\u0661\u0662"):
        with pytest.raises(ValueError, match="not a name the store makes"):
            functions.unpack_call({**call, "args": {functions.FILE_REF: bad}}, None, str(tmp_path))
    for shape in ({functions.FILE_REF: 3}, {functions.FILE_REF: name, "x": 1}, {"x": name}, []):
        assert not functions.is_packed({**call, "args": shape})
    assert functions.is_value_ref(functions.VALUE_REF + name)
    assert not functions.is_value_ref(b"\x00file:" + name.encode())


def test_large_arguments_with_a_class_of_main_go_by_value(monkeypatch):
    """functions.dumps: with megabytes in a call, a class or function of __main__ among them is
    still sent by value (the pickler looks at each class and function as it meets them, past
    LOOKS_MAX objects it searches the pickle): a fresh interpreter, whose __main__ has
    neither, loads each."""
    import subprocess
    import sys

    from pilot import functions

    script = {"__name__": "__main__"}
    exec("class Point:\n    def __init__(self, x): self.x = x\ndef twice(v): return 2 * v", script)
    point, twice = script["Point"], script["twice"]
    main = sys.modules["__main__"]  # (as a script's own: pickle would name them there)
    monkeypatch.setattr(main, "Point", point, raising=False)
    monkeypatch.setattr(main, "twice", twice, raising=False)
    big = bytes(range(256)) * 400  # (LARGE and more)
    for obj in [
        ((big, point(3)), {}),
        ((big,), {"f": twice}),
        ((big, [point(i) for i in range(functions.LOOKS_MAX + 10)]), {}),
        ((big, 7), {}),  # (nothing of __main__: the C pickler's own pickle)
    ]:
        blob = functions.dumps(obj)
        check = (
            "import pickle, sys\n"
            "(a, k) = pickle.loads(sys.stdin.buffer.read())\n"
            "print(len(a[0]), type(a[1]).__name__ if a[1:] else k['f'](21))"
        )
        out = subprocess.run(
            [sys.executable, "-c", check], input=blob, capture_output=True, timeout=60
        )
        assert out.returncode == 0, out.stderr.decode()
        assert out.stdout.decode().split()[0] == str(len(big))


def test_a_value_file_that_is_gone_fails_its_own_value_only(session):
    """A value by reference whose file is gone (removed, another host's directory): its
    unit's return_value says so (LookupError naming the file); a read of many units from the
    store still gives the others."""
    from pilot import functions
    from pilot.pmgr.store import open_store

    pilot, umgr = active_pilot(session, parts=((1,),))
    assert pilot.partitions[0].data_shared
    units = umgr.submit_units(
        [CUD(function=digest_and_back, args=(bytes([i]) * 70_000, 70_000)) for i in range(2)]
    )
    assert umgr.wait_units([u.uid for u in units], timeout=60) == [rp.DONE] * 2
    gone, kept = units
    assert functions.is_value_ref(gone.value) and functions.is_value_ref(kept.value)
    os.unlink(os.path.join(session.dir, "data", gone.value[len(functions.VALUE_REF) :]))
    with pytest.raises(LookupError, match="is not in"):
        _ = gone.return_value
    assert kept.return_value[1] == bytes([1]) * 70_000
    session.writer.flush(timeout=30)
    store = open_store(session.url)
    try:
        docs = store.get_many("units", [gone.uid, kept.uid])
        assert functions.is_value_ref(docs[gone.uid]["return_value"])  # (its reference)
        assert functions.unpack_value(docs[kept.uid]["return_value"])[1][:3] == bytes([1]) * 3
    finally:
        store.close()


def test_a_partition_of_several_nodes_runs_a_call_as_a_process_of_its_own(session):
    """On a partition of node daemons a function unit is a process of its own on its node
    (agent/workers/function_once.py): its value, its exception, its large arguments and value
    (as bytes: no function workers there see the data directory), its ids."""
    from pilot import functions

    pilot, umgr = active_pilot(
        session, resource="local.nodes4", parts=[rp.ComputePartitionDescription(nodes=2)]
    )
    assert not pilot.partitions[0].data_shared
    blob = os.urandom(100_000)
    units = umgr.submit_units(
        [
            CUD(function=digest_and_back, args=(blob, 70_000)),
            CUD(function=where_am_i),
            CUD(function="math.gcd", args=(12, 18)),
            CUD(function=dies),
        ]
    )
    states = umgr.wait_units([u.uid for u in units], timeout=60)
    assert states[:3] == [rp.DONE] * 3, [(u.uid, u.state, u.reason) for u in units]
    assert type(units[0].value) is bytes and not functions.is_value_ref(units[0].value)
    assert units[0].return_value[1] == blob[:70_000]
    assert units[1].return_value["uid"] == units[1].uid
    assert units[2].return_value == 6
    assert states[3] == rp.FAILED


def _templates(store) -> int:
    """How many description templates the store holds."""
    if store.url.startswith("sqlite"):
        return store.db.execute("SELECT COUNT(*) FROM templates").fetchone()[0]
    return store.db.templates.count_documents({})


def test_calls_share_one_template_and_each_keeps_its_own_call(make_session, database_url):
    """A call's packed function with its arguments as text is its unit's own
    (pmgr/core/blueprint.py): 40 calls of distinct arguments make one template, not 40, and
    each unit's description read back from the store, on either store, is its own call."""
    session = make_session(database_url=database_url)
    with rp.Executor(session=session, bundle=False) as ex:
        futs = [ex.submit(square, i, plus=1) for i in range(40)]
        assert [f.result(timeout=60) for f in futs] == [i * i + 1 for i in range(40)]
        units = [f.unit for f in futs]
        assert len({id(u.blueprint) for u in units}) == 1
        session.writer.flush(timeout=30)
        store = session.store
        assert _templates(store) <= 2  # (the warm-up's, if any, and the calls')
        calls = set()
        for u in units:
            doc = store.get("units", u.uid)
            assert doc["state"] == rp.DONE
            call = doc["description"]["function"]
            assert call == u.description.function
            assert u.as_dict()["description"]["function"] == call
            calls.add(call["args"])
        assert len(calls) == 40
