"""Every file path the tree cites (in docstrings, comments, the manual, configs) exists.

A path is cited as from the repository's root (`partition/client/outbox.py`, `docs/scaling.md`);
docstrings lead a reader to the file that has the rest, so a moved or deleted file must take
its citations with it.  A path must be a tracked file (a file only this checkout has does not
count); paths with a placeholder (`configs/SITE.yaml`), pages the manual's build makes
(GENERATED) and what .gitignore keeps out (a bench's results) are not files in the tree.
"""

from __future__ import annotations

import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CITED = re.compile(
    r"(?<![\w/.-])((?:pilot|agent|partition|pmgr|configs|tests|bench|docs|examples|\.ci)/"
    r"[\w/.-]*\w\.(?:py|md|yaml|sh|json|cfg|js|html|css|txt))\b"
)
PLACEHOLDER = re.compile(r"(?<![A-Za-z])(SITE|NAME|NNNN)(?![A-Za-z])")
GENERATED = {"docs/reference/protocol.md"}  # (docs/hooks.py makes it from pilot/wire/links.py)


def git(*args: str, check: bool = True) -> list[str]:
    out = subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=check, timeout=60
    )
    return out.stdout.split()


def tracked() -> list[str]:
    return git("ls-files", "*.py", "*.md", "*.yaml", "*.cfg", "Makefile", ".ci/*")


def test_every_cited_path_exists():
    files = tracked()
    assert len(files) > 300, files[:5]  # (the tree, not an empty listing)
    every = set(git("ls-files"))
    cited, missing = 0, {}
    for name in files:
        if name == "tests/test_cited_paths.py":
            continue  # (its own examples)
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            text = f.read()
        for found in CITED.finditer(text):
            path = found.group(1)
            if PLACEHOLDER.search(path) or path in GENERATED:
                continue
            cited += 1
            if path not in every:
                line = text.count("\n", 0, found.start()) + 1
                missing.setdefault(path, []).append(f"{name}:{line}")
    assert cited > 1000, cited  # (the pattern still finds the tree's citations)
    for path in git("check-ignore", *missing, check=False) if missing else ():
        del missing[path]  # (an output: a bench's results)
    assert not missing, "cited but not in the tree (a new file: git add it):\n" + "\n".join(
        f"  {path}  <- {', '.join(where[:5])}" for path, where in sorted(missing.items())
    )


def test_a_missing_citation_is_found(tmp_path):
    """The pattern sees a citation as docstrings write them, and not a module path."""
    text = '"""Its rest is in partition/client/outbox.py (and pilot.agent.pool is not a path)."""'
    assert [m.group(1) for m in CITED.finditer(text)] == ["partition/client/outbox.py"]
    assert [m.group(1) for m in CITED.finditer("see `docs/nowhere.md`.")] == ["docs/nowhere.md"]
