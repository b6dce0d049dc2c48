"""The manual (docs/, mkdocs.yml) against the code, so that the two cannot drift apart.

- Every fenced block marked runnable (`<!-- runnable -->` on the line before it; options
  `timeout=S`, `needs=PROGRAM`, `needs-file=PATH`) runs as its own process, in a fresh
  directory with its own sessions directory: python blocks with this interpreter, sh blocks
  with bash -e and .venv/bin first on PATH.  It must exit 0 within its deadline (default
  30 s); a process it leaves behind fails it.  All of them take ~40 s on 2 cores.
- Every public class and function of `pilot`, `pilot.entk` and `pilot.parsl` has a docstring
  and a section of the API reference, and every public method or property of those classes is
  either shown (users call it) or declared for the other layers (docs/hooks.py's checks, which
  `make docs` runs too): a new public name cannot land undocumented.
- The state diagrams of docs/concepts.md hold exactly the moves of pilot/states.py's machines.
- Every resource config key has a doc (pilot/config/resource_keys.py) and the configuration
reference,
  as built (its key table made from those docs by docs/hooks.py), lists every key; it names
  every environment variable the code reads; the command-line reference every subcommand.
The build itself (`mkdocs build --strict`) is `make docs`, which .ci/run runs.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MARK = re.compile(r"^<!--\s*runnable\b(?P<opts>[^>]*)-->\s*$")
FENCE = re.compile(r"^```(?P<lang>\w*)\s*$")


def runnable_blocks() -> list[tuple[str, str, str, dict]]:
    """(page:line, language, code, options) of every block marked runnable."""
    out = []
    for page in sorted(DOCS.rglob("*.md")):
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            m = MARK.match(line)
            if not m:
                continue
            opts = dict(kv.split("=", 1) for kv in m.group("opts").split())
            fence = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
            assert fence, f"{page.relative_to(ROOT)}:{i + 1}: a runnable mark without a block"
            end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
            code = "\n".join(lines[i + 2 : end]) + "\n"
            out.append((f"{page.relative_to(DOCS)}:{i + 2}", fence.group("lang"), code, opts))
    return out


BLOCKS = runnable_blocks()


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


@pytest.mark.parametrize("where,lang,code,opts", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_runnable_block(where, lang, code, opts, tmp_path):
    needs = opts.get("needs")
    if needs and shutil.which(needs) is None:
        pytest.skip(f"{where} needs {needs}, not found on PATH")
    needs_file = opts.get("needs-file")
    if needs_file and not (ROOT / needs_file).exists():
        pytest.skip(f"{where} needs {needs_file}, not in this checkout")
    env = dict(os.environ, PILOT_SESSIONS_DIR=str(tmp_path / "sessions"))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PILOT_DATABASE_URL", None)
    if lang == "python":
        (tmp_path / "example.py").write_text(code)
        argv = [sys.executable, "example.py"]
    elif lang in ("sh", "bash"):
        (tmp_path / "example.sh").write_text(code)
        argv = ["bash", "-e", "example.sh"]
    else:
        pytest.fail(f"{where}: a runnable block must be python or sh, not {lang!r}")
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=float(opts.get("timeout", 30)))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=10)
        pytest.fail(f"{where}: still running after {opts.get('timeout', 30)} s:\n{out}")
    finally:
        try:
            os.killpg(proc.pid, 0)
            left = True
        except ProcessLookupError:
            left = False
        if left:  # something of the example's own process group outlived it
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, f"{where} exited {proc.returncode}:\n{out}"
    assert not left, f"{where} left processes behind"


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_public_names_have_docstrings():
    missing, _stale = _hooks().missing_docstrings()
    assert not missing, "public names without a docstring:\n" + "\n".join(missing)


def test_api_reference_lists_every_public_name_and_member():
    """A public name of `pilot`, `pilot.entk` or `pilot.parsl` has a section in docs/hooks.py's
    PAGES; a public method or property of a documented class is either shown (CALLED) or
    declared for the other layers (INTERNAL, docs/api_members.py); nothing listed is gone."""
    hooks = _hooks()
    assert hooks.unplaced() == [], "public names no section of docs/hooks.py PAGES places"
    unsorted, stale = hooks.unsorted_members()
    assert unsorted == [], "public members neither CALLED nor INTERNAL (docs/api_members.py)"
    assert stale == [], "docs/api_members.py lists names their class does not define"


def test_a_new_public_member_is_caught():
    """The check above sees a method a documented class gains (here a subclass of rp.Unit made
    as if in the package), and shows only the CALLED ones."""
    import pilot as rp

    hooks = _hooks()
    grown = type("Grown", (rp.Unit,), {"__module__": "pilot.grown", "shiny": lambda self: None})
    shown, unsorted = hooks.members(grown)
    assert unsorted == ["pilot.grown.Grown.shiny"]
    assert "wait" in shown and "stdout" in shown and "wire" not in shown  # wire: INTERNAL


def test_state_diagrams_match_the_machines():
    from pilot import states

    text = (DOCS / "concepts.md").read_text()
    diagrams = re.findall(r"```mermaid\nstateDiagram-v2\n(.*?)```", text, re.S)
    machines = [states.PILOT_MACHINE, states.PARTITION_MACHINE, states.UNIT_MACHINE]
    assert len(diagrams) == len(machines)
    for diagram, machine in zip(diagrams, machines):
        drawn = set(re.findall(r"^\s*(\w+) --> (\w+)\s*$", diagram, re.M))
        drawn.discard(("[*]", "NEW"))
        assert drawn == set(states.legal_moves(machine)), machine.name


def test_configuration_reference_is_complete():
    from dataclasses import fields

    from pilot.config.resource_config import KEYS
    from pilot.config.resource_keys import ResourceConfig

    undocumented = [
        f.name for f in fields(ResourceConfig) if f.name in KEYS and not f.metadata.get("doc")
    ]
    assert undocumented == [], "resource config keys without a doc (pilot/config/resource_keys.py)"
    built = _hooks().configuration_page()  # the page as the manual shows it: the table filled
    assert [k for k in KEYS if f"\n| `{k}` | " not in built] == []
    text = (DOCS / "reference" / "configuration.md").read_text()
    read = set()
    pattern = re.compile(r"""environ(?:\.get)?[\(\[]\s*["']([A-Z][A-Z0-9_]+)["']""")
    for folder in ("pilot", "agent", "partition", "pmgr"):
        for path in (ROOT / folder).rglob("*.py"):
            read |= set(pattern.findall(path.read_text()))
    for path in (ROOT / "pmgr").rglob("*.py"):  # names read through a loop (entk's report)
        src = path.read_text()
        if "os.environ.get(v" in src:
            read |= set(re.findall(r'"(RADICAL_[A-Z_]+)"', src))
    assert sorted(v for v in read if f"`{v}`" not in text) == []


def test_cli_reference_names_every_command():
    out = subprocess.run(
        [sys.executable, "-m", "pilot", "--help"], capture_output=True, text=True, timeout=30
    ).stdout
    commands = re.search(r"\{([a-z,-]+)\}", out).group(1).split(",")
    text = (DOCS / "reference" / "cli.md").read_text()
    assert [c for c in commands if f"## pilot {c}\n" not in text] == []
