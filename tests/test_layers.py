"""The layers import one way (docs/architecture.md, "How it is built"), lowest first:

    pilot/ (the core every process shares) <- agent/ <- partition/ <- pmgr/batch, pmgr/store
    <- pmgr/core (the client's core) <- pmgr/observe <- pmgr/compat/{rp1,entk,futures,parsl}
    (the faces) <- the user API (pilot/__init__, __main__, cli, parsl, entk)

Every import counts, function-level ones included.  No module imports a higher layer or a
sibling of its own rank (batch and store know nothing of each other, nor one face of another
but through its package); what is above the client's core uses it only through the names
pmgr/core/__init__.py declares, imported from that package, and a face uses another face only
through the names that face's package declares; no two modules import each other through any
chain.  The layers are folders; installed, each is a subpackage of the one import name `pilot`
(agent/ is pilot.agent, ...: setup.cfg), and no module imports a folder's bare name."""

from __future__ import annotations

import ast
import importlib
import os

from tests.conftest import ROOT

PACKAGES = ("pilot", "agent", "partition", "pmgr")  # the top-level folders, lowest first
FOLDERS = (*PACKAGES, "configs")
FACE = {"pilot", "pilot.__main__", "pilot.cli", "pilot.parsl", "pilot.entk"}  # the user API
# a module's layer is its longest prefix here; a layer may import only lower ranks (and itself)
RANK = {
    "pilot": 0,
    "pilot.agent": 1,
    "pilot.partition": 2,
    "pilot.pmgr.batch": 3,
    "pilot.pmgr.store": 3,
    "pilot.pmgr": 4,
    "pilot.pmgr.core": 4,
    "pilot.pmgr.observe": 5,
    "pilot.pmgr.compat": 6,
    "pilot.pmgr.compat.rp1": 6,
    "pilot.pmgr.compat.entk": 6,
    "pilot.pmgr.compat.futures": 6,
    "pilot.pmgr.compat.parsl": 6,
    "pilot.pmgr.compat.snakemake": 6,
    "face": 7,
}
CORE = "pilot.pmgr.core"
FACES = (
    "pilot.pmgr.compat.rp1",
    "pilot.pmgr.compat.entk",
    "pilot.pmgr.compat.futures",
    "pilot.pmgr.compat.parsl",
    "pilot.pmgr.compat.snakemake",
)


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
    """The layer of an installed module name: its longest prefix in RANK."""
    if name in FACE:
        return "face"
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in RANK:
            return ".".join(parts[:n])
    raise AssertionError(f"{name} is in no layer")


