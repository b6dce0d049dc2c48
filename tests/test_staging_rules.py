"""Three silent-wrong-output defects RADICAL-Pilot scripts hit, as RP resolves them: client://
is the client's working directory (never the file system's root), a unit with output staging
keeps its stdout, and a shell argument that holds a glob in a sentence stays one word."""

from __future__ import annotations

import os

import pilot as rp
from pilot import staging
from tests.conftest import active_pilot


def test_client_urls_are_the_clients_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    got = staging.normalize(
        "CUD", "output_staging", [{"source": "task:///o", "target": "client:///got.txt"}], True
    )
    assert got[0]["target"] == f"client://{tmp_path}/got.txt"
    assert got[0]["source"] == "unit:///o"  # (task:// is RP 1.x's name of unit://)
    again = staging.normalize("CUD", "output_staging", got, True, "/elsewhere")
    assert again == got  # the normal form normalizes to itself (stored, read back)
    plain = staging.normalize("CUD", "input_staging", ["/etc/hosts", "rel.txt"], False)
    assert [d["source"] for d in plain] == ["client:///etc/hosts", f"client://{tmp_path}/rel.txt"]


def test_staged_units_keep_their_output_and_land_beside_the_client(session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "input.dat").write_text("data\n")
    pilot, umgr = active_pilot(session, parts=((1,),))
    unit = umgr.submit_units(
        rp.ComputeUnitDescription(
            executable="/bin/sh",
            arguments=["-c", "cat input.dat; echo out > o.txt; echo err >&2"],
            input_staging=[{"source": "client:///input.dat", "target": "unit:///input.dat"}],
            output_staging=[{"source": "unit:///o.txt", "target": "client:///got.txt"}],
        )
    )
    assert unit.wait(timeout=60) == rp.DONE, unit.reason
    assert unit.stdout == "data\n" and unit.stderr == "err\n"
    assert (tmp_path / "got.txt").read_text() == "out\n"
    assert not os.path.exists("/got.txt") or os.path.getmtime("/got.txt") < unit.history[0][1]


def test_a_sentence_holding_a_glob_is_one_word(session, tmp_path):
    (tmp_path / "a.conf").write_text("")
    (tmp_path / "b.conf").write_text("")
    pilot, umgr = active_pilot(session, parts=((1,),))
    sentence, bare = umgr.submit_units(
        [
            rp.ComputeUnitDescription(
                executable="/bin/sh", arguments=["-c", f"ls {tmp_path}/*.conf | wc -l"]
            ),
            rp.ComputeUnitDescription(executable="/bin/ls", arguments=[f"{tmp_path}/*.conf"]),
        ]
    )
    assert set(umgr.wait_units(timeout=60)) == {rp.DONE}
    assert sentence.stdout.strip() == "2", sentence.stdout
    assert bare.stdout.split() == [f"{tmp_path}/a.conf", f"{tmp_path}/b.conf"]
