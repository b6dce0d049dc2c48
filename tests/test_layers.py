"""The layers import one way (README, "How it is built"): pilot core <- agent <- partition <-
pmgr <- the face (pilot/__init__, pilot/__main__, pilot/cli, pilot/parsl, pilot/entk).  Every
import counts, function-level ones included; no module imports the face; no two modules import
each other through any chain.
The layers are the top-level folders; installed, each is a subpackage of the one import name
`pilot` (agent/ is pilot.agent, ...: setup.cfg), and no module imports a folder's bare name."""

from __future__ import annotations

import ast
import os

from tests.conftest import ROOT

PACKAGES = ("pilot", "agent", "partition", "pmgr")  # the layers' folders, lowest first
FOLDERS = (*PACKAGES, "configs")
FACE = {"pilot", "pilot.__main__", "pilot.cli", "pilot.parsl", "pilot.entk"}  # Parsl, EnTK
RANK = {"pilot": 0, "agent": 1, "partition": 2, "pmgr": 3, "face": 4}


def installed_name(rel: str) -> str:
    """The import name of a folder-relative dotted path: agent.x is pilot.agent.x."""
    return rel if rel.split(".")[0] == "pilot" else f"pilot.{rel}"


def modules() -> dict[str, str]:
    """module name (as installed) -> file path, for every module of the project's packages."""
    out = {}
    for pkg in PACKAGES:
        for d, _, files in os.walk(os.path.join(ROOT, pkg)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(d, f)
                    rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    out[installed_name(rel.removesuffix(".__init__"))] = path
    return out


def imports(name: str, path: str, known: dict) -> set[str]:
    """The project modules `name` imports, anywhere in its file."""
    out = set()
    is_pkg = path.endswith("__init__.py")
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = name.split(".")
            if node.level:
                base = base[: len(base) - node.level + is_pkg]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in known and t != name)
    return out


def layer(name: str) -> str:
    """The layer (its folder) of an installed module name."""
    if name in FACE:
        return "face"
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in RANK else "pilot"


def test_one_import_name_for_every_folder():
    """Every package folder is installed under `pilot` (setup.cfg lists them all), and no
    module imports a folder by its bare name (a workflow's own `configs` would shadow it)."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    listed = set(cfg["options"]["packages"].split())
    found = set()
    for top in FOLDERS:
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            if "__init__.py" in files:
                found.add(installed_name(os.path.relpath(d, ROOT).replace(os.sep, ".")))
    assert listed == found, f"setup.cfg packages differ from the folders: {listed ^ found}"
    bare = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(open(path).read(), path)):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                mods = [node.module or ""]
            else:
                continue
            bare += [f"{name}: {m}" for m in mods if m.split(".")[0] in FOLDERS[1:]]
    assert not bare, f"imports of a folder's bare name: {bare}"


def test_imports_point_down_and_never_around():
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    upward = [
        f"{a} -> {b}" for a, bs in graph.items() for b in bs if RANK[layer(b)] > RANK[layer(a)]
    ]
    assert not upward, f"imports of a higher layer (or of the face): {upward}"
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, f"import cycles: {cycles}"
    assert len(graph) > 40  # the walk found the project, not an empty tree
