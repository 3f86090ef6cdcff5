"""Layers import downwards only (house style 14): the one layer map of the code base, and the
check that every import of leasekit/ and widgets/ follows it (README "Code map" shows it too).

Every ``import``/``from`` counts, wherever it is: at the top, inside a function, or under
``if TYPE_CHECKING:``. Modules of the same layer may import each other; the import graph has
no cycle either way.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"leasekit": ROOT / "leasekit", "leasekit.widgets": ROOT / "widgets"}

LAYERS: dict[str, float] = {
    # L0: records, errors and pure helpers
    "leasekit.errors": 0,
    "leasekit.structs": 0,
    "leasekit.durations": 0,
    "leasekit.validate": 0,
    "leasekit.properties": 0,
    "leasekit.memory": 0,
    "leasekit.progress": 0,
    "leasekit.dirscan": 0,
    # L1: the ZooKeeper layer; the embedded server is a leaf beside it
    "leasekit.zk": 1,
    "leasekit.embedded": 1.5,
    # L2: the warehouse, who owns it, and the context the services take
    "leasekit.warehouse": 2,
    "leasekit.ownership": 2,
    "leasekit.context": 2,
    # L3-L5: tables (the catalog returns TableInfo), the offset log, snapshot metadata
    "leasekit.tables": 3,
    "leasekit.log": 4,
    "leasekit.snapshots": 5,
    # L6: consumers below spark below leases
    "leasekit.consumers": 6.0,
    "leasekit.spark": 8.6,
    "leasekit.spark.compact": 6.1,
    "leasekit.spark.frames": 6.1,
    "leasekit.spark.session": 6.1,
    "leasekit.spark.sources": 6.1,
    "leasekit.spark.datasource": 8.5,
    "leasekit.leases": 6.2,
    # L7: retention, then monitoring above it: the lag of groups and its history, the lease
    # inventory (side by side; neither imports the other)
    "leasekit.retention": 7,
    "leasekit.monitor": 7.5,
    "leasekit.monitor.lag": 7.5,
    "leasekit.monitor.leases": 7.5,
    # L8: the table handle, the connection, the janitor, test support and the live views
    "leasekit.janitor": 8,
    "leasekit.table": 8,
    "leasekit.connection": 8,
    "leasekit.testing": 8,
    "leasekit.live": 8,
    # the Prometheus exporter reads both monitors (lag, leases) and retention's plan: above them
    "leasekit.monitor.exporter": 8,
    # L9: the command line (the demo included)
    "leasekit.cli": 9,
}
"""Layer of each package or module of leasekit/, by longest dotted prefix."""

FACE_LAYER = 10
"""``leasekit/__init__.py``, the public face: above every module of the library."""

WIDGETS_MAY_IMPORT = ("leasekit", "leasekit.errors", "leasekit.live")
"""What widgets/ may import of leasekit, besides ``leasekit.widgets`` itself."""


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
            base = node.module or ""
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            out.append((base, node.lineno))
            out += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return out


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


def layer_of(module: str) -> float | None:
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
            out.append(f"{_where(module, 1)}: {module} has no layer in tests/test_layers.py")
            continue
        for target, line in targets:
            theirs = layer_of(target) if not target.startswith("leasekit.widgets") else 11
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
    assert not unmapped, f"modules with no layer in tests/test_layers.py: {unmapped}"


def test_imports_go_only_downwards():
    # house style 14: a module imports only its own layer and the layers below it
    violations = layer_violations()
    assert not violations, f"{len(violations)} upward import(s):\n" + "\n".join(violations)


def test_no_import_cycles():
    # house style 14: counting lazy and TYPE_CHECKING imports, no module reaches itself
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
