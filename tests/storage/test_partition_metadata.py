"""partition.metadata: a log's topic id in Kafka's format, written once, never silently replaced."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tidelog.storage.partition_metadata import InconsistentTopicIdError, read_topic_id, write_topic_id


def test_written_in_kafkas_format_and_read_back(tmp_path: Path) -> None:
    topic_id = uuid.UUID("5a3b2a1f-0000-4000-8000-00000000abcd")
    write_topic_id(tmp_path, topic_id)
    assert (tmp_path / "partition.metadata").read_text() == "version: 0\ntopic_id: WjsqHwAAQACAAAAAAACrzQ\n"
    assert read_topic_id(tmp_path) == topic_id
    write_topic_id(tmp_path, topic_id)  # the same id again: nothing changes
    with pytest.raises(InconsistentTopicIdError):
        write_topic_id(tmp_path, uuid.uuid4())
    assert read_topic_id(tmp_path) == topic_id


@pytest.mark.parametrize(
    "content", ["", "version: 7\ntopic_id: WjsqHwAAQACAAAAAAACrzQ\n", "version: 0\ntopic_id: !!\n"]
)
def test_a_file_that_does_not_parse_reads_as_none(tmp_path: Path, content: str) -> None:
    (tmp_path / "partition.metadata").write_text(content)
    assert read_topic_id(tmp_path) is None
    assert read_topic_id(tmp_path / "missing") is None
