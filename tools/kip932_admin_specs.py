"""Kafka's share-group admin message schemas (KIP-932), for ``gen_messages.py`` while the reference specs
lack them.

``../shared/reference`` (Kafka's specs at the 4.0.0-SNAPSHOT commit 1eb7644, plus three newer KIP-932
files) predates DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91) and DeleteShareGroupOffsets
(92). Their v0 schemas as Kafka 4.1 ships them (``clients/src/main/resources/common/message/`` in
apache/kafka; the same field layout the kafka-protocol crates generate) are written out here, field for
field, in the specs' own form. ``load_specs`` adds each one only when the spec root has no file of that
name, so the day the reference gains the JSON files, they win and this module can go.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ADMIN_SPECS"]


def _f(name: str, type_: str, about: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, "versions": "0+", "about": about, **extra}


_ERROR = _f("ErrorCode", "int16", "The error code, or 0 if there was no error.")
_MESSAGE = _f(
    "ErrorMessage",
    "string",
    "The error message, or null if there was no error.",
    nullableVersions="0+",
    default="null",
)
_THROTTLE = _f(
    "ThrottleTimeMs",
    "int32",
    "The duration in milliseconds for which the request was throttled due to a quota violation, or zero "
    "if the request did not violate any quota.",
)


def _message(api_key: int, kind: str, name: str, fields: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "apiKey": api_key,
        "type": kind,
        "name": name,
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": fields,
    }
    if kind == "request":
        spec["listeners"] = ["broker"]
    return spec


ADMIN_SPECS: dict[str, dict[str, Any]] = {
    "DescribeShareGroupOffsetsRequest.json": _message(
        90,
        "request",
        "DescribeShareGroupOffsetsRequest",
        [
            _f(
                "Groups",
                "[]DescribeShareGroupOffsetsRequestGroup",
                "The groups to describe offsets for.",
                fields=[
                    _f("GroupId", "string", "The group identifier.", entityType="groupId"),
                    _f(
                        "Topics",
                        "[]DescribeShareGroupOffsetsRequestTopic",
                        "The topics to describe offsets for, or null for all topic-partitions.",
                        nullableVersions="0+",
                        fields=[
                            _f("TopicName", "string", "The topic name.", entityType="topicName"),
                            _f("Partitions", "[]int32", "The partitions."),
                        ],
                    ),
                ],
            )
        ],
    ),
    "DescribeShareGroupOffsetsResponse.json": _message(
        90,
        "response",
        "DescribeShareGroupOffsetsResponse",
        [
            _THROTTLE,
            _f(
                "Groups",
                "[]DescribeShareGroupOffsetsResponseGroup",
                "The results for each group.",
                fields=[
                    _f("GroupId", "string", "The group identifier.", entityType="groupId"),
                    _f(
                        "Topics",
                        "[]DescribeShareGroupOffsetsResponseTopic",
                        "The results for each topic.",
                        fields=[
                            _f("TopicName", "string", "The topic name.", entityType="topicName"),
                            _f("TopicId", "uuid", "The unique topic ID."),
                            _f(
                                "Partitions",
                                "[]DescribeShareGroupOffsetsResponsePartition",
                                "The results for each partition.",
                                fields=[
                                    _f("PartitionIndex", "int32", "The partition index."),
                                    _f("StartOffset", "int64", "The share-partition start offset."),
                                    _f("LeaderEpoch", "int32", "The leader epoch of the partition."),
                                    _ERROR,
                                    _MESSAGE,
                                ],
                            ),
                        ],
                    ),
                    _f("ErrorCode", "int16", "The group-level error code, or 0 if there was no error."),
                    _f(
                        "ErrorMessage",
                        "string",
                        "The group-level error message, or null if there was no error.",
                        nullableVersions="0+",
                        default="null",
                    ),
                ],
            ),
        ],
    ),
    "AlterShareGroupOffsetsRequest.json": _message(
        91,
        "request",
        "AlterShareGroupOffsetsRequest",
        [
            _f("GroupId", "string", "The group identifier.", entityType="groupId"),
            _f(
                "Topics",
                "[]AlterShareGroupOffsetsRequestTopic",
                "The topics to alter offsets for.",
                fields=[
                    _f("TopicName", "string", "The topic name.", entityType="topicName", mapKey=True),
                    _f(
                        "Partitions",
                        "[]AlterShareGroupOffsetsRequestPartition",
                        "Each partition to alter offsets for.",
                        fields=[
                            _f("PartitionIndex", "int32", "The partition index."),
                            _f("StartOffset", "int64", "The share-partition start offset."),
                        ],
                    ),
                ],
            ),
        ],
    ),
    "AlterShareGroupOffsetsResponse.json": _message(
        91,
        "response",
        "AlterShareGroupOffsetsResponse",
        [
            _THROTTLE,
            _f("ErrorCode", "int16", "The top-level error code, or 0 if there was no error."),
            _f(
                "ErrorMessage",
                "string",
                "The top-level error message, or null if there was no error.",
                nullableVersions="0+",
                default="null",
            ),
            _f(
                "Responses",
                "[]AlterShareGroupOffsetsResponseTopic",
                "The results for each topic.",
                fields=[
                    _f("TopicName", "string", "The topic name.", entityType="topicName", mapKey=True),
                    _f("TopicId", "uuid", "The unique topic ID."),
                    _f(
                        "Partitions",
                        "[]AlterShareGroupOffsetsResponsePartition",
                        "The results for each partition.",
                        fields=[_f("PartitionIndex", "int32", "The partition index."), _ERROR, _MESSAGE],
                    ),
                ],
            ),
        ],
    ),
    "DeleteShareGroupOffsetsRequest.json": _message(
        92,
        "request",
        "DeleteShareGroupOffsetsRequest",
        [
            _f("GroupId", "string", "The group identifier.", entityType="groupId"),
            _f(
                "Topics",
                "[]DeleteShareGroupOffsetsRequestTopic",
                "The topics to delete offsets for.",
                fields=[_f("TopicName", "string", "The topic name.", entityType="topicName")],
            ),
        ],
    ),
    "DeleteShareGroupOffsetsResponse.json": _message(
        92,
        "response",
        "DeleteShareGroupOffsetsResponse",
        [
            _THROTTLE,
            _f("ErrorCode", "int16", "The top-level error code, or 0 if there was no error."),
            _f(
                "ErrorMessage",
                "string",
                "The top-level error message, or null if there was no error.",
                nullableVersions="0+",
                default="null",
            ),
            _f(
                "Responses",
                "[]DeleteShareGroupOffsetsResponseTopic",
                "The results for each topic.",
                fields=[
                    _f("TopicName", "string", "The topic name.", entityType="topicName"),
                    _f("TopicId", "uuid", "The unique topic ID."),
                    _f("ErrorCode", "int16", "The topic-level error code, or 0 if there was no error."),
                    _f(
                        "ErrorMessage",
                        "string",
                        "The topic-level error message, or null if there was no error.",
                        nullableVersions="0+",
                        default="null",
                    ),
                ],
            ),
        ],
    ),
}
