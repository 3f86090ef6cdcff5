"""The working copy ``leasekit lab`` serves (docs/cli.md): the shipped notebooks are copied in
when missing, an untouched copy follows a newer shipped version, an edited copy is never
overwritten (the newer version goes beside it), and the package's own notebooks are never
served; the notebooks ship in the wheel, so an installed leasekit finds them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import run_cli

from leasekit.cli.workcopy import MANIFEST, prepare, shipped_dir
from leasekit.errors import InvalidArgumentError

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))


def _source(path: Path, **notebooks: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for stem, text in notebooks.items():
        (path / f"{stem}.ipynb").write_text(text)
    return path


def _actions(done) -> dict[str, str]:
    return {c.name: c.action for c in done}


def test_the_shipped_notebooks_are_the_repositorys():
    assert SHIPPED == [
        "consumer_lag_report.ipynb",
        "pinned_read.ipynb",
        "quickstart.ipynb",
        "retention_audit.ipynb",
        "streaming_pipeline.ipynb",
    ]
    assert sorted(p.name for p in shipped_dir().glob("*.ipynb")) == SHIPPED


def test_missing_notebooks_are_copied_and_the_directory_created(tmp_path):
    target = tmp_path / "home" / "leasekit-notebooks"
    done = prepare(target)
    assert _actions(done) == dict.fromkeys(SHIPPED, "copied")
    for name in SHIPPED:
        assert (target / name).read_bytes() == (ROOT / "notebooks" / name).read_bytes()
    assert _actions(prepare(target)) == dict.fromkeys(SHIPPED, "current")  # nothing to do again
    assert sorted(os.listdir(target)) == sorted([*SHIPPED, MANIFEST])


def test_an_untouched_copy_follows_a_newer_shipped_version(tmp_path):
    source = _source(tmp_path / "v1", a="one", b="one")
    target = tmp_path / "copy"
    prepare(target, source)
    _source(source, a="two")  # a newer shipped a; b unchanged
    assert _actions(prepare(target, source)) == {"a.ipynb": "updated", "b.ipynb": "current"}
    assert (target / "a.ipynb").read_text() == "two"
    assert not (target / "a.new.ipynb").exists()


def test_an_edited_copy_is_never_overwritten(tmp_path):
    source = _source(tmp_path / "v1", a="one", b="one")
    target = tmp_path / "copy"
    prepare(target, source)
    (target / "a.ipynb").write_text("mine")  # autosave, or the user's own edits
    assert _actions(prepare(target, source))["a.ipynb"] == "kept"  # nothing newer shipped

    _source(source, a="two")
    done = {c.name: c for c in prepare(target, source)}
    assert done["a.ipynb"].action == "beside"
    assert done["a.ipynb"].path == str(target / "a.new.ipynb")
    assert (target / "a.ipynb").read_text() == "mine"
    assert (target / "a.new.ipynb").read_text() == "two"

    (target / "a.new.ipynb").write_text("mine too")  # offered once; never overwritten either
    assert _actions(prepare(target, source))["a.ipynb"] == "beside"
    assert (target / "a.new.ipynb").read_text() == "mine too"
    assert (target / "a.ipynb").read_text() == "mine"

    _source(source, a="three")  # a newer one again is offered again
    prepare(target, source)
    assert (target / "a.new.ipynb").read_text() == "three"
    assert (target / "a.ipynb").read_text() == "mine"


def test_a_copy_that_was_there_before_is_treated_as_edited(tmp_path):
    source = _source(tmp_path / "v1", a="one")
    target = _source(tmp_path / "copy", a="someone's own a")
    assert _actions(prepare(target, source)) == {"a.ipynb": "beside"}
    assert (target / "a.ipynb").read_text() == "someone's own a"
    manifest = json.loads((target / MANIFEST).read_text())
    assert "a.ipynb" not in manifest["copied"]


@pytest.mark.parametrize("where", ["itself", "inside", "around"])
def test_the_packages_own_notebooks_are_never_served(tmp_path, where):
    source = _source(tmp_path / "pkg" / "notebooks", a="one")
    target = {"itself": source, "inside": source / "sub", "around": tmp_path / "pkg"}[where]
    with pytest.raises(InvalidArgumentError, match="would serve leasekit's own notebooks"):
        prepare(target, source)
    assert sorted(os.listdir(source)) == ["a.ipynb"]


def test_lab_refuses_the_shipped_notebooks_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = sorted(os.listdir(shipped_dir()))
    code, out, err = run_cli(
        capsys, "--zookeeper", "127.0.0.1:1", "lab", "--notebooks", str(shipped_dir())
    )
    assert code == 2 and out == ""
    assert "would serve leasekit's own notebooks" in err and "pass a directory of your own" in err
    assert sorted(os.listdir(shipped_dir())) == before  # nothing written there
    assert not (tmp_path / "leasekit-warehouse").exists()  # nothing started


def test_the_wheel_ships_the_notebooks(tmp_path):
    # lab needs them when leasekit is installed from a wheel, without the repository
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(ROOT)],
        check=True,
    )  # fmt: skip
    wheel = next(tmp_path.glob("leasekit-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"leasekit/notebooks/{n}" for n in SHIPPED} <= names
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
         str(wheel)],
        check=True,
    )  # fmt: skip
    code = (
        "from leasekit.cli.workcopy import shipped_dir; d = shipped_dir(); "
        "print(d); print(sorted(p.name for p in d.glob('*.ipynb')))"
    )
    env = dict(os.environ, PYTHONPATH=str(target))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd="/"
    ).stdout.splitlines()
    assert out[0].startswith(str(target)) and out[1] == repr(SHIPPED)
