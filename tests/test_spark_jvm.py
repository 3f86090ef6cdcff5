"""The suite's Spark driver options (``spark_jvm``): the class-data archive is built once per
machine, by one run at a time, whatever a stale marker file holds."""

from __future__ import annotations

import os

import pytest
import spark_jvm


@pytest.mark.parametrize("held", ["", "not a pid", str(2**64), "-1", "0", "999999999"])
def test_a_marker_without_a_live_training_does_not_block_one(tmp_path, held):
    archive = tmp_path / "spark-driver-x.jsa"
    archive.with_suffix(".training").write_text(held)
    assert spark_jvm._training(archive) is False


def test_a_live_training_is_not_started_twice(tmp_path):
    archive = tmp_path / "spark-driver-x.jsa"
    archive.with_suffix(".training").write_text(str(os.getpid()))
    assert spark_jvm._training(archive) is True


def test_an_existing_archive_is_used_and_nothing_is_trained(tmp_path):
    archive = spark_jvm._archive_path(tmp_path)
    if archive is None:
        pytest.skip("no Java on this machine")
    archive.write_bytes(b"")
    opts, training = spark_jvm.spark_submit_opts(tmp_path)
    assert training is None
    assert opts == f"{spark_jvm.QUICK_JIT} -XX:SharedArchiveFile={archive}"
    assert archive.name.startswith("spark-driver-") and archive.parent == tmp_path
