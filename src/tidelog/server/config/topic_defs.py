"""Every topic config tidelog knows, with Kafka's names, defaults and broker synonyms.

Invariants:

- Names, types and defaults are Kafka's ``TopicConfig`` (3.x line).
- Each topic config lists its broker synonyms in Kafka's order (``retention.ms`` <- ``log.retention.ms``,
  ``log.retention.minutes``, ``log.retention.hours``); the first synonym that is set wins, and a synonym in
  a coarser unit carries the multiplier that converts it to the topic config's unit.
- A broker synonym chain with more than one member (:func:`broker_synonym_group`) is one setting for
  dynamic configs and DescribeConfigs: setting one member overrides the others.
"""

from __future__ import annotations

from typing import Final

from .config_def import BrokerSynonym, TopicConfigDef, index_by_name
from .errors import ConfigError
from .validators import OneOf, SubsetOf, ThrottledReplicaList, at_least, between
from .values import LONG_MAX, ConfigType

__all__ = [
    "CLEANUP_POLICIES",
    "COMPRESSION_TYPES",
    "TIMESTAMP_TYPES",
    "TOPIC_CONFIGS",
    "broker_synonym_group",
    "topic_def",
]

B = ConfigType.BOOLEAN
S = ConfigType.STRING
I = ConfigType.INT  # noqa: E741
L = ConfigType.LONG
D = ConfigType.DOUBLE
LI = ConfigType.LIST

_HOUR_MS: Final = 3_600_000
_MINUTE_MS: Final = 60_000
_LONG_MAX_STR: Final = str(LONG_MAX)

TIMESTAMP_TYPES: Final = ("CreateTime", "LogAppendTime")
COMPRESSION_TYPES: Final = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
CLEANUP_POLICIES: Final = ("compact", "delete")


def _syn(*names: str | tuple[str, int]) -> tuple[BrokerSynonym, ...]:
    return tuple(BrokerSynonym(n) if isinstance(n, str) else BrokerSynonym(n[0], n[1]) for n in names)


