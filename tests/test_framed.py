"""JSON with its bytes beside it (pilot/wire/framed.py) and large bytes beside the store
(pmgr/store/data_files.py): what goes in comes out, and what does not match is refused."""

from __future__ import annotations

import os

import pytest

from pilot import validate
from pilot.pmgr.store import data_files
from pilot.wire import framed


def test_bytes_become_frames_and_come_back_in_place():
    a, b = os.urandom(100_000), b""
    value = {"args": a, "more": [1, {"k": b}], "text": "\u0000frame"}
    text, frames = framed.dumps(value)
    assert frames == [a, b] and len(text) < 200
    assert framed.loads(text, frames) == value
    assert framed.loads(*framed.dumps({"plain": [1, 2]})) == {"plain": [1, 2]}
    assert framed.decode(framed.encode(value)) == value  # (the store's one-BLOB form)
    assert framed.encode({"plain": 1}) == '{"plain":1}'


def test_too_many_frames_are_refused():
    with pytest.raises(validate.Invalid, match="more than"):
        framed.loads("[]", [b"x"] * (framed.FRAMES_MAX + 1))


def test_large_bytes_go_to_files_and_come_back(tmp_path):
    data = data_files.DataFiles(str(tmp_path / "data"))
    blob = os.urandom(3 << 20)
    stored = data_files.encode({"function": {"args": blob}, "cpus": 1}, data)
    assert isinstance(stored, str) and len(stored) < 200  # a reference, not the bytes
    (name,) = os.listdir(tmp_path / "data")
    assert os.path.getsize(tmp_path / "data" / name) == len(blob)
    assert data_files.decode(stored, data) == {"function": {"args": blob}, "cpus": 1}
    ref = data_files.store_value(blob, data, "unit.000001")
    assert ref.startswith(data_files.VALUE_REF) and data_files.value(ref, data) == blob
    small = data_files.store_value("c21hbGw=", data, "unit.000002")
    assert small == "c21hbGw="  # (small: base64 text)
    assert data_files.value("c21hbGw=", data) == "c21hbGw="
    with pytest.raises(LookupError, match="not a name"):
        data.get("../state.db")
    os.unlink(tmp_path / "data" / name)
    with pytest.raises(LookupError, match="is not in"):
        data.get(name)
    # a read keeps the reference of a file that is gone: its own unit fails on it, not the
    # read of all (a call's arguments, a value)
    assert data_files.decode(stored, data) == {
        "function": {"args": {data_files.REF: name}},
        "cpus": 1,
    }
    assert data_files.value(data_files.VALUE_REF + name, data) == data_files.VALUE_REF + name
