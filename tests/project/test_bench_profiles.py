"""Every benchmark's profile names library functions that exist: a move or rename in the
library breaks the benchmark's breakdown here, not on the next quiet machine."""

from __future__ import annotations

import importlib
import pkgutil

import bench


def _profile_targets():
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"bench.{info.name}")
        for name, value in vars(module).items():
            if name.isupper() and isinstance(value, dict) and value:
                if all(isinstance(t, str) and ":" in t for t in value.values()):
                    yield from ((info.name, label, t) for label, t in value.items())


def test_every_profiled_function_exists():
    targets = list(_profile_targets())
    assert len(targets) > 20
    missing = []
    for bench_name, label, target in targets:
        module_name, attr = target.split(":")
        found = importlib.import_module(module_name)
        for part in attr.split("."):
            found = getattr(found, part, None)
        if not callable(found):
            missing.append(f"bench/{bench_name}.py {label}: {target}")
    assert not missing, "profiled functions that do not exist:\n" + "\n".join(missing)
