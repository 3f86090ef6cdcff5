"""Layers import downwards only: the one layer map of the code base, and the
check that every import of leasekit/ and widgets/ follows it (README "Code map" shows it too).

Every ``import``/``from`` counts, wherever it is: at the top, inside a function, or under
``if TYPE_CHECKING:``. Modules of the same layer may import each other; the import graph has
no cycle either way. Faces stay faces: ``import leasekit.spark`` loads nothing beyond it, and
the live views, widgets and notebooks use only public names (no connection's context).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"leasekit": ROOT / "leasekit", "leasekit.widgets": ROOT / "widgets"}

FLOORS: list[dict[str, str]] = [
    {
        "leasekit.errors": "one error root, every public error beneath it",
        "leasekit.structs": "the value records users get, a docstring per field",
        "leasekit.durations": "parsing durations and the one people-facing duration format",
        "leasekit.sizes": "the one people-facing byte-size format",
        "leasekit.rates": "a group's consume and produce rates and the falling-behind rule (M6)",
        "leasekit.validate": "checks of names, ids, ints, bools and host names",
        "leasekit.properties": "table properties and namespace settings",
        "leasekit.memory": "the cycle collector paused while bulk work builds many objects",
        "leasekit.progress": "progress bars",
        "leasekit.dirscan": "listing a local directory tree again only where it changed",
    },
    {
        "leasekit.zk": "the only kazoo user: session, paths, codec, records, transactions, watches",
        "leasekit.embedded": "the embedded ZooKeeper server and ensemble, Java discovery",
    },
    {
        "leasekit.warehouse": "data files through pyarrow.fs",
        "leasekit.ownership": "which namespace owns a warehouse directory",
        "leasekit.context": "the Context every service takes",
    },
    {"leasekit.tables": "names, schemas, bucketing, the bucket layout, rescaling, the catalog"},
    {"leasekit.log": "the per-bucket offset log: states, appends, segments, reads by offset"},
    {"leasekit.snapshots": "snapshot metadata, and what a read of a rescaled table is built from"},
    {"leasekit.sparkio": "Spark I/O: the session, frames over files, compaction, reads, writes"},
    {"leasekit.consumers": "the Consumer, its group protocol, committed offsets, rescale lineage"},
    {
        "leasekit.consumers.admin": "groups from outside: describe, lag health, reset, delete, "
        "read_changes"
    },
    {"leasekit.leases": "KV snapshot leases: acquire, renew, release, drop, expiry, lease reads"},
    {"leasekit.retention": "explained retention: gather, plan (pure), apply"},
    {
        "leasekit.monitor": "monitoring of a namespace, by job (the sub-packages on this floor)",
        "leasekit.monitor.lag": "lag readings of every group, the lag history, the overview",
        "leasekit.monitor.leases": "the lease inventory: what each lease pins and holds back",
    },
    {"leasekit.monitor.exporter": "the Prometheus exporter over lag and the lease inventory"},
    {
        "leasekit.table": "the Table handle users hold",
        "leasekit.connection": "connect() and the Connection facade",
        "leasekit.janitor": "the leader-elected janitor",
        "leasekit.testing": "what tests and benchmarks need of the inside",
        "leasekit.live": "live views over the connection's public methods",
    },
    {"leasekit.datasource": 'format("leasekit"): Spark\'s Python data source, batch, stream, sink'},
    {"leasekit.cli": "the leasekit command line and the demo"},
    {"leasekit.spark": "the public Spark functions, a face whose names load on first use"},
]
"""The floors of leasekit/, lowest first: a module imports its own floor and the floors below
it. One line per package (or top-level module) saying what it owns; README "Code map" and
docs/architecture.md show the same list."""

LAYERS: dict[str, int] = {name: n for n, floor in enumerate(FLOORS) for name in floor}
"""Floor of each package or module of leasekit/, by longest dotted prefix."""

FACE_LAYER = len(FLOORS) - 1
"""``leasekit/__init__.py``, the public face, stands with the Spark face on the top floor."""

WIDGETS_MAY_IMPORT = ("leasekit", "leasekit.errors", "leasekit.live")
"""What widgets/ may import of leasekit, besides ``leasekit.widgets`` itself."""

NOTEBOOKS_MAY_IMPORT = (*WIDGETS_MAY_IMPORT, "leasekit.widgets")
"""What the notebooks may import of leasekit: the public face, its errors, the live views and
the panels."""

LIVE_MAY_NOT_IMPORT = ("leasekit.consumers", "leasekit.monitor", "leasekit.zk", "leasekit.context")
"""What ``leasekit.live`` reaches only through the connection's public methods."""


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of leasekit/ and widgets/ by dotted name: its file, whether a package."""
    out = {}
    for package, base in SOURCES.items():
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package, *parts])] = (path, path.name == "__init__.py")
    return out


MODULES = _modules()


def _imports(module: str, path: Path, is_package: bool) -> list[tuple[str, int]]:
    """Every module name ``module`` imports (``from m import n`` gives ``m`` and ``m.n``),
    anywhere in the file, absolute, with its line."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(module, is_package, node)
            out.append((base, node.lineno))
            out += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return out


