"""MkDocs hooks of the manual (mkdocs.yml `hooks:`): the API reference, made from the code.

What they do, in build order:
- on_config: a source tree for mkdocstrings (griffe reads source, it does not import): the
  installed package `pilot` maps the folders agent/, partition/, pmgr/, configs/ in as its
  subpackages (setup.cfg's package_dir); build/docs-src/pilot is that mapping in symlinks, so
  that `pilot.pmgr.core.session.Session` is found as source.
- on_files: the pages under reference/api/, one `::: identifier` block per public class and
  function of `pilot` (its __all__), `pilot.entk` and `pilot.parsl`, grouped by SECTIONS, and a
  table of their constants.  A public name without a docstring fails the build (an error,
  strict or not); one that PAGES does not place goes under "Other" and is logged.
- on_files, too: reference/protocol.md, every message on every link, from pilot/wire.py's
  TABLE (`protocol_page`): the manual's protocol page is the table the processes dispatch from.
tests/test_docs.py runs the same docstring check without MkDocs (`missing_docstrings`).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "build" / "docs-src"
SUBPACKAGES = {"agent": "agent", "partition": "partition", "pmgr": "pmgr", "configs": "configs"}
log = logging.getLogger("mkdocs.hooks.api")

# The public modules and, per reference page, its sections: (title, names).  Names are as the
# module exports them; an alias (RaptorMaster, ResourceOccupation) is named with its object.
PAGES = {
    "pilot": (
        "reference/api/pilot.md",
        "`import pilot as rp`",
        [
            ("Sessions and managers", ["Session", "PilotManager", "UnitManager", "UnitStream"]),
            ("Handles: pilots, partitions, units", ["Pilot", "Partition", "Unit"]),
            (
                "Descriptions",
                [
                    "ComputePilotDescription",
                    "ComputePartitionDescription",
                    "ComputeUnitDescription",
                    "UnitGroup",
                    "UnitTemplate",
                ],
            ),
            ("Placement policy", ["Policy"]),
            ("concurrent.futures", ["Executor", "ExecutorError"]),
            ("Errors", ["PilotError", "PilotOwned", "StoreUnavailable", "IllegalTransition"]),
            (
                "RADICAL-Pilot 1.x",
                ["PilotDescription", "TaskDescription", "TaskManager", "Task", "pythontask"],
            ),
            ("Raptor", ["Raptor", "RaptorMaster", "RaptorWorker"]),
            (
                "RADICAL-Pilot 1.x node lists",
                ["Node", "NodeList", "RankRequirements", "RO", "ResourceOccupation", "Slot"],
            ),
        ],
    ),
    "pilot.entk": (
        "reference/api/entk.md",
        "`pilot.entk`: RADICAL-EnTK's API",
        [
            ("Workflow", ["Pipeline", "Stage", "Task", "AppManager"]),
            ("Resource requests", ["CpuReqs", "GpuReqs"]),
            ("Errors", ["EnTKError", "EnTKMissingError", "EnTKTypeError", "EnTKValueError"]),
        ],
    ),
    "pilot.parsl": (
        "reference/api/parsl.md",
        "`pilot.parsl`: the Parsl executor",
        [("Executor", ["PilotExecutor"])],
    ),
}
# the handles inherit wait/register_callback/state from their base: show those too
INHERITED = {"Pilot", "Partition", "Unit", "Task", "PilotManager", "TaskManager"}
# ... or some of them: the UnitManager's queries (wait_units, ...) are its base UnitQueries'
INHERITED_NAMES = {"UnitManager": ["wait_units", "states", "list_units", "get_units"]}

# Public names whose docstring is still to be written, in files other engineers were changing
# when the manual was made (the list with what each lacks: /work/notes/docstrings-todo.md).
# A name here that has a docstring now is reported by the build; take it off the list.
WAITING: set[str] = set()  # e.g. "pilot.Session" (none waiting now)


def module_file(modname: str) -> Path:
    return ROOT / (modname.replace(".", "/") + ".py")


def public(modname: str) -> list[tuple[str, object]]:
    """(name, object) of a module's __all__: classes and functions only."""
    mod = importlib.import_module(modname)
    out = []
    for name in mod.__all__:
        obj = getattr(mod, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            out.append((name, obj))
    return out


def own_doc(obj) -> str:
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
    return (doc or "").strip()


def present() -> list[str]:
    """The public modules in this checkout (pilot.entk may be missing from an older one)."""
    return [m for m in PAGES if module_file(m).exists() or m == "pilot"]


def missing_docstrings() -> tuple[list[str], list[str]]:
    """(public names without a docstring that WAITING does not excuse, WAITING names that have
    one now)."""
    missing, stale = [], []
    for modname in present():
        for name, obj in public(modname):
            key = f"{modname}.{name}"
            if not own_doc(obj) and key not in WAITING:
                missing.append(f"{key} ({inspect.getsourcefile(obj)})")
            elif own_doc(obj) and key in WAITING:
                stale.append(key)
    return missing, stale


def unplaced() -> list[str]:
    """Public classes and functions that no section of PAGES names."""
    out = []
    for modname in present():
        placed = {n for _, names in PAGES[modname][2] for n in names}
        out += [f"{modname}.{n}" for n, _ in public(modname) if n not in placed]
    return out


def constants(modname: str) -> list[tuple[str, object]]:
    mod = importlib.import_module(modname)
    out = []
    for name in mod.__all__:
        obj = getattr(mod, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismodule(obj)):
            out.append((name, obj))
    return out


def page(modname: str) -> str:
    path, title, sections = PAGES[modname]
    lines = [f"# {title}", ""]
    if not module_file(modname).exists() and modname != "pilot":
        return "\n".join(lines + [f"`{modname}` is not in this checkout.", ""])
    objs = dict(public(modname))
    lines += [
        f"Every public class and function of `{modname}`, from its docstrings.",
        "",
    ]
    placed = {n for _, names in sections for n in names}
    other = [n for n in objs if n not in placed]
    for heading, names in sections + ([("Other", other)] if other else []):
        names = [n for n in names if n in objs]  # (a name not exported in this checkout)
        if not names:
            continue
        lines += [f"## {heading}", ""]
        for name in names:
            obj = objs[name]
            ident = f"{obj.__module__}.{obj.__qualname__}"
            if obj.__name__ != name:  # an alias
                lines += [f"### {name}", "", f"Another name of `{obj.__name__}` (above).", ""]
                continue
            lines += [f"::: {ident}"]
            opts = {"heading_level": 3}
            if name in INHERITED:
                opts["inherited_members"] = True
            elif name in INHERITED_NAMES:
                opts["inherited_members"] = INHERITED_NAMES[name]
            lines += ["    options:"] + [f"      {k}: {_yaml(v)}" for k, v in opts.items()]
            lines += [""]
    consts = constants(modname)
    if consts:
        lines += ["## Constants", "", "| name | value |", "|---|---|"]
        for name, value in consts:
            text = repr(value).replace("|", "\\|")
            if len(text) > 60:
                text = text[:57] + "..."
            lines += [f"| `{name}` | `{text}` |"]
        lines += [""]
    return "\n".join(lines)


def _yaml(value) -> str:
    """An option's value as YAML: a list of names in flow style, else true/false/a number."""
    if isinstance(value, list):
        return "[" + ", ".join(value) + "]"
    return str(value).lower()


def source_tree() -> Path:
    """build/docs-src/pilot: pilot/'s files and the mapped subpackages, as symlinks."""
    dst = SRC / "pilot"
    dst.mkdir(parents=True, exist_ok=True)
    want = {p.name: p for p in (ROOT / "pilot").iterdir() if p.name != "__pycache__"}
    want.update({name: ROOT / folder for name, folder in SUBPACKAGES.items()})
    for old in dst.iterdir():
        if old.name not in want or os.readlink(old) != str(want[old.name]):
            old.unlink()
    for name, target in want.items():
        if not (dst / name).is_symlink():
            (dst / name).symlink_to(target)
    return SRC


PROTOCOL_PAGE = "reference/protocol.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def protocol_page() -> str:
    """reference/protocol.md: pilot/wire.py's TABLE, one section per link."""
    from pilot import wire

    lines = [
        "# Wire protocol",
        "",
        "Every message between the processes of a pilot, made from the table they dispatch from",
        "(`pilot/wire.py`); the framing, heartbeats and timeouts are in `pilot/protocol.py`, the",
        "commands a pilot obeys (`cmd`) in `partition/control.py`.  A message is ZeroMQ",
        "multipart: the kind, then its frames; BODY is compact JSON, checked (the check named)",
        "before any handler runs.  A kind the receiver does not get on that link, or a body its",
        "check refuses, is a bad message: logged and dropped (answered with an error where a",
        "reply is expected); it never stops a component.",
        "",
    ]
    for link, sockets in wire.LINKS.items():
        lines += [f"## The {link} link", "", _cell(sockets), ""]
        lines += ["| kind | from -> to | frames | body | check | meaning |", "|---" * 6 + "|"]
        for e in wire.TABLE:
            if e.link != link:
                continue
            check = "(its handler reads the frames)"
            if e.check is not None:
                name = next(n for n, v in vars(wire.m).items() if v is e.check and n.isupper())
                check = f"`messages.{name}`"
            lines.append(
                f"| `{e.kind.decode()}` | {e.sender} -> {e.receiver} | `{e.frames}` | "
                f"{_cell(e.body)} | {check} | {_cell(e.meaning)} |"
            )
        lines.append("")
    return "\n".join(lines)


# ---- the hooks ---------------------------------------------------------------------------------
def on_config(config, **kwargs):
    source_tree()
    return config


def on_files(files, config, **kwargs):
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import File

    missing, stale = missing_docstrings()
    if missing:
        raise PluginError("\n".join(f"public name without a docstring: {m}" for m in missing))
    for name in unplaced():
        log.info("docs/hooks.py PAGES: %s is under 'Other'; give it a section", name)
    for key in stale:
        log.info("docs/hooks.py WAITING: %s has a docstring now; take it off the list", key)
    for modname, (path, _, _) in PAGES.items():
        files.append(File.generated(config, path, content=page(modname)))
    files.append(File.generated(config, PROTOCOL_PAGE, content=protocol_page()))
    return files
