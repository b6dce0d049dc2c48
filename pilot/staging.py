"""Data staging directives, as RADICAL-Pilot writes them, checked and put in one form.

A unit's `input_staging` / `output_staging` is a list of directives:
    "in.dat"          the same file name on both ends: input client://in.dat -> unit://in.dat,
                      output unit://in.dat -> client://in.dat ("/a/b/in.dat": in.dat)
    "a > b"           a goes to b;   "a < b": b goes to a
    {source, target, action, flags}   target defaults to the source's file name, action to
                      TRANSFER, flags to [CREATE_PARENTS]
Locations are URLs: client:// (the client's working directory when the directive was made:
client:///x and client://x are both x there, as under RADICAL-Pilot, never the file system's
root), pilot:// (the pilot sandbox), unit:// or task:// (the unit's sandbox), resource:// (the
directory holding the session's pilot sandboxes on the resource), file:// or endpoint:// (an
absolute path on the pilot's nodes).  A path without a scheme is on the client for the client's
end (input source, output target: a relative one from its working directory, an absolute one as
it is) and in the unit sandbox for the other.
Actions: TRANSFER moves data between the client and the pilot over the pilot link, in chunks
(pmgr/core/transfers.py, partition/client/data_port.py); TARBALL does the same with a tar of the
source, unpacked so that the target ends as COPY leaves it (`untar_as_copy`); COPY, LINK and MOVE
act on the pilot's (shared) file system, done by the agent before the unit starts (input) or after
it ended (output).  A
TRANSFER with no client end is a COPY.  Flags: CREATE_PARENTS (the default; parent
directories of the target are made), SKIP_FAILED / NON_FATAL (a failed step is logged and the
unit goes on), RECURSIVE (accepted: directories are always copied whole).
The normal form is {"source": URL, "target": URL, "action": A, "flags": [..]} with explicit
schemes; a directive with a client end also has "client_dir": "/", the directory its client://
paths are relative to (a directive may name one; by default the working directory): in normal
form they are absolute, relative to the root, so that normalizing it again changes nothing.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile

TRANSFER, COPY, LINK, MOVE, TARBALL = "Transfer", "Copy", "Link", "Move", "Tarball"
ACTIONS = (TRANSFER, COPY, LINK, MOVE, TARBALL)
CREATE_PARENTS, SKIP_FAILED, NON_FATAL, RECURSIVE = (
    "CreateParents",
    "SkipFailed",
    "NonFatal",
    "Recursive",
)
FLAGS = (CREATE_PARENTS, SKIP_FAILED, NON_FATAL, RECURSIVE)
SCHEMES = ("client", "pilot", "unit", "resource", "file")
PILOT_SIDE = ("pilot", "unit", "resource", "file")
ALIASES = {"task": "unit", "endpoint": "file"}  # RADICAL-Pilot 1.x's names


class StagingError(OSError):
    """A staging step failed; the message names the directive."""


def split(url: str) -> tuple[str, str]:
    scheme, sep, path = url.partition("://")
    if not sep:
        return "", url
    return scheme, path


def describe(d: dict) -> str:
    return f"{d['action']} {d['source']} -> {d['target']}"


def _url(where: str, value, default_scheme: str, client_dir: str) -> str:
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise ValueError(f"{where}={value!r} must be a non-empty path or URL")
    scheme, path = split(value.strip())
    explicit = bool(scheme)
    scheme = ALIASES.get(scheme, scheme) or default_scheme
    if scheme not in SCHEMES:
        known = [s + "://" for s in (*SCHEMES, *ALIASES)]
        raise ValueError(f"{where}={value!r}: scheme must be one of {known}")
    if scheme == "client":  # client:///x is x in the client's directory (RP), not /x
        slash = "/" if path.endswith("/") and path.strip("/") else ""  # (a directory: `into`)
        path = os.path.normpath(os.path.join(client_dir, path.lstrip("/") if explicit else path))
        path += slash
    elif scheme == "file" and not path.startswith("/"):
        raise ValueError(f"{where}={value!r}: a file:// path must be absolute")
    elif _climbs(scheme, path):
        raise ValueError(f"{where}={value!r}: {_CLIMBS}")
    return f"{scheme}://{path}"


def normalize(owner: str, field: str, value, output: bool, client_dir: str | None = None) -> list:
    """The directives of `value` in normal form; ValueError naming owner.field[i]."""
    if value is None:
        return []
    if isinstance(value, (str, dict)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{owner}: {field}={value!r} must be a list of directives")
    client_dir = client_dir or os.getcwd()
    src_default, tgt_default = ("unit", "client") if output else ("client", "unit")
    out = []
    for i, d in enumerate(value):
        where = f"{owner}: {field}[{i}]"
        if isinstance(d, str):
            if ">" in d:
                source, target = (x.strip() for x in d.split(">", 1))
            elif "<" in d:
                target, source = (x.strip() for x in d.split("<", 1))
            else:
                source, target = d.strip(), None  # the same file name at the other end
            d = {"source": source, "target": target}
        if not isinstance(d, dict):
            raise ValueError(f"{where}={d!r} must be a string or a dict {{source, target, ...}}")
        unknown = set(d) - {"source", "target", "action", "flags", "priority", "client_dir"}
        if unknown:
            raise ValueError(
                f"{where}: unknown key(s) {sorted(unknown)}; accepted: action, flags, source, "
                "target"
            )
        if "source" not in d:
            raise ValueError(f"{where}: source is required")
        action = d.get("action") or TRANSFER
        if action not in ACTIONS:
            raise ValueError(f"{where}.action={action!r} must be one of {list(ACTIONS)}")
        flags = d.get("flags")
        flags = [CREATE_PARENTS] if flags is None else flags
        if isinstance(flags, str):
            flags = [flags]
        if not isinstance(flags, (list, tuple)) or any(f not in FLAGS for f in flags):
            raise ValueError(f"{where}.flags={flags!r} must be a list of {list(FLAGS)}")
        base = d.get("client_dir", client_dir)
        if not isinstance(base, str) or not base.startswith("/"):
            raise ValueError(f"{where}.client_dir={base!r} must be an absolute directory")
        source = _url(f"{where}.source", d["source"], src_default, base)
        target = d.get("target")
        if target is None or (isinstance(target, str) and not target.strip()):
            target = os.path.basename(split(source)[1].rstrip("/"))
        target = _url(f"{where}.target", target, tgt_default, base)
        ends = (split(source)[0], split(target)[0])
        if action in (TRANSFER, TARBALL):
            if ends == ("client", "client"):
                raise ValueError(f"{where}: both ends are on the client; nothing to stage")
            if "client" not in ends:
                action = COPY if action == TRANSFER else action
        if action in (COPY, LINK, MOVE) and "client" in ends:
            raise ValueError(
                f"{where}: {action} acts on the pilot's file system; a client:// end needs "
                f"{TRANSFER!r} (rp.TRANSFER) or {TARBALL!r}"
            )
        if action == TARBALL and "client" not in ends:
            raise ValueError(f"{where}: {TARBALL} moves a tar between the client and the pilot")
        norm = {"source": source, "target": target, "action": action, "flags": list(flags)}
        if "client" in ends:
            norm["client_dir"] = "/"  # (its client paths are absolute now)
        out.append(norm)
    return out


def at_client(d: dict) -> bool:
    return "client" in (split(d["source"])[0], split(d["target"])[0])


_SANDBOXED = ("pilot", "unit", "resource")  # schemes whose paths stay inside their directory
_CLIMBS = "a pilot://, unit:// or resource:// path stays inside its directory: no '..' in it"


def _climbs(scheme: str, path: str) -> bool:
    """A path of a sandboxed scheme that would leave its directory (a '..' in it: a unit's
    `unit://../../state.db` replaced the session's store)."""
    return scheme in _SANDBOXED and ".." in path.split("/")


def resolve(url: str, pilot_sandbox: str, unit_sandbox: str | None) -> str:
    """The path of a pilot-side URL (StagingError for one that leaves its sandbox)."""
    scheme, path = split(url)
    if _climbs(scheme, path):
        raise StagingError(f"{url}: {_CLIMBS}")
    inside = path.lstrip("/")  # pilot:///x and pilot://x are both x in the pilot sandbox
    if scheme == "pilot":
        return os.path.join(pilot_sandbox, inside)
    if scheme == "unit":
        if unit_sandbox is None:
            raise StagingError(f"{url}: no unit sandbox here")
        return os.path.join(unit_sandbox, inside)
    if scheme == "resource":
        return os.path.join(os.path.dirname(pilot_sandbox), inside)
    if scheme in ("file", "client"):
        return path
    raise StagingError(f"{url}: unknown scheme")


def into(target: str, source: str) -> str:
    """A target that ends in "/" (`unit:///`, `pilot:///inputs/`) names a directory to put the
    source in under its own name, as `cp -r SOURCE DIR/` does; any other is the path itself."""
    if target.endswith("/"):
        return os.path.join(target, os.path.basename(source.rstrip("/")))
    return target


def act(d: dict, pilot_sandbox: str, unit_sandbox: str | None) -> str | None:
    """Do one pilot-side directive (COPY, LINK, MOVE); the error text, or None.  With
    SKIP_FAILED / NON_FATAL a failure is returned prefixed "skipped: "."""
    try:
        src = resolve(d["source"], pilot_sandbox, unit_sandbox)
        dst = into(resolve(d["target"], pilot_sandbox, unit_sandbox), src)
        if CREATE_PARENTS in d["flags"]:
            os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
        if d["action"] == LINK:
            if os.path.lexists(dst):
                os.unlink(dst)
            os.symlink(src, dst)
        elif d["action"] == MOVE:
            shutil.move(src, dst)
        elif os.path.isdir(src):
            shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(src, dst)
    except OSError as exc:
        why = f"{describe(d)} failed: {exc.strerror or exc}"
        if SKIP_FAILED in d["flags"] or NON_FATAL in d["flags"]:
            return f"skipped: {why}"
        return why
    return None


def check_wire(where: str, value) -> list:
    """Directives as an agent gets them (pilot-side ones, normal form); ValueError otherwise."""
    if not isinstance(value, list) or len(value) > 10_000:
        raise ValueError(f"{where} must be a list of directives")
    for i, d in enumerate(value):
        if (
            not isinstance(d, dict)
            or d.get("action") not in (COPY, LINK, MOVE)
            or not all(isinstance(d.get(k), str) and "\0" not in d[k] for k in ("source", "target"))
            or split(d["source"])[0] not in PILOT_SIDE
            or split(d["target"])[0] not in PILOT_SIDE
            or _climbs(*split(d["source"]))
            or _climbs(*split(d["target"]))
            or not isinstance(d.get("flags"), list)
        ):
            raise ValueError(f"{where}[{i}]={d!r:.120} is not a pilot-side directive")
    return value


def untar_as_copy(tar_path: str, target: str) -> None:
    """Unpack a TARBALL's tar (one entry at its top: the source, under its own name) so that
    `target` ends as COPY leaves it (`act`): a directory's content merged into `target`; a file
    at `target`, or in it when `target` is a directory; either under its own name in a
    `target` that ends in "/" (`into`).  Unpacked beside `target` first, so a
    broken tar leaves nothing half-placed."""
    parent = os.path.dirname(target) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".untar.", dir=parent)
    try:
        with tarfile.open(tar_path) as tf:
            tf.extractall(tmp, filter="data")
        top = os.listdir(tmp)
        if len(top) != 1:
            raise StagingError(f"{target}: a TARBALL holds one entry at its top, got {top[:5]}")
        src = os.path.join(tmp, top[0])
        target = into(target, top[0])
        if os.path.isdir(src) and not os.path.islink(src):
            if os.path.isdir(target):
                shutil.copytree(src, target, symlinks=True, dirs_exist_ok=True)
            else:
                os.replace(src, target)
        elif os.path.isdir(target):
            os.replace(src, os.path.join(target, top[0]))
        else:
            os.replace(src, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