def from_imports(path: str):
    """(line, module, names) of every `from X import names` and (line, X, None) of every
    `import X` in the file at `path` (absolute imports: the project has no relative ones)."""
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.ImportFrom) and not node.level:
            yield node.lineno, node.module or "", [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, None


def listed_folders() -> dict[str, str]:
    """{folder: package} of every package setup.cfg installs, each package's folder found
    through its longest prefix in package_dir (pilot.agent.runners is agent/runners)."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    mapped = dict(
        (k.strip(), v.strip())
        for k, _, v in (line.partition("=") for line in cfg["options"]["package_dir"].split("\n"))
        if k.strip()
    )
    out = {}
    for package in cfg["options"]["packages"].split():
        parts = package.split(".")
        n = max(n for n in range(1, len(parts) + 1) if ".".join(parts[:n]) in mapped)
        out[os.path.join(mapped[".".join(parts[:n])], *parts[n:])] = package
    return out


# installed outside `pilot` (setup.cfg): only the name Snakemake finds its plugin by
TOP_LEVEL = {"snakemake_executor_plugin_pilot"}


def test_one_import_name_for_every_folder():
    """Every package folder is installed under `pilot` (setup.cfg lists them all; the one
    exception is Snakemake's plugin name, TOP_LEVEL), and no module imports a folder by its
    bare name (a workflow's own `configs` would shadow it)."""
    listed = listed_folders()
    found = set()
    for top in FOLDERS:
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            if "__init__.py" in files:
                found.add(os.path.relpath(d, ROOT))
    assert set(listed) == found, (
        f"setup.cfg packages differ from the folders: {set(listed) ^ found}"
    )
    outside = {p for p in listed.values() if p.split(".")[0] != "pilot"}
    assert outside == TOP_LEVEL, f"packages installed outside pilot: {outside}"
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


def test_a_checkout_imports_the_folders_setup_cfg_maps_and_nothing_else():
    """In a checkout, pilot/__init__.py's finder maps exactly the folders setup.cfg's
    package_dir maps (pilot.agent is agent/, ...), and nothing else of the checkout is
    importable under `pilot` (no pilot.tests, no pilot.pilot)."""
    import configparser
    import subprocess
    import sys

    import pilot

    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    mapped = {
        k.strip().removeprefix("pilot."): v.strip()
        for k, _, v in (line.partition("=") for line in cfg["options"]["package_dir"].split("\n"))
        if k.strip().startswith("pilot.")
    }
    assert mapped == {f: f for f in pilot._FOLDERS}  # noqa: SLF001 (the finder's own table)
    code = (
        "import importlib, pilot.agent.node.daemon, pilot.configs\n"
        "for name in ('pilot.tests', 'pilot.pilot', 'pilot.bench', 'pilot.docs'):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError:\n"
        "        continue\n"
        "    raise SystemExit(name + ' imports')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def _stub_names(path: str) -> dict[str, str]:
    """{name: "module:attribute"} a package's __init__.pyi imports."""
    out = {}
    for node in ast.parse(open(path).read(), path).body:
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}:{a.name}"
    return out


def _declared(path: str) -> dict[str, str]:
    """{name: "module:attribute"} of a package's `declare(__name__, {...})` table."""
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "declare":
            table = ast.literal_eval(node.args[1])
            return {n: t if ":" in t else f"{t}:{n}" for n, t in table.items()}
    raise AssertionError(f"{path}: no declare() table")


def test_the_lazy_names_are_seen_by_the_type_checker():
    """A package whose names are imported on first use (pilot/__init__.py's _WHERE, the
    `declare()` tables of the core and the faces) has a stub, __init__.pyi, that imports the
    same names from the same modules, so that mypy and editors see what they resolve to while
    the package itself imports none of them: the two may not drift apart."""
    import pilot

    where = {n: f"{m}:{n}" for n, m in pilot._WHERE.items()}  # noqa: SLF001 (its table)
    where["utils"] = "pilot.rp:utils"
    seen = _stub_names(os.path.join(ROOT, "pilot", "__init__.pyi"))
    assert seen == where, {n: (seen.get(n), where.get(n)) for n in set(seen) ^ set(where)}
    for package in (CORE, *FACES):
        path = os.path.join(ROOT, *package.split(".")[1:], "__init__.py")
        seen, table = _stub_names(path + "i"), _declared(path)
        drift = {n: (seen.get(n), table.get(n)) for n in set(seen) | set(table)}
        drift = {n: v for n, v in drift.items() if v[0] != v[1]}
        assert not drift, f"{package}: __init__.pyi and declare() differ: {drift}"


def test_imports_point_down_and_never_around():
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    upward = [
        f"{a} -> {b}" for a, bs in graph.items() for b in bs if RANK[layer(b)] > RANK[layer(a)]
    ]
    assert not upward, f"imports of a higher layer (or of the face): {upward}"
    # a sibling of the same rank (batch and store; one face and another) only through the
    # declared names of its package (checked below): never one of its modules
    sideways = [
        f"{a} -> {b}"
        for a, bs in graph.items()
        for b in bs
        if layer(a) != layer(b) and RANK[layer(b)] == RANK[layer(a)] and b not in FACES
    ]
    assert not sideways, f"imports of a sibling layer's module: {sideways}"
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


def declared_users(module: str):
    """The modules that may use `module`'s package only through its declared names."""
    if module == CORE:
        return lambda user: RANK[layer(user)] > RANK[CORE]
    return lambda user: layer(user) != module and layer(user).startswith("pilot.pmgr.compat")


def test_the_core_and_each_face_are_used_through_their_declared_names():
    """Above the client's core, a module imports from it only `from pilot.pmgr.core import
    NAME` with NAME one of the names pmgr/core/__init__.py declares; a face imports another
    face the same way.  The user API's table (pilot/__init__.py) names only declared names
    of the core, or modules of the faces."""
    bad = []
    for package in (CORE, *FACES):
        declared = set(importlib.import_module(package).__all__)
        may_not_reach_in = declared_users(package)
        for name, path in modules().items():
            if not may_not_reach_in(name):
                continue
            for line, mod, names in from_imports(path):
                inside = mod == package or mod.startswith(package + ".")
                if not inside:
                    continue
                if mod != package or names is None:
                    bad.append(f"{name}:{line} imports {mod} (not through {package})")
                else:
                    bad += [
                        f"{name}:{line} {package}.{n} is not declared"
                        for n in names
                        if n not in declared
                    ]
    assert not bad, "\n".join(bad)
    import pilot

    core_names = set(importlib.import_module(CORE).__all__)
    undeclared = [
        f"rp.{n} -> {where}"
        for n, where in pilot._WHERE.items()  # noqa: SLF001 (the user API's table)
        if where.startswith(CORE) and (where != CORE or n not in core_names)
    ]
    assert not undeclared, f"the user API reaches into the core: {undeclared}"


def test_the_declared_names_exist():
    """Every declared name of the core and the faces is there (a rename cannot leave one
    dangling)."""
    for package in (CORE, *FACES):
        pkg = importlib.import_module(package)
        for n in pkg.__all__:
            assert getattr(pkg, n) is not None, f"{package}.{n}"


def test_the_manuals_drawing_is_the_tree():
    """docs/architecture.md draws every package folder, each under its parent, and no other."""
    text = open(os.path.join(ROOT, "docs", "architecture.md")).read()
    drawing = text.split("```text\n", 1)[1].split("```", 1)[0]
    drawn, stack = set(), []
    for line in drawing.splitlines():
        word = line.split(" ", 1)[0] if not line.startswith(" ") else line.strip().split(" ")[0]
        if not word.endswith("/"):
            continue  # a continued description
        depth = (len(line) - len(line.lstrip())) // 4
        stack[depth:] = [word.rstrip("/")]
        drawn.add("/".join(stack))
    found = set()
    for top in FOLDERS:
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            if "__init__.py" in files:
                rel = os.path.relpath(d, ROOT)
                while rel and rel not in found:  # (a folder between packages is drawn too)
                    found.add(rel)
                    rel = os.path.dirname(rel)
    assert drawn == found, (
        f"drawn but not there: {drawn - found}; there but not drawn: {found - drawn}"
    )
