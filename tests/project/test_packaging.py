"""Packaging: the widgets package installs as leasekit.widgets, editable and from a wheel;
environment.yml lists the same dependencies as pyproject.toml."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_editable_install_maps_widgets_package():
    out = subprocess.run(
        [sys.executable, "-c", "import leasekit.widgets as w; print(w.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    ).stdout
    assert Path(out.strip()) == ROOT / "widgets" / "__init__.py"


def test_wheel_contains_and_imports_widgets_package(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
    )
    wheel = next(tmp_path.glob("leasekit-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "leasekit/widgets/__init__.py" in names
    for package in (ROOT / "leasekit").rglob("__init__.py"):  # every subpackage ships
        assert str(package.relative_to(ROOT)) in names
    assert {
        "leasekit/zk/codec.py",
        "leasekit/zk/ops.py",
        "leasekit/zk/reads.py",
        "leasekit/zk/store.py",
        "leasekit/sparkio/log4j2.properties",  # the quiet logging of a session leasekit starts
    } <= set(names)
    assert not any(n.startswith(("tests/", "widgets/", "bench/")) for n in names)
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
    )
    code = (
        "import leasekit, leasekit.widgets, leasekit.cli; "
        "print(leasekit.__file__, leasekit.widgets.__file__, leasekit.cli.__file__)"
    )
    env = dict(os.environ, PYTHONPATH=str(target))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd="/"
    )
    assert all(p.startswith(str(target)) for p in out.stdout.split())


def test_environment_yml_matches_pyproject():
    tomllib = pytest.importorskip("tomllib")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    lines = (ROOT / "environment.yml").read_text().splitlines()
    pip_deps = [
        ln.strip()[2:] for ln in lines[lines.index("  - pip:") + 1 :] if ln.strip().startswith("- ")
    ]
    assert sorted(pip_deps) == sorted(deps)
    assert any("openjdk=17" in ln for ln in lines)


def _dry_run(target: str, venv: Path) -> list[str]:
    """The commands ``make TARGET`` would run for a virtualenv that does not exist yet."""
    done = subprocess.run(
        ["make", "-n", target, f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_make_demo_installs_only_what_the_demo_needs(tmp_path):
    # make demo: the package (and a JRE when there is no Java), never the test tools
    installs = [line for line in _dry_run("demo", tmp_path / "venv") if "pip install" in line]
    assert installs and not any("[dev" in line for line in installs), installs
    assert any(line.endswith("-e '.'") or "-e '.[java]'" in line for line in installs)
    tests = [line for line in _dry_run("test", tmp_path / "venv") if "pip install -q -e" in line]
    assert any("[dev" in line for line in tests), tests


def test_building_the_package_prints_no_warning(tmp_path):
    # pyproject's license is an SPDX expression: setuptools has nothing to warn about
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "-w",
         str(tmp_path), str(ROOT)],
        capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "default"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "deprecat" not in said.lower() and "BackendWarning" not in said, said[-3000:]
