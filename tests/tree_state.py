"""What the checkout and the installed package hold, to find what a run changed in them.

A unit, a test, a bench or `make docs` must never leave the checkout or the installed package
changed (a unit that appends to a file its environment names, a test that writes beside its
source).  `snapshot()` hashes every file of the checkout that git shows (tracked, and untracked
files that are not ignored) and every file of the installed `pilot` package's folders (the
same files in an editable install; site-packages otherwise); `changes(before, after)` names
what was added, removed or changed.  tests/conftest.py takes one when the suite starts and
fails the run when the one at its end differs; tests/test_rp_prof.py takes them around units
that write to $RP_PROF.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUBPACKAGES = ("pilot", "pilot.agent", "pilot.partition", "pilot.pmgr", "pilot.configs")
SKIP_DIRS = {"__pycache__", ".git", ".venv", ".pytest_cache", ".ruff_cache"}


def _digest(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.sha1(f.read()).hexdigest()
    except OSError as exc:  # (a socket, a file that went away while read)
        return f"unreadable: {exc.strerror}"


def _checkout_files(root: str) -> list[str]:
    """Files git shows in `root` (tracked, and untracked but not ignored); [] outside git."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            timeout=60,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [os.path.join(root, p) for p in out.decode(errors="replace").split("\0") if p]


def _package_files() -> list[str]:
    """Every file under the installed package's folders (no bytecode caches)."""
    dirs = set()
    for name in SUBPACKAGES:
        spec = importlib.util.find_spec(name)
        for d in (spec.submodule_search_locations or []) if spec else []:
            dirs.add(os.path.realpath(d))
    files = []
    for d in sorted(dirs):
        for top, subdirs, names in os.walk(d):
            subdirs[:] = [s for s in subdirs if s not in SKIP_DIRS]
            files += [os.path.join(top, n) for n in names if not n.endswith((".pyc", ".so"))]
    return files


def snapshot(root: str = ROOT) -> dict[str, str]:
    """{real path: sha1 of its bytes} of the checkout's and the package's files."""
    paths = {os.path.realpath(p) for p in _checkout_files(root) + _package_files()}
    return {p: _digest(p) for p in sorted(paths) if os.path.isfile(p)}


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """'added PATH', 'removed PATH', 'changed PATH' for every difference, sorted."""
    out = [f"added {p}" for p in after.keys() - before.keys()]
    out += [f"removed {p}" for p in before.keys() - after.keys()]
    out += [f"changed {p}" for p in before.keys() & after.keys() if before[p] != after[p]]
    return sorted(out)
