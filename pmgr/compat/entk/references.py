"""Where an EnTK task's data references point, and the staging directives its eight data lists
become (RADICAL-Pilot 1.x's, which the TaskManager runs: pilot/staging.py).

References (in data directives, and at the start of an argument):
    $SHARED/x                           x in the pilot sandbox (where AppManager.shared_data
                                        goes); in an argument: $RP_PILOT_SANDBOX/x
    $Pipeline_<p>_Stage_<s>_Task_<t>/x  x in that task's sandbox; p, s, t each a uid or a name
                                        (an unnamed pipeline or stage is 'None', an unnamed
                                        task '', as EnTK resolves them); EnTK's own examples'
                                        spelling $Pipline_ is the same
A reference that names no task, or more than one, is an EnTKValueError saying which.

A directive is 'source > target' or 'source' (target: the source's file name).  Its ends:
    field                  source                      target                  action
    upload_input_data      the client (cwd-relative)   the task's sandbox      TRANSFER
    copy/link/move_input   the pilot's file system     the task's sandbox      COPY/LINK/MOVE
    copy/link/move_output  the task's sandbox          the pilot's file system COPY/LINK/MOVE
    download_output_data   the task's sandbox          the client (cwd-relative) TRANSFER
On the pilot's file system a relative path is in the pilot sandbox (as $SHARED), an absolute
one is itself; a URL (pilot:///x, client:///x, ...) is taken as written.
"""

from __future__ import annotations

import os
from typing import Protocol

from pilot import staging
from pilot.pmgr.compat.entk.errors import EnTKValueError

SHARED = "$SHARED"
PIPELINE_WORDS = ("$Pipeline", "$Pipline")  # (the second: EnTK's examples spell it so)

# field -> (where its source is, where its target is, action)
ENDS = {
    "upload_input_data": ("client", "task", staging.TRANSFER),
    "copy_input_data": ("pilot", "task", staging.COPY),
    "link_input_data": ("pilot", "task", staging.LINK),
    "move_input_data": ("pilot", "task", staging.MOVE),
    "copy_output_data": ("task", "pilot", staging.COPY),
    "link_output_data": ("task", "pilot", staging.LINK),
    "move_output_data": ("task", "pilot", staging.MOVE),
    "download_output_data": ("task", "client", staging.TRANSFER),
}
INPUT = tuple(f for f in ENDS if f.endswith("_input_data"))


class Sandboxes(Protocol):
    """What resolving a reference needs: the workflow's objects and their sandboxes."""

    def pipelines(self) -> list:
        """Every pipeline a reference may name."""

    def sandbox_of(self, task) -> str:
        """The absolute path of `task`'s sandbox on the pilot's file system."""


def is_reference(text: str) -> bool:
    head = text.split("/", 1)[0]
    return head == SHARED or head.split("_", 1)[0] in PIPELINE_WORDS


def referenced_task(owner: str, head: str, where: Sandboxes):
    """The task `$Pipeline_<p>_Stage_<s>_Task_<t>` names."""
    words = head.split("_")
    if len(words) != 6 or words[0] not in PIPELINE_WORDS or words[2:5:2] != ["Stage", "Task"]:
        raise EnTKValueError(
            f"{owner}: reference {head!r} must be $SHARED or "
            "$Pipeline_<pipeline>_Stage_<stage>_Task_<task> (each a name or a uid)"
        )
    p = _one(owner, head, "pipeline", words[1], where.pipelines(), "None")
    s = _one(owner, head, "stage", words[3], p.stages, "None")
    return _one(owner, head, "task", words[5], s.ordered_tasks(), "")


def _one(owner: str, head: str, kind: str, key: str, among, unnamed: str):
    found = [x for x in among if x.uid == key]
    if not found:
        found = [x for x in among if (x.name or unnamed) == key]
    if len(found) != 1:
        known = sorted({x.uid for x in among} | {x.name for x in among if x.name})
        what = "no" if not found else f"{len(found)}"
        raise EnTKValueError(
            f"{owner}: reference {head!r}: {what} {kind} has the uid or name {key!r} "
            f"(known: {known[:12]}); refer to it by its uid"
        )
    return found[0]


def pilot_side(owner: str, text: str, where: Sandboxes) -> str:
    """A location on the pilot's file system as a URL."""
    head, sep, rest = text.partition("/")
    if head == SHARED:
        return f"pilot:///{rest}"
    if is_reference(text):
        box = where.sandbox_of(referenced_task(owner, head, where))
        return f"file://{os.path.join(box, rest) if rest else box}"
    if staging.split(text)[0]:
        return text
    return f"file://{text}" if text.startswith("/") else f"pilot:///{text}"


def directives(owner: str, field: str, items: list[str], where: Sandboxes) -> list[dict]:
    """The staging directives of one of a task's data lists."""
    source_end, target_end, action = ENDS[field]
    out = []
    for i, item in enumerate(items):
        parts = [p.strip() for p in item.split(">")]
        if len(parts) > 2 or not all(parts):
            raise EnTKValueError(
                f"{owner}: {field}[{i}]={item!r} must be 'source > target' or 'source'"
            )
        name = f"{owner}: {field}[{i}]"
        source = _end(name, source_end, parts[0], where)
        base = os.path.basename(parts[0].rstrip("/"))
        target = parts[1] if len(parts) == 2 else base
        if is_reference(target) and "/" not in target.rstrip("/"):  # a sandbox: the file in it
            target = f"{target.rstrip('/')}/{base}"
        target = _end(name, target_end, target, where)
        out.append({"source": source, "target": target, "action": action})
    return out


def _end(name: str, end: str, text: str, where: Sandboxes) -> str:
    if end == "pilot":
        return pilot_side(name, text, where)
    if is_reference(text):
        raise EnTKValueError(
            f"{name}: {text!r} is on the pilot's file system; this end is the "
            f"{'client' if end == 'client' else 'task sandbox'}"
        )
    if end == "task":
        return text if staging.split(text)[0] else f"task:///{text.lstrip('/')}"
    return text  # the client: a path (relative to the working directory) or a URL


def argument(owner: str, arg: str, where: Sandboxes) -> str:
    """An argument with a reference at its start made a path (EnTK's resolve_arguments)."""
    if not arg.startswith("$") or not is_reference(arg):
        return arg
    head, sep, rest = arg.partition("/")
    if head == SHARED:
        return "$RP_PILOT_SANDBOX" + sep + rest
    return where.sandbox_of(referenced_task(owner, head, where)) + sep + rest