def _from_base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name of the module ``from ... import`` in ``module`` imports from."""
    if not node.level:
        return node.module or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _resolve(name: str) -> str | None:
    """The longest known module ``name`` starts with; None for other packages."""
    parts = name.split(".")
    while parts and ".".join(parts) not in MODULES:
        parts.pop()
    return ".".join(parts) if parts else None


def _edges() -> dict[str, list[tuple[str, int]]]:
    """Imports between modules of leasekit/ and widgets/; a module's own packages left out."""
    graph: dict[str, list[tuple[str, int]]] = {}
    for module, (path, is_package) in MODULES.items():
        targets: dict[tuple[str, int], None] = {}
        for name, line in _imports(module, path, is_package):
            target = _resolve(name)
            if target is None or target == module or module.startswith(target + "."):
                continue
            targets[target, line] = None
        graph[module] = list(targets)
    return graph


def layer_of(module: str) -> int | None:
    """The layer of a module of leasekit/ (None: not in the map)."""
    if module == "leasekit":
        return FACE_LAYER
    parts = module.split(".")
    while parts:
        if ".".join(parts) in LAYERS:
            return LAYERS[".".join(parts)]
        parts.pop()
    return None


def _where(module: str, line: int) -> str:
    return f"{MODULES[module][0].relative_to(ROOT)}:{line}"


def _widget_violation(target: str) -> bool:
    if target == "leasekit.widgets" or target.startswith("leasekit.widgets."):
        return False
    return target not in WIDGETS_MAY_IMPORT


def layer_violations() -> list[str]:
    out = []
    for module, targets in _edges().items():
        if module == "leasekit.widgets" or module.startswith("leasekit.widgets."):
            out += [
                f"{_where(module, line)}: widgets import {target}; they may import only "
                f"{', '.join(WIDGETS_MAY_IMPORT)} and leasekit.widgets"
                for target, line in targets
                if _widget_violation(target)
            ]
            continue
        mine = layer_of(module)
        if mine is None:
            out.append(
                f"{_where(module, 1)}: {module} has no layer in tests/project/test_layers.py"
            )
            continue
        for target, line in targets:
            theirs = (
                layer_of(target) if not target.startswith("leasekit.widgets") else FACE_LAYER + 1
            )
            if theirs is not None and theirs > mine:
                out.append(
                    f"{_where(module, line)}: {module} (L{mine:g}) imports {target} "
                    f"(L{theirs:g}), a higher layer"
                )
    return out


def import_cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph = {m: sorted({t for t, _ in targets}) for m, targets in _edges().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_map_places_every_module_of_the_library():
    unmapped = [m for m in MODULES if not m.startswith("leasekit.widgets") and layer_of(m) is None]
    assert not unmapped, f"modules with no layer in tests/project/test_layers.py: {unmapped}"


def test_every_import_of_the_library_names_a_module_that_exists():
    # a relative import one dot short inside a function runs only when called: find it here
    missing = []
    for module, (path, is_package) in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, ast.ImportFrom) or not (node.level or _ours(node.module)):
                continue
            name = _from_base(module, is_package, node)
            if name not in MODULES:
                missing.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert not missing, "imports of modules that do not exist:\n" + "\n".join(missing)


def _ours(name: str | None) -> bool:
    return bool(name) and (name == "leasekit" or name.startswith("leasekit."))


def test_imports_go_only_downwards():
    # a module imports only its own layer and the layers below it
    violations = layer_violations()
    assert not violations, f"{len(violations)} upward import(s):\n" + "\n".join(violations)


