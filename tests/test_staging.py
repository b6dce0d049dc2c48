"""Data staging (pilot/staging.py, pmgr/transfers.py, partition/data_port.py): directives
checked when written, files moved over the pilot link in chunks, failures named."""

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
    ],
)
def test_bad_directives_are_refused_naming_the_field(directive, match):
    with pytest.raises(ValueError, match=match):
        CUD(executable="/bin/true", input_staging=[directive])


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
