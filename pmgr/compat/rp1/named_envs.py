"""RADICAL-Pilot 1.x's named environments (pilot.prepare_env(name, spec), a task's named_env).

An environment is made where the tasks run, by the first task that names it, under a lock in
the pilot sandbox, and entered by every task that names it: its lines (`lines`) go before the
task's pre_exec.
    {"type": "venv" | "virtualenv", "setup": [pip requirements], "pre_exec": [lines],
     "version": "3.11", "path": where}      a Python venv (default ENV_DIR/<name>
                                           in the pilot sandbox): made once, then activated;
                                           pre_exec lines run first, in every task
    {"type": "shell", "pre_exec": [lines]}  lines only
"rp" is always there: the Python the pilot runs on (its bin directory first on PATH).
RP's prepare_env blocks until the environment is made; here it returns at once, and a setup
that fails fails the task that made it, with pip's output on that task's stderr (the next task
that names it tries again).
"""

from __future__ import annotations

import os
import shlex
import sys

from pilot.processes import expanding

ENV_DIR = "env"
TYPES = ("venv", "virtualenv", "shell")
KEYS = ("type", "setup", "pre_exec", "version", "path")


def checked(name: str, spec: dict) -> dict:
    """The spec of environment `name`, checked (ValueError naming what is wrong)."""
    if not isinstance(name, str) or not name.isidentifier() or name == "rp":
        raise ValueError(
            f"prepare_env: env_name={name!r} must be a name (letters, digits, _), not 'rp' "
            "(the pilot's own Python)"
        )
    spec = dict(spec or {})
    kind = spec.get("type", "venv")
    if kind == "conda":
        raise ValueError(
            "prepare_env: type='conda' is not supported: no conda is run here; give "
            "type='venv' (pip requirements in setup=) or 'shell' (pre_exec= lines that "
            "activate an environment of your own)"
        )
    if kind not in TYPES:
        raise ValueError(f"prepare_env: type={kind!r} must be one of {list(TYPES)}")
    unknown = set(spec) - set(KEYS)
    if unknown:
        raise ValueError(f"prepare_env: unknown key(s) {sorted(unknown)}; accepted: {KEYS}")
    for key in ("setup", "pre_exec"):
        if not all(isinstance(x, str) for x in spec.get(key) or ()):
            raise ValueError(f"prepare_env: env_spec[{key!r}] must be a list of strings")
    return spec


def lines(name: str, spec: dict | None, python: str | None) -> list[str] | None:
    """The lines that enter environment `name` (None: `spec` is None, it was not prepared);
    `python`: the pilot's interpreter (for "rp"; None: the client's)."""
    if name == "rp":
        where = expanding(os.path.dirname(python or sys.executable))[0]  # ($VARS: the target's)
        return [f'export PATH={where}:"$PATH"']
    if spec is None:
        return None
    out = list(spec.get("pre_exec") or ())
    if spec.get("type", "venv") == "shell":
        return out
    path = spec.get("path")
    if path:
        where, lock, parent = map(shlex.quote, (path, path + ".lock", os.path.dirname(path)))
    else:
        at = f"$RP_PILOT_SANDBOX/{ENV_DIR}"
        where, lock, parent = f'"{at}/{name}"', f'"{at}/{name}.lock"', f'"{at}"'
    python = f"python{spec['version']}" if spec.get("version") else "python3"
    make = f'{python} -m venv "$1"'
    setup = " ".join(shlex.quote(r) for r in spec.get("setup") or ())
    if setup:
        make += f' && "$1/bin/pip" install -q {setup}'
    script = f'test -e "$1/.ready" || {{ rm -rf "$1"; {make} && touch "$1/.ready"; }}'
    return out + [
        f"mkdir -p {parent} && flock {lock} /bin/sh -c {shlex.quote(script)} sh {where} >&2"
        " || exit 1",
        f". {where}/bin/activate",
    ]
