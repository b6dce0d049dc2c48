"""mypy over the product's packages (pilot/, agent/, partition/, pmgr/), as `make test` runs it.

    python tests/typecheck.py          # exit 0: no error in any module

The folders are one import name, `pilot` (setup.cfg's package_dir: `agent/` is `pilot.agent`),
which mypy cannot map from a checkout; so the check runs on a tree of links in a temporary
directory (`pilot/` with `agent`, `partition`, `pmgr`, `configs` linked in, as installed) and
its report names the checkout's files again.  mypy's settings are setup.cfg's [mypy] section:
every function's body is checked, annotated or not (check_untyped_defs), with strict_equality,
warn_unused_ignores, extra_checks, disallow_untyped_decorators and no_implicit_reexport (a
name re-exported is said so: `import X as X`); every module is held to them
(the list of modules once let off, when the check came in, is empty and gone).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINKED = ("agent", "partition", "pmgr", "configs")


def tree(tmp: str) -> str:
    """`pilot` as installed, made of links into the checkout."""
    top = os.path.join(tmp, "pilot")
    os.mkdir(top)
    for name in os.listdir(os.path.join(ROOT, "pilot")):
        os.symlink(os.path.join(ROOT, "pilot", name), os.path.join(top, name))
    for name in LINKED:
        os.symlink(os.path.join(ROOT, name), os.path.join(top, name))
    return tmp


def to_checkout(path: str) -> str:
    """The checkout's name of a file mypy reported: its pilot/agent/... is agent/..."""
    first = path.split("/")[1] if path.count("/") >= 2 else ""
    return path[len("pilot/") :] if first in LINKED else path


def run_mypy() -> tuple[int, list[str]]:
    with tempfile.TemporaryDirectory(prefix="typecheck-") as tmp:
        out = subprocess.run(
            [sys.executable, "-m", "mypy", "--config-file", os.path.join(ROOT, "setup.cfg"),
             "--no-error-summary", "--show-error-codes", "-p", "pilot"],
            cwd=tree(tmp), capture_output=True, text=True, timeout=900,
        )  # fmt: skip
    if out.returncode not in (0, 1):  # (2: mypy itself failed: its own words)
        print(out.stdout + out.stderr, file=sys.stderr)
        return out.returncode, []
    return out.returncode, [ln for ln in out.stdout.splitlines() if ln.strip()]


def main() -> int:
    code, lines = run_mypy()
    if code not in (0, 1):
        return code
    errors = []
    for line in lines:
        where = re.match(r"(pilot/[^:]+\.py):\d+:", line)
        if where is None or ": note:" in line:
            continue
        errors.append(line.replace(where[1], to_checkout(where[1]), 1))
    print("\n".join(errors + [f"mypy: {len(errors)} errors"]))
    return 1 if errors or code else 0


if __name__ == "__main__":
    sys.exit(main())
