"""Checkpoint files (Kafka's text format, atomic replacement) and meta.properties."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode
from tidelog.storage.checkpoint import atomic_write, read_offsets_checkpoint, write_offsets_checkpoint
from tidelog.storage.errors import (
    CheckpointError,
    InconsistentClusterIdError,
    InconsistentNodeIdError,
    LogDirError,
)
from tidelog.storage.meta_properties import (
    MetaProperties,
    ensure_meta_properties,
    new_cluster_id,
    read_meta_properties,
)


def test_round_trip_in_kafka_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    offsets = {
        TopicPartition("b.topic-x", 1): 99,
        TopicPartition("a_topic", 0): 1234,
        TopicPartition("b.topic-x", 0): 0,
    }
    write_offsets_checkpoint(path, offsets)
    assert path.read_text() == "0\n3\na_topic 0 1234\nb.topic-x 0 0\nb.topic-x 1 99\n"
    assert read_offsets_checkpoint(path) == offsets


def test_empty_and_missing(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    assert read_offsets_checkpoint(path) == {}
    write_offsets_checkpoint(path, {})
    assert path.read_text() == "0\n0\n"
    assert read_offsets_checkpoint(path) == {}


def test_reads_a_file_written_by_kafka(tmp_path: Path) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_text("0\n2\n__consumer_offsets 12 0\norders 3 4567\n")
    assert read_offsets_checkpoint(path) == {
        TopicPartition("__consumer_offsets", 12): 0,
        TopicPartition("orders", 3): 4567,
    }


def test_atomic_replace_leaves_no_temp_and_ignores_a_stale_one(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    write_offsets_checkpoint(path, {TopicPartition("t", 0): 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cp"]
    # A crash between writing the temp file and the rename leaves a .tmp: readers see the old content.
    (tmp_path / "cp.tmp").write_text("0\n1\nt 0 99")
    assert read_offsets_checkpoint(path) == {TopicPartition("t", 0): 1}
    # A half-written temp file is simply overwritten by the next checkpoint.
    write_offsets_checkpoint(path, {TopicPartition("t", 0): 2})
    assert read_offsets_checkpoint(path) == {TopicPartition("t", 0): 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cp"]


def test_atomic_write_replaces_whole_content(tmp_path: Path) -> None:
    path = tmp_path / "f"
    atomic_write(path, b"a" * 1000)
    atomic_write(path, b"b")
    assert path.read_bytes() == b"b"


@pytest.mark.parametrize(
    "content",
    [
        "",
        "0\n",
        "1\n0\n",
        "0\n2\nt 0 1\n",
        "0\n1\nt 0 1\nt 1 2\n",
        "0\n1\nt x 1\n",
        "0\n1\nt 0\n",
        "zero\n0\n",
        "0\n1\nt 0 1 extra\n",
    ],
)
def test_malformed_checkpoints_raise(tmp_path: Path, content: str) -> None:
    path = tmp_path / "cp"
    path.write_text(content)
    with pytest.raises(CheckpointError) as info:
        read_offsets_checkpoint(path)
    assert info.value.error_code == ErrorCode.KAFKA_STORAGE_ERROR


def test_meta_properties_written_then_checked(tmp_path: Path) -> None:
    cluster = new_cluster_id()
    assert len(cluster) == 22
    meta = ensure_meta_properties(tmp_path, node_id=3, cluster_id=cluster)
    assert meta == MetaProperties(1, 3, cluster)
    text = (tmp_path / "meta.properties").read_text()
    assert "version=1\n" in text
    assert "node.id=3\n" in text
    assert f"cluster.id={cluster}\n" in text
    assert read_meta_properties(tmp_path) == meta
    assert ensure_meta_properties(tmp_path, node_id=3, cluster_id=cluster) == meta
    with pytest.raises(InconsistentClusterIdError) as info:
        ensure_meta_properties(tmp_path, node_id=3, cluster_id="another")
    assert info.value.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    assert str(info.value) == (
        f"{tmp_path}/meta.properties: the log dir belongs to cluster {cluster}, this broker to cluster another"
    )
    with pytest.raises(InconsistentNodeIdError) as node_info:
        ensure_meta_properties(tmp_path, node_id=4, cluster_id=cluster)
    assert str(node_info.value) == (
        f"{tmp_path}/meta.properties: the log dir belongs to node 3, this broker is node 4"
    )


@pytest.mark.parametrize("content", [b"\x9e\xff garbage", b"version=1\n", b"version=x\nnode.id=1\n"])
def test_unreadable_meta_properties_name_the_file(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "meta.properties").write_bytes(content)
    with pytest.raises(
        LogDirError, match=f"^(cannot read|malformed) {re.escape(str(tmp_path))}/meta\\.properties: "
    ):
        read_meta_properties(tmp_path)


def test_reads_kafka_v0_meta_properties(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text(
        "#\n#Tue Jan 02 10:00:00 UTC 2024\nbroker.id=7\nversion=0\ncluster.id=abc\n"
    )
    assert read_meta_properties(tmp_path) == MetaProperties(0, 7, "abc")
    upgraded = ensure_meta_properties(tmp_path, node_id=7, cluster_id="abc")
    assert upgraded == MetaProperties(1, 7, "abc")
    assert read_meta_properties(tmp_path) == upgraded
