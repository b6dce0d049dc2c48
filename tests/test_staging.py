"""Data staging (pilot/staging.py, pmgr/core/transfers.py, partition/client/data_port.py):
directives checked when written, files moved over the pilot link in chunks, failures named."""

from __future__ import annotations

import hashlib
import os

import pytest

import pilot as rp
from tests.conftest import active_pilot

CUD = rp.ComputeUnitDescription


def peak_kib(reset: bool = False) -> int:
    """This process's peak resident memory (VmHWM); reset=True starts a new peak from now
    (writing 5 to /proc/self/clear_refs) and returns the current resident size."""
    if reset:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["VmRSS" if reset else "VmHWM"].split()[0])


def digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@pytest.mark.parametrize(
    "directive,match",
    [
        ({"source": "pilot://a", "target": "client://b", "action": rp.COPY}, r"Copy acts on the"),
        ({"source": "a", "action": "Teleport"}, r"input_staging\[0\]\.action='Teleport'"),
        ({"source": "a", "colour": 1}, r"input_staging\[0\]: unknown key\(s\) \['colour'\]"),
        ({"target": "b"}, r"input_staging\[0\]: source is required"),
        ("ftp://host/a", r"scheme must be one of"),
        ({"source": "a", "flags": ["Fast"]}, r"flags=\['Fast'\] must be a list of"),
        ({"source": "file://rel", "target": "x"}, r"a file:// path must be absolute"),
        # (a unit's `unit://../../state.db` replaced the session's store)
        ({"source": "a", "target": "unit://../../state.db"}, r"target=.*: .* no '\.\.' in it"),
        ({"source": "pilot://x/../../y", "target": "b"}, r"source=.*stays inside its directory"),
        ({"source": "a", "target": "resource://.."}, r"stays inside its directory"),
    ],
)
def test_bad_directives_are_refused_naming_the_field(directive, match):
    with pytest.raises(ValueError, match=match):
        CUD(executable="/bin/true", input_staging=[directive])


def test_a_sandboxed_path_that_climbs_out_is_refused_where_it_is_acted_on_too(tmp_path):
    """(the agent's and the data port's own check: a directive that came some other way)"""
    from pilot import staging

    with pytest.raises(staging.StagingError, match="stays inside its directory"):
        staging.resolve("unit://../../state.db", str(tmp_path), str(tmp_path / "u"))
    bad = {"source": "unit://a", "target": "pilot://../x", "action": rp.COPY, "flags": []}
    with pytest.raises(ValueError, match="is not a pilot-side directive"):
        staging.check_wire("input_staging", [bad])


