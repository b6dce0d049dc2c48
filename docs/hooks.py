"""MkDocs hooks of the manual (mkdocs.yml `hooks:`): the API reference, made from the code.

What they do, in build order:
- on_config: a source tree for mkdocstrings (griffe reads source, it does not import): the
  installed package `pilot` maps the folders agent/, partition/, pmgr/, configs/ in as its
  subpackages (setup.cfg's package_dir); build/docs-src/pilot is that mapping in symlinks, so
  that `pilot.pmgr.core.session.Session` is found as source.
- on_files: the pages under reference/api/, one `::: identifier` block per public class and
  function of `pilot` (its __all__), `pilot.entk` and `pilot.parsl`, grouped by PAGES' sections,
  and a table of their constants; a class shows only the methods and properties users call
  (CALLED, docs/api_members.py).  A public name, or a CALLED member, without a docstring fails
  the build (an error, strict or not); a public name that PAGES does not place goes under
  "Other", and a member neither CALLED nor INTERNAL is left out, both logged (and failures of
  tests/test_docs.py: `unplaced`, `unsorted_members`).
  And reference/configuration.md with its key table filled in (`configuration_page`): the page
  keeps its prose and KEYS_MARK, which becomes a row per resource config key, made from the
  key's default and doc in pilot/config/resource_keys.py.
- on_files, too: reference/protocol.md, every message on every link, from pilot/wire/links.py's
  TABLE (`protocol_page`): the manual's protocol page is the table the processes dispatch from.
tests/test_docs.py runs the same checks without MkDocs (`missing_docstrings`, `unplaced`,
`unsorted_members`, `configuration_page`).
"""

from __future__ import annotations

import importlib
import importlib.util
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
                    "Adapt",
                    "ComputePartitionDescription",
                    "ComputeUnitDescription",
                    "UnitGroup",
                    "UnitTemplate",
                ],
            ),
            ("Placement policy", ["Policy"]),
            ("concurrent.futures", ["Executor", "ExecutorError"]),
            (
                "Errors",
                [
                    "PilotError",
                    "PilotOwned",
                    "PilotIncompatible",
                    "StoreUnavailable",
                    "IllegalTransition",
                ],
            ),
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
# The public methods and properties of the documented classes users call (CALLED: the pages
# show only these) and the ones other layers call (INTERNAL): docs/api_members.py.
_spec = importlib.util.spec_from_file_location(
    "api_members", Path(__file__).with_name("api_members.py")
)
_members = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_members)
CALLED, INTERNAL = _members.CALLED, _members.INTERNAL

# Public names whose docstring is still to be written, in files other engineers were changing
# when the manual was made (the list with what each lacks: /work/notes/docstrings-todo.md).
# A name here that has a docstring now is reported by the build; take it off the list.
WAITING: set[str] = {"pilot.pmgr.compat.rp1.task_events.TaskEvents.unregister_callback"}


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
    """(public names, and members CALLED lists, without a docstring that WAITING does not
    excuse; WAITING names that have one now)."""
    missing, stale = [], []
    entries = {f"{m}.{n}": (own_doc(obj), obj) for m in present() for n, obj in public(m)}
    for cls in documented_classes():
        for name in members(cls)[0]:
            function = _function(inspect.getattr_static(cls, name))
            entries[f"{_where(cls, name)}.{name}"] = ((function.__doc__ or "").strip(), function)
    for key, (doc, obj) in entries.items():
        if not doc and key not in WAITING:
            missing.append(f"{key} ({inspect.getsourcefile(obj)})")
        elif doc and key in WAITING:
            stale.append(key)
    return missing, stale


def _function(value):
    """The function behind a method, class or static method, or property."""
    if isinstance(value, property):
        return value.fget
    return getattr(value, "__func__", value)


def unplaced() -> list[str]:
    """Public classes and functions that no section of PAGES names."""
    out = []
    for modname in present():
        placed = {n for _, names in PAGES[modname][2] for n in names}
        out += [f"{modname}.{n}" for n, _ in public(modname) if n not in placed]
    return out


def _where(cls, name: str) -> str | None:
    """`module.Class` of the project class that defines `name` for `cls`, or None (Python's)."""
    for c in cls.__mro__:
        if name in c.__dict__:
            return f"{c.__module__}.{c.__qualname__}" if c.__module__.startswith("pilot") else None
    return None


def _is_member(cls, name: str) -> bool:
    """A public method (also a class or static one) or property of `cls`."""
    value = inspect.getattr_static(cls, name)
    return isinstance(value, (property, classmethod, staticmethod)) or inspect.isfunction(value)


