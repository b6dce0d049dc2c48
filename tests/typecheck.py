"""mypy over the product's packages (pilot/, agent/, partition/, pmgr/), as `make test` runs it.

    python tests/typecheck.py          # exit 0: clean, but for the modules in NOT_YET
    python tests/typecheck.py --debt   # the errors of the modules in NOT_YET, by module

The folders are one import name, `pilot` (setup.cfg's package_dir: `agent/` is `pilot.agent`),
which mypy cannot map from a checkout; so the check runs on a tree of links in a temporary
directory (`pilot/` with `agent`, `partition`, `pmgr`, `configs` linked in, as installed) and
its report names the checkout's files again.  mypy's settings are setup.cfg's [mypy] section.

NOT_YET lists the modules that had errors when the check came in: their errors are reported
only with --debt.  The list may only shrink: a module in it that checks clean fails the run
(take it out of the list), and so does an error in any module not in it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINKED = ("agent", "partition", "pmgr", "configs")

NOT_YET = """
pilot.config.resource_config pilot.partition.agents.forked pilot.partition.bootstrap
pilot.partition.client.data_port pilot.partition.growth pilot.partition.launch.fork
pilot.partition.manager pilot.pmgr.compat.futures.executor_feed pilot.pmgr.compat.parsl.executor
pilot.pmgr.compat.rp1.tasks pilot.pmgr.core.handles pilot.pmgr.core.pilot pilot.pmgr.core.session
pilot.pmgr.core.unit_queries pilot.pmgr.core.unit_table pilot.pmgr.observe.dashboard_data
pilot.pmgr.observe.top_snapshot pilot.pmgr.store.base pilot.pmgr.store.mongo pilot.pmgr.store.sqlite
pilot.pmgr.store.writer
"""


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


def module_of(path: str) -> str:
    return path[: -len(".py")].replace("/", ".").removesuffix(".__init__")


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
    debt_only = "--debt" in sys.argv[1:]
    listed = set(NOT_YET.split())
    code, lines = run_mypy()
    if code not in (0, 1):
        return code
    found: dict[str, list[str]] = {}
    for line in lines:
        where = re.match(r"(pilot/[^:]+\.py):\d+:", line)
        if where is None or ": note:" in line:
            continue
        mod = module_of(where[1])
        found.setdefault(mod, []).append(line.replace(where[1], to_checkout(where[1]), 1))
    if debt_only:
        for mod in sorted(found):
            print("\n".join(found[mod]))
        print(f"{sum(len(v) for v in found.values())} errors in {len(found)} modules")
        return 0
    new = {m: v for m, v in found.items() if m not in listed}
    clean = sorted(listed - set(found))
    for mod in sorted(new):
        print("\n".join(new[mod]))
    if clean:
        print(f"checks clean now, take out of NOT_YET in {__file__}: {' '.join(clean)}")
    debt = sum(len(v) for m, v in found.items() if m in listed)
    print(f"mypy: {sum(len(v) for v in new.values())} errors; {len(listed)} modules not yet "
          f"checked ({debt} errors: --debt)")  # fmt: skip
    return 1 if new or clean else 0


if __name__ == "__main__":
    sys.exit(main())