def test_directives_take_rps_forms(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d = CUD(
        executable="x",
        input_staging=["in.dat", "a > b", "c < d", {"source": "pilot:///s", "target": "t"}],
        output_staging=["out.dat"],
    )
    here = str(tmp_path)
    assert [(x["source"], x["target"], x["action"]) for x in d.input_staging] == [
        (f"client://{here}/in.dat", "unit://in.dat", rp.TRANSFER),
        (f"client://{here}/a", "unit://b", rp.TRANSFER),
        (f"client://{here}/d", "unit://c", rp.TRANSFER),
        ("pilot:///s", "unit://t", rp.COPY),  # no client end: a copy on the pilot's side
    ]
    assert d.output_staging[0]["target"] == f"client://{here}/out.dat"
    assert CUD(d.to_stored()) == d  # the normal form is stable


def test_a_large_file_goes_both_ways_in_chunks(session, tmp_path):
    """64 MiB to the unit and back, byte for byte; the client never holds it in memory."""
    src = tmp_path / "big.bin"
    with open(src, "wb") as f:
        for _ in range(64):
            f.write(os.urandom(1 << 20))
    pilot, umgr = active_pilot(session, parts=((1,),))
    before = peak_kib(reset=True)
    u = umgr.submit_units(
        CUD(
            executable="/bin/cp",
            arguments=["big.bin", "copy.bin"],
            input_staging=[str(src)],
            output_staging=[f"copy.bin > {tmp_path / 'back.bin'}"],
        )
    )
    assert u.wait(timeout=120) == rp.DONE, u.reason
    grown = peak_kib() - before
    assert digest(tmp_path / "back.bin") == digest(src)
    assert digest(os.path.join(u.sandbox, "big.bin")) == digest(src)
    assert grown < 32 * 1024, f"the client grew by {grown} KiB moving 64 MiB"
    assert [s for s, _ in u.history][-2:] == [rp.EXECUTING, rp.DONE]


def test_failed_steps_fail_the_unit_naming_the_directive_unless_skipped(session, tmp_path):
    pilot, umgr = active_pilot(session, parts=((1,),))
    no_output = umgr.submit_units(
        CUD(executable="/bin/true", output_staging=[f"never.dat > {tmp_path / 'x'}"])
    )
    no_copy = umgr.submit_units(
        CUD(
            executable="/bin/true",
            input_staging=[{"source": "pilot:///missing", "target": "m", "action": rp.COPY}],
        )
    )
    skipped = umgr.submit_units(
        CUD(
            executable="/bin/true",
            input_staging=[
                {"source": "pilot:///missing", "target": "m", "flags": [rp.SKIP_FAILED]}
            ],
            output_staging=[
                {"source": "never.dat", "target": str(tmp_path / "y"), "flags": [rp.NON_FATAL]}
            ],
        )
    )
    umgr.wait_units(timeout=60)
    assert no_output.state == rp.FAILED
    assert no_output.reason.startswith("output staging: Transfer unit://never.dat")
    assert no_copy.state == rp.FAILED and "input staging: Copy pilot:///missing" in no_copy.reason
    assert skipped.state == rp.DONE, skipped.reason


def _tree(root, kind: str) -> None:
    """A source: a file, or a directory holding a file and a subdirectory."""
    if kind == "file":
        root.write_text("data\n")
        return
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("a\n")
    (root / "sub" / "b.txt").write_text("b\n")


def _listing(root) -> dict:
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = open(path).read()
    return out


@pytest.mark.parametrize("kind", ["file", "dir"])
@pytest.mark.parametrize(
    "target", ["new", "existing_dir", "nested/new", "existing_dir/", "new_dir/"]
)
def test_a_tarball_leaves_what_copy_leaves(tmp_path, kind, target):
    """TARBALL's unpacking (pilot/staging.py untar_as_copy) against COPY (staging.act) on the
    same source and target: the same files, in the same places."""
    import tarfile

    from pilot import staging

    src = tmp_path / "src" / "input.dat"
    src.parent.mkdir()
    _tree(src, kind)
    results = []
    for how in ("copy", "tar"):
        box = tmp_path / how
        box.mkdir()
        if target.startswith("existing_dir"):
            (box / "existing_dir").mkdir()
            (box / "existing_dir" / "kept.txt").write_text("kept\n")
        dst = str(box / target)
        if how == "copy":
            d = {"source": f"file://{src}", "target": f"file://{dst}", "action": rp.COPY}
            assert staging.act({**d, "flags": [rp.CREATE_PARENTS]}, str(box), str(box)) is None
        else:
            packed = tmp_path / "t.tar"
            with tarfile.open(packed, "w") as tf:
                tf.add(src, arcname=src.name)
            staging.untar_as_copy(str(packed), dst)
        results.append(_listing(box))
    assert results[0] == results[1] and results[0]
    assert not [n for n in os.listdir(tmp_path / "tar") if n.startswith(".untar")]


def test_a_tarball_to_a_task_file_leaves_the_file(session, tmp_path, monkeypatch):
    """RP 1.x's 11_task_input_data_tar: TARBALL client:///input.dat -> task:///input.dat puts
    the file at its target (not a directory input.dat/ holding it), and back to the client."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "input.dat").write_text("0123456789\n")
    _tree(tmp_path / "tree", "dir")
    pilot, umgr = active_pilot(session, parts=((1,),))
    u = umgr.submit_units(
        CUD(
            executable="/bin/sh",
            arguments=["-c", "wc -c < input.dat; cat tree/sub/b.txt; cp input.dat back.dat"],
            input_staging=[
                {
                    "source": "client:///input.dat",
                    "target": "task:///input.dat",
                    "action": rp.TARBALL,
                },
                {"source": "client:///tree", "target": "task:///tree", "action": rp.TARBALL},
            ],
            output_staging=[
                {
                    "source": "task:///back.dat",
                    "target": "client:///out/back.dat",
                    "action": rp.TARBALL,
                },
            ],
        )
    )
    assert u.wait(timeout=60) == rp.DONE, (u.reason, u.stderr)
    assert os.path.isfile(os.path.join(u.sandbox, "input.dat"))
    assert u.stdout.split() == ["11", "b"]
    assert (tmp_path / "out" / "back.dat").read_text() == "0123456789\n"


def test_a_directory_transfers_both_ways(session, tmp_path, monkeypatch):
    """TRANSFER of a directory (with RECURSIVE or without) leaves what COPY leaves, in and out:
    it crosses as a tar (it failed: 'Is a directory')."""
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path / "tree", "dir")
    pilot, umgr = active_pilot(session, parts=((1,),))
    u = umgr.submit_units(
        CUD(
            executable="/bin/sh",
            arguments=["-c", "cat tree/sub/b.txt; mkdir -p made/deep && echo r > made/deep/r"],
            input_staging=[
                {"source": "client:///tree", "target": "unit:///tree", "action": rp.TRANSFER},
                {
                    "source": "client:///tree",
                    "target": "unit:///again/",
                    "action": rp.TRANSFER,
                    "flags": [rp.RECURSIVE, rp.CREATE_PARENTS],
                },
            ],
            output_staging=[
                {"source": "unit:///made", "target": "client:///back", "action": rp.TRANSFER}
            ],
        )
    )
    assert u.wait(timeout=60) == rp.DONE, (u.reason, u.stderr)
    assert u.stdout.split() == ["b"]
    assert os.path.isfile(os.path.join(u.sandbox, "again", "tree", "sub", "b.txt"))
    assert (tmp_path / "back" / "deep" / "r").read_text() == "r\n"


def test_a_pilots_staging_lands_where_a_units_copy_would(session, tmp_path, monkeypatch):
    """PilotDescription input_staging (pmgr/compat/rp1/pilot_staging.py) places as COPY does: a
    target ending in / is a directory the source goes in under its own name."""
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path / "data", "dir")
    (tmp_path / "one.txt").write_text("1\n")
    pd = rp.PilotDescription(
        {
            "resource": "local.localhost",
            "cores": 1,
            "runtime": 5,
            "input_staging": [
                {"source": "client:///data", "target": "pilot:///inputs/"},
                {"source": "client:///one.txt", "target": "pilot:///inputs/"},
                {"source": "client:///data", "target": "pilot:///merged"},
            ],
        }
    )
    pilot = rp.PilotManager(session).submit_pilots(pd)
    assert pilot.partitions[0].wait(rp.ACTIVE, timeout=20) == rp.ACTIVE
    box = pilot.sandbox
    assert _listing(os.path.join(box, "inputs")) == {
        "data/a.txt": "a\n",
        "data/sub/b.txt": "b\n",
        "one.txt": "1\n",
    }
    assert _listing(os.path.join(box, "merged")) == {"a.txt": "a\n", "sub/b.txt": "b\n"}
    pilot.cancel()