# fmt: off
TOPIC_CONFIGS: Final[dict[str, TopicConfigDef]] = index_by_name(
    [
        TopicConfigDef("cleanup.policy", LI, "delete", "delete and/or compact.", SubsetOf(CLEANUP_POLICIES), broker_synonyms=_syn("log.cleanup.policy")),
        TopicConfigDef("compression.type", S, "producer", "Final compression type of the topic's data.", OneOf(COMPRESSION_TYPES), broker_synonyms=_syn("compression.type")),
        TopicConfigDef("delete.retention.ms", L, "86400000", "How long tombstones are kept in a compacted topic.", at_least(0), broker_synonyms=_syn("log.cleaner.delete.retention.ms")),
        TopicConfigDef("file.delete.delay.ms", L, "60000", "Delay before a deleted segment's files are removed.", at_least(0), broker_synonyms=_syn("log.segment.delete.delay.ms")),
        TopicConfigDef("flush.messages", L, _LONG_MAX_STR, "Messages between forced fsyncs.", at_least(1), broker_synonyms=_syn("log.flush.interval.messages")),
        TopicConfigDef("flush.ms", L, _LONG_MAX_STR, "Milliseconds between forced fsyncs.", at_least(0), broker_synonyms=_syn("log.flush.interval.ms", "log.flush.scheduler.interval.ms")),
        TopicConfigDef("follower.replication.throttled.replicas", LI, "", "Replicas (partition:broker,... or *) whose follower fetches follower.replication.throttled.rate limits while out of the ISR.", ThrottledReplicaList()),
        TopicConfigDef("leader.replication.throttled.replicas", LI, "", "Replicas (partition:broker,... or *) whose leader leader.replication.throttled.rate limits serving followers out of the ISR.", ThrottledReplicaList()),
        TopicConfigDef("index.interval.bytes", I, "4096", "Bytes between offset index entries.", at_least(0), broker_synonyms=_syn("log.index.interval.bytes")),
        TopicConfigDef("max.compaction.lag.ms", L, _LONG_MAX_STR, "Maximum time a record stays ineligible for compaction.", at_least(1), broker_synonyms=_syn("log.cleaner.max.compaction.lag.ms")),
        TopicConfigDef("max.message.bytes", I, "1048588", "Largest record batch size allowed.", at_least(0), broker_synonyms=_syn("message.max.bytes")),
        TopicConfigDef("message.timestamp.type", S, "CreateTime", "CreateTime or LogAppendTime.", OneOf(TIMESTAMP_TYPES), broker_synonyms=_syn("log.message.timestamp.type")),
        TopicConfigDef("message.timestamp.difference.max.ms", L, _LONG_MAX_STR, "Deprecated: maximum |CreateTime - broker time|.", at_least(0), broker_synonyms=_syn("log.message.timestamp.difference.max.ms")),
        TopicConfigDef("message.timestamp.before.max.ms", L, _LONG_MAX_STR, "How far in the past a CreateTime may be.", at_least(0), broker_synonyms=_syn("log.message.timestamp.before.max.ms")),
        TopicConfigDef("message.timestamp.after.max.ms", L, _LONG_MAX_STR, "How far in the future a CreateTime may be.", at_least(0), broker_synonyms=_syn("log.message.timestamp.after.max.ms")),
        TopicConfigDef("min.cleanable.dirty.ratio", D, "0.5", "Minimum dirty ratio before the cleaner compacts the log.", between(0, 1), broker_synonyms=_syn("log.cleaner.min.cleanable.ratio")),
        TopicConfigDef("min.compaction.lag.ms", L, "0", "Minimum time a record stays uncompacted.", at_least(0), broker_synonyms=_syn("log.cleaner.min.compaction.lag.ms")),
        TopicConfigDef("min.insync.replicas", I, "1", "Minimum in-sync replicas for an acks=all produce.", at_least(1), broker_synonyms=_syn("min.insync.replicas")),
        TopicConfigDef("preallocate", B, "false", "Preallocate segment files.", broker_synonyms=_syn("log.preallocate")),
        TopicConfigDef("retention.bytes", L, "-1", "Maximum partition size before old segments are deleted; -1 = no limit.", broker_synonyms=_syn("log.retention.bytes")),
        TopicConfigDef("retention.ms", L, "604800000", "How long a segment is kept; -1 = no time limit.", at_least(-1), broker_synonyms=_syn("log.retention.ms", ("log.retention.minutes", _MINUTE_MS), ("log.retention.hours", _HOUR_MS))),
        TopicConfigDef("segment.bytes", I, "1073741824", "Segment file size.", at_least(14), broker_synonyms=_syn("log.segment.bytes")),
        TopicConfigDef("segment.index.bytes", I, "10485760", "Size of the offset/time index files.", at_least(4), broker_synonyms=_syn("log.index.size.max.bytes")),
        TopicConfigDef("segment.jitter.ms", L, "0", "Maximum random jitter subtracted from segment.ms.", at_least(0), broker_synonyms=_syn("log.roll.jitter.ms", ("log.roll.jitter.hours", _HOUR_MS))),
        TopicConfigDef("segment.ms", L, "604800000", "Roll a segment after this time even if not full.", at_least(1), broker_synonyms=_syn("log.roll.ms", ("log.roll.hours", _HOUR_MS))),
        TopicConfigDef("unclean.leader.election.enable", B, "false", "Allow out-of-sync replicas to become leader.", broker_synonyms=_syn("unclean.leader.election.enable")),
    ]
)
# fmt: on
"""Topic configs by Kafka name, each with its broker synonyms (Kafka's ``TopicConfigSynonyms``)."""


def topic_def(name: str) -> TopicConfigDef:
    """The topic config definition for ``name``; raises :class:`ConfigError` for an unknown name."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise ConfigError(f"Unknown topic config name: {name}", key=name)
    return definition


def broker_synonym_group(name: str) -> tuple[str, ...]:
    """Kafka's ``DynamicBrokerConfig.brokerConfigSynonyms``: the chain ``name`` belongs to."""
    for definition in TOPIC_CONFIGS.values():
        group = tuple(s.name for s in definition.broker_synonyms)
        if len(group) > 1 and name in group:
            return group
    return (name,)