def members(cls) -> tuple[list[str], list[str]]:
    """(the names CALLED lists for `cls`, the public ones neither CALLED nor INTERNAL lists)."""
    shown, unsorted = [], []
    for name in dir(cls):
        where = _where(cls, name) if not name.startswith("_") else None
        if where is None or not _is_member(cls, name):
            continue
        if name in CALLED.get(where, ()):
            shown.append(name)
        elif name not in INTERNAL.get(where, ()):
            unsorted.append(f"{where}.{name}")
    return shown, unsorted


def documented_classes() -> list[type]:
    return [
        obj
        for modname in present()
        for name, obj in public(modname)
        if inspect.isclass(obj) and obj.__name__ == name
    ]


def unsorted_members() -> tuple[list[str], list[str]]:
    """(public methods and properties of documented classes that neither CALLED nor INTERNAL
    lists, the names they list that their class does not define)."""
    unsorted, seen = set(), set()
    for cls in documented_classes():
        unsorted |= set(members(cls)[1])
        for c in cls.__mro__:
            seen.add(f"{c.__module__}.{c.__qualname__}")
    stale = []
    for table in (CALLED, INTERNAL):
        for where, names in table.items():
            module, _, qualname = where.rpartition(".")
            cls = getattr(importlib.import_module(module), qualname, None)
            if where not in seen or cls is None:
                stale.append(f"{where} (not a documented class or a base of one)")
                continue
            stale += [f"{where}.{n}" for n in names if n not in cls.__dict__]
    return sorted(unsorted), stale


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
            if inspect.isclass(obj):  # only what users call (CALLED), inherited ones too
                shown = members(obj)[0]
                opts["members"] = shown or False
                inherited = [n for n in shown if n not in obj.__dict__]
                if inherited:
                    opts["inherited_members"] = inherited
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


CONFIG_PAGE = "reference/configuration.md"
KEYS_MARK = "<!-- resource config keys: docs/hooks.py puts the table here -->"


def key_table() -> str:
    """The resource config keys as a Markdown table: key, default, what it says."""
    from pilot.config.resource_keys import key_docs

    lines = ["| key | default | what it says |", "|---|---|---|"]
    for key, shown, doc in key_docs():
        cells = [f"`{key}`", shown, doc]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def configuration_page() -> str:
    """docs/reference/configuration.md with KEYS_MARK replaced by `key_table()`."""
    text = (ROOT / "docs" / CONFIG_PAGE).read_text()
    if text.count(KEYS_MARK) != 1:
        raise ValueError(f"docs/{CONFIG_PAGE} must hold {KEYS_MARK!r} once, where the table goes")
    return text.replace(KEYS_MARK, key_table())


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
    """reference/protocol.md: pilot/wire/links.py's TABLE, one section per link."""
    from pilot.wire import links

    lines = [
        "# Wire protocol",
        "",
        "Every message between the processes of a pilot, made from the table they dispatch from",
        "(`pilot/wire/links.py`); the framing, heartbeats and timeouts are in",
        "`pilot/wire/protocol.py`, the commands a pilot obeys (`cmd`) in `partition/control.py`.",
        "A message is ZeroMQ",
        "multipart: the kind, then its frames; BODY is compact JSON, checked (the check named)",
        "before any handler runs.  A kind the receiver does not get on that link, or a body its",
        "check refuses, is a bad message: logged and dropped (answered with an error where a",
        "reply is expected); it never stops a component.",
        "",
    ]
    for link, sockets in links.LINKS.items():
        lines += [f"## The {link} link", "", _cell(sockets), ""]
        lines += ["| kind | from -> to | frames | body | check | meaning |", "|---" * 6 + "|"]
        for e in links.TABLE:
            if e.link != link:
                continue
            check = "(its handler reads the frames)"
            if e.check is not None:
                name = next(n for n, v in vars(links.m).items() if v is e.check and n.isupper())
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
    unsorted, listed = unsorted_members()
    for name in unsorted:
        log.info("docs/api_members.py: %s is neither CALLED nor INTERNAL: not shown", name)
    for name in listed:
        log.info("docs/api_members.py: %s is listed but not defined", name)
    for key in stale:
        log.info("docs/hooks.py WAITING: %s has a docstring now; take it off the list", key)
    for modname, (path, _, _) in PAGES.items():
        files.append(File.generated(config, path, content=page(modname)))
    files.remove(files.get_file_from_path(CONFIG_PAGE))  # (the page as written: its prose)
    files.append(File.generated(config, CONFIG_PAGE, content=configuration_page()))
    files.append(File.generated(config, PROTOCOL_PAGE, content=protocol_page()))
    return files