def test_no_import_cycles():
    # counting lazy and TYPE_CHECKING imports, no module reaches itself
    cycles = import_cycles()
    assert not cycles, "import cycles:\n" + "\n".join(", ".join(c) for c in cycles)


def _shared_cycle_tool() -> Path | None:
    """``shared/tools/import_cycles.py`` beside the checkout (or beside its worktrees' folder)."""
    for base in (ROOT.parent, ROOT.parent.parent):
        tool = base / "shared" / "tools" / "import_cycles.py"
        if tool.is_file():
            return tool
    return None


def test_no_import_cycles_per_the_shared_tool():
    tool = _shared_cycle_tool()
    if tool is None:
        pytest.skip("shared/tools/import_cycles.py is not beside this checkout (dev machines only)")
    command = [sys.executable, str(tool), "leasekit", "leasekit", "--typing"]
    command += ["--map", "leasekit.widgets=widgets"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def _loaded_by(statement: str) -> set[str]:
    """The leasekit, pyspark and py4j modules a fresh interpreter has loaded after
    ``statement``."""
    code = f"import sys; {statement}; print(*sorted(sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return {m for m in done.stdout.split() if m.split(".")[0] in ("leasekit", "pyspark", "py4j")}


def test_importing_the_spark_face_loads_nothing_beyond_it():
    # leasekit.spark is a face; its names load on first use, Spark with them
    package = _loaded_by("import leasekit")
    face = _loaded_by("import leasekit.spark")
    assert face - package == {"leasekit.spark"}, (
        f"import leasekit.spark loads more than its face: {sorted(face - package)}"
    )


def _notebook_code(path: Path) -> Iterator[tuple[int, str]]:
    """Each code cell of a notebook by number, its IPython magics and shell lines blanked."""
    cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    for number, cell in enumerate(c for c in cells if c.get("cell_type") == "code"):
        lines = "".join(cell.get("source", [])).splitlines()
        magic = ("%", "!")
        yield number, "\n".join("" if t.lstrip().startswith(magic) else t for t in lines)


def _leasekit_imports(source: str, where: str) -> Iterator[tuple[str, int]]:
    """The leasekit modules an ``import`` or ``from ... import`` of ``source`` names."""
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        yield from ((n, node.lineno) for n in names if n.split(".")[0] == "leasekit")


def test_notebooks_import_only_the_public_face():
    # the notebooks are the user's entry points and use what users use
    found = [
        f"{path.relative_to(ROOT)} (code cell {number}):{line}: imports {name}"
        for path in sorted((ROOT / "notebooks").glob("*.ipynb"))
        for number, code in _notebook_code(path)
        for name, line in _leasekit_imports(code, f"{path.name} cell {number}")
        if name not in NOTEBOOKS_MAY_IMPORT
    ]
    allowed = ", ".join(NOTEBOOKS_MAY_IMPORT)
    assert not found, f"notebooks may import only {allowed}:\n" + "\n".join(found)


def test_live_views_widgets_and_notebooks_never_take_a_connections_context():
    # a connection's context is the library's own; views use its methods
    files = [ROOT / "leasekit" / "live.py", *sorted((ROOT / "widgets").rglob("*.py"))]
    files += sorted((ROOT / "notebooks").glob("*.ipynb"))
    found = [str(p.relative_to(ROOT)) for p in files if "context_of" in p.read_text("utf-8")]
    assert not found, f"context_of in {', '.join(found)}"


def test_live_views_reach_the_library_through_the_connection():
    # leasekit.live stands beside the connection, not on the floors below it
    found = [
        f"{_where('leasekit.live', line)}: imports {target}"
        for target, line in _edges()["leasekit.live"]
        if any(target == m or target.startswith(m + ".") for m in LIVE_MAY_NOT_IMPORT)
    ]
    assert not found, "\n".join(found)


def _docs_floors() -> list[tuple[int, str]]:
    """(floor, module) of each row of docs/architecture.md's table."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| `([^`]+)` \|", text, re.M)
    return [
        (int(n), path.removesuffix("/").removesuffix(".py").replace("/", ".")) for n, path in rows
    ]


def test_the_architecture_page_shows_the_same_floors():
    # the documented layers are the tested ones, in the same order
    assert _docs_floors() == [(n, name) for n, floor in enumerate(FLOORS) for name in floor]
