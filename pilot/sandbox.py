"""Where a unit's files are, as every layer sees them: the agent makes and fills them, the
bootstrap's data port reads and writes them (pilot stage_in/stage_out), the client names them
(a unit's stdout/stderr paths).

    <pilot sandbox>/<uid>/            a unit's sandbox (or the one its `sandbox` names, relative
                                      to the pilot sandbox or absolute; units may share one)
        STDOUT, STDERR                its output, unless it names files (stdout=, stderr=) ...
        <uid>.out, <uid>.err          ... or shares a named sandbox (RADICAL-Pilot's names)
    <pilot sandbox>/<partition>.functions/   where a partition's function workers run (a
                                      function unit's sandbox)
"""

from __future__ import annotations

import os


def sandbox_of(root: str, unit: dict) -> str:
    """The unit's sandbox: `sandbox` (relative to the pilot sandbox `root`, or absolute) or
    ROOT/<uid>."""
    named = unit.get("sandbox")
    if named:
        return os.path.join(root, named)
    return f"{root}{unit['uid']}" if root.endswith(os.sep) else f"{root}{os.sep}{unit['uid']}"


def output_names(unit: dict) -> tuple[str, str]:
    """Its stdout / stderr files: as named, else STDOUT / STDERR, or <uid>.out / <uid>.err in
    a sandbox it names (units may share one)."""
    if unit.get("sandbox"):
        out, err = f"{unit['uid']}.out", f"{unit['uid']}.err"
    else:
        out, err = "STDOUT", "STDERR"
    return unit.get("stdout") or out, unit.get("stderr") or err


def functions_dir(root: str, part: str) -> str:
    """Where partition `part`'s function workers run (and write what they write outside a
    call, into `functions_dir(...) + ".log"`): a function unit's sandbox."""
    return os.path.join(root, f"{part}.functions")
