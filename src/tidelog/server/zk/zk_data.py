"""The JSON in Kafka's znodes (``kafka.zk.ZkData``, apache/kafka 3.3), as typed records and pure codecs.

Each ``encode_*`` writes the bytes Kafka 3.3 writes (compact JSON, UTF-8, the same keys, versions and value
types: Kafka writes timestamps and producer-id bounds as JSON *strings*, the cluster id's version as the
string ``"1"``); each ``decode_*`` reads what Kafka writes and raises :class:`ZkDataError` for anything
else, never a bare ``KeyError``/``ValueError``. Key order carries no meaning. The codecs are pure
functions: no I/O, no clock (timestamps come in as arguments).

Formats (the version written first):

- ``/brokers/ids/N`` v5: ``{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},
  "endpoints":["PLAINTEXT://host:9092"],"jmx_port":-1,"port":9092,"host":"host","version":5,
  "timestamp":"1700000000000"}`` plus ``"rack"`` when set. ``host``/``port`` are the first PLAINTEXT
  endpoint's (``null``/``-1`` without one). v1-v4 are read too.
- ``/controller`` v1: ``{"version":1,"brokerid":1,"timestamp":"1700000000000"}`` (v2, with Kafka 3.4+'s
  ``kraftControllerEpoch``, is read too); ``/controller_epoch``: the epoch as decimal text.
- ``/brokers/topics/T`` v3: ``{"version":3,"partitions":{"0":[1,2,3]},"adding_replicas":{},
  "removing_replicas":{},"topic_id":"<Kafka's base64 Uuid>"}`` (``topic_id`` only when there is one).
- ``/brokers/topics/T/partitions/P/state`` v1: ``{"version":1,"leader":1,"leader_epoch":0,
  "controller_epoch":1,"isr":[1,2,3]}`` plus ``"leader_recovery_state":1`` only while RECOVERING. The znode
  version is the partition epoch (KIP-380's ``partitionEpoch``): it is not in the JSON.
- ``/latest_producer_id_block`` v1: ``{"version":1,"broker":1,"block_start":"0","block_end":"999"}``.
- ``/config/<type>/<name>`` v1: ``{"version":1,"config":{"retention.ms":"1000"}}``.
- ``/config/changes/config_change_N`` v2: ``{"version":2,"entity_path":"topics/T"}``.
- ``/log_dir_event_notification/log_dir_event_N`` v1: ``{"version":1,"broker":1,"event":1}`` (Kafka's
  LogDirFailure event) plus tidelog's ``"partitions"`` (the partitions in the failed dir: the controller
  cannot ask the broker with a LeaderAndIsr request as Kafka's does; Kafka's controller ignores the field).
- ``/isr_change_notification/isr_change_N`` v1: ``{"version":1,"partitions":[{"topic":"t","partition":0}]}``.
- ``/cluster/id``: ``{"version":"1","id":"<cluster id>"}``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tidelog.protocol import TopicPartition
from tidelog.replication.leader_and_isr import NO_LEADER, RECOVERED, RECOVERING, LeaderAndIsr

__all__ = [
    "BROKER_REGISTRATION_VERSION",
    "NO_LEADER",
    "PRODUCER_ID_BLOCK_SIZE",
    "RECOVERED",
    "RECOVERING",
    "BrokerRegistration",
    "ControllerRegistration",
    "Endpoint",
    "LeaderAndIsr",
    "ProducerIdBlock",
    "ReplicaAssignment",
    "TopicAssignment",
    "ZkDataError",
    "decode_broker_registration",
    "decode_cluster_id",
    "decode_config_change_notification",
    "decode_controller",
    "decode_controller_epoch",
    "decode_entity_config",
    "decode_isr_change_notification",
    "decode_log_dir_event",
    "decode_leader_and_isr",
    "decode_producer_id_block",
    "decode_topic_assignment",
    "encode_broker_registration",
    "encode_cluster_id",
    "encode_config_change_notification",
    "encode_controller",
    "encode_controller_epoch",
    "encode_entity_config",
    "encode_isr_change_notification",
    "encode_log_dir_event",
    "encode_leader_and_isr",
    "encode_producer_id_block",
    "encode_topic_assignment",
    "kafka_uuid_from_string",
    "kafka_uuid_string",
]

BROKER_REGISTRATION_VERSION: Final = 5
PRODUCER_ID_BLOCK_SIZE: Final = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


class ZkDataError(ValueError):
    """A znode's bytes are not the JSON Kafka writes there."""


# ---- records ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """One advertised listener: ``PLAINTEXT://host:9092`` (Kafka's ``EndPoint``). ``host`` None: all interfaces."""

    listener_name: str
    host: str | None
    port: int
    security_protocol: str

    @property
    def connection_string(self) -> str:
        if self.host is None:
            address = f":{self.port}"
        elif ":" in self.host:
            address = f"[{self.host}]:{self.port}"  # IPv6, as Kafka's Utils.formatAddress
        else:
            address = f"{self.host}:{self.port}"
        return f"{self.listener_name}://{address}"


@dataclass(frozen=True)
class BrokerRegistration:
    """The content of ``/brokers/ids/N``. ``features`` maps a feature name to its (min, max) versions."""

    broker_id: int
    endpoints: tuple[Endpoint, ...]
    timestamp_ms: int
    rack: str | None = None
    jmx_port: int = -1
    features: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    version: int = BROKER_REGISTRATION_VERSION


@dataclass(frozen=True)
class ControllerRegistration:
    """The content of ``/controller``: which broker is the controller since when."""

    broker_id: int
    timestamp_ms: int


@dataclass(frozen=True)
class ReplicaAssignment:
    """One partition's replicas in preference order, and a reassignment's pending additions/removals."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class TopicAssignment:
    """The content of ``/brokers/topics/T``: its topic id and each partition's replica assignment."""

    topic: str
    topic_id: uuid.UUID | None
    partitions: Mapping[int, ReplicaAssignment]

    def replicas(self, partition: int) -> tuple[int, ...]:
        return self.partitions[partition].replicas


@dataclass(frozen=True)
class ProducerIdBlock:
    """Producer ids ``first_producer_id .. last_producer_id`` reserved for one broker (Kafka's ``ProducerIdsBlock``)."""

    broker_id: int
    first_producer_id: int
    size: int = PRODUCER_ID_BLOCK_SIZE

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size


# ---- JSON helpers -----------------------------------------------------------------------------------


def _dump(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _load(data: bytes | None, what: str) -> dict[str, Any]:
    if not data:
        raise ZkDataError(f"{what}: the znode is empty")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ZkDataError(f"{what}: not JSON: {data[:200]!r}") from exc
    if not isinstance(value, dict):
        raise ZkDataError(f"{what}: not a JSON object: {data[:200]!r}")
    return value


def _int(obj: Mapping[str, Any], key: str, what: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ZkDataError(f"{what}: {key!r} is not an integer: {value!r}")
    return value


def _int_text(obj: Mapping[str, Any], key: str, what: str) -> int:
    """An integer Kafka writes as a JSON string (timestamps, producer-id bounds); a bare number is accepted."""
    value = obj.get(key)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    elif isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ZkDataError(f"{what}: {key!r} is not an integer string: {value!r}")


def _int_list(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ZkDataError(f"{what}: not a list of integers: {value!r}")
    return tuple(value)


def _object(obj: Mapping[str, Any], key: str, what: str) -> dict[str, Any]:
    value = obj.get(key, {})
    if not isinstance(value, dict):
        raise ZkDataError(f"{what}: {key!r} is not an object: {value!r}")
    return value


# ---- topic ids --------------------------------------------------------------------------------------


def kafka_uuid_string(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def kafka_uuid_from_string(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString``; raises :class:`ZkDataError` for anything that is not 16 bytes."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ZkDataError(f"not a Kafka Uuid: {text!r}") from exc
    if len(raw) != 16:
        raise ZkDataError(f"not a Kafka Uuid (16 bytes): {text!r}")
    return uuid.UUID(bytes=raw)


# ---- /brokers/ids/N ---------------------------------------------------------------------------------

_ENDPOINT = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


def encode_broker_registration(registration: BrokerRegistration) -> bytes:
    plaintext = next((e for e in registration.endpoints if e.security_protocol == "PLAINTEXT"), None)
    body: dict[str, Any] = {
        "features": {
            name: {"min_version": low, "max_version": high}
            for name, (low, high) in sorted(registration.features.items())
        },
        "listener_security_protocol_map": {
            e.listener_name: e.security_protocol for e in registration.endpoints
        },
        "endpoints": [e.connection_string for e in registration.endpoints],
        "jmx_port": registration.jmx_port,
        "port": plaintext.port if plaintext is not None else -1,
        "host": plaintext.host if plaintext is not None else None,
        "version": registration.version,
        "timestamp": str(registration.timestamp_ms),
    }
    if registration.rack is not None:
        body["rack"] = registration.rack
    return _dump(body)


def _parse_endpoint(text: Any, protocols: Mapping[str, str] | None, what: str) -> Endpoint:
    match = _ENDPOINT.match(text) if isinstance(text, str) else None
    if match is None:
        raise ZkDataError(f"{what}: unparsable endpoint {text!r}")
    listener, host, port = match.group(1).upper(), match.group(2), int(match.group(3))
    if protocols is None:
        protocol = listener  # before v4, listener names are security protocols
    elif listener in protocols:
        protocol = protocols[listener]
    else:
        raise ZkDataError(f"{what}: no security protocol for listener {listener!r}")
    return Endpoint(listener, host or None, port, protocol)


def decode_broker_registration(broker_id: int, data: bytes) -> BrokerRegistration:
    what = f"broker {broker_id} registration"
    obj = _load(data, what)
    version = _int(obj, "version", what)
    if version < 1:
        raise ZkDataError(f"{what}: unsupported version {version}")
    if version == 1:
        host = obj.get("host")
        endpoints: tuple[Endpoint, ...] = (
            Endpoint(
                "PLAINTEXT", host if isinstance(host, str) else None, _int(obj, "port", what), "PLAINTEXT"
            ),
        )
    else:
        raw_map = obj.get("listener_security_protocol_map")
        protocols = None
        if raw_map is not None:
            if not isinstance(raw_map, dict) or not all(isinstance(v, str) for v in raw_map.values()):
                raise ZkDataError(f"{what}: bad listener_security_protocol_map {raw_map!r}")
            protocols = {str(k).upper(): v for k, v in raw_map.items()}
        raw_endpoints = obj.get("endpoints")
        if not isinstance(raw_endpoints, list):
            raise ZkDataError(f"{what}: 'endpoints' is not a list: {raw_endpoints!r}")
        endpoints = tuple(_parse_endpoint(e, protocols, what) for e in raw_endpoints)
    rack = obj.get("rack")
    features: dict[str, tuple[int, int]] = {}
    for name, versions in _object(obj, "features", what).items():
        if not isinstance(versions, dict):
            raise ZkDataError(f"{what}: feature {name!r} is not an object")
        features[name] = (_int(versions, "min_version", what), _int(versions, "max_version", what))
    return BrokerRegistration(
        broker_id=broker_id,
        endpoints=endpoints,
        timestamp_ms=_int_text(obj, "timestamp", what) if "timestamp" in obj else -1,
        rack=rack if isinstance(rack, str) else None,
        jmx_port=_int(obj, "jmx_port", what) if "jmx_port" in obj else -1,
        features=features,
        version=version,
    )


# ---- /controller, /controller_epoch -----------------------------------------------------------------


def encode_controller(registration: ControllerRegistration) -> bytes:
    return _dump(
        {"version": 1, "brokerid": registration.broker_id, "timestamp": str(registration.timestamp_ms)}
    )


def decode_controller(data: bytes) -> ControllerRegistration:
    obj = _load(data, "/controller")
    timestamp = _int_text(obj, "timestamp", "/controller") if "timestamp" in obj else -1
    return ControllerRegistration(broker_id=_int(obj, "brokerid", "/controller"), timestamp_ms=timestamp)


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode("ascii")


def decode_controller_epoch(data: bytes) -> int:
    try:
        return int(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ZkDataError(f"/controller_epoch: not an integer: {data[:50]!r}") from exc


# ---- /brokers/topics/T ------------------------------------------------------------------------------


def encode_topic_assignment(assignment: TopicAssignment) -> bytes:
    ordered = sorted(assignment.partitions.items())
    body: dict[str, Any] = {
        "version": 3,
        "partitions": {str(p): list(a.replicas) for p, a in ordered},
        "adding_replicas": {str(p): list(a.adding_replicas) for p, a in ordered if a.adding_replicas},
        "removing_replicas": {str(p): list(a.removing_replicas) for p, a in ordered if a.removing_replicas},
    }
    if assignment.topic_id is not None:
        body["topic_id"] = kafka_uuid_string(assignment.topic_id)
    return _dump(body)


def decode_topic_assignment(topic: str, data: bytes) -> TopicAssignment:
    what = f"topic {topic} assignment"
    obj = _load(data, what)
    raw_id = obj.get("topic_id")
    if raw_id is not None and not isinstance(raw_id, str):
        raise ZkDataError(f"{what}: 'topic_id' is not a string: {raw_id!r}")
    topic_id = kafka_uuid_from_string(raw_id) if raw_id is not None else None
    if not isinstance(obj.get("partitions"), dict):
        raise ZkDataError(f"{what}: 'partitions' is not an object: {obj.get('partitions')!r}")
    adding = _object(obj, "adding_replicas", what)
    removing = _object(obj, "removing_replicas", what)
    partitions: dict[int, ReplicaAssignment] = {}
    for key, replicas in _object(obj, "partitions", what).items():
        try:
            partition = int(key)
        except ValueError as exc:
            raise ZkDataError(f"{what}: partition {key!r} is not a number") from exc
        partitions[partition] = ReplicaAssignment(
            _int_list(replicas, what),
            _int_list(adding.get(key, []), what),
            _int_list(removing.get(key, []), what),
        )
    return TopicAssignment(topic, topic_id, dict(sorted(partitions.items())))


# ---- /brokers/topics/T/partitions/P/state -----------------------------------------------------------


def encode_leader_and_isr(state: LeaderAndIsr) -> bytes:
    body: dict[str, Any] = {
        "version": 1,
        "leader": state.leader,
        "leader_epoch": state.leader_epoch,
        "controller_epoch": state.controller_epoch,
        "isr": list(state.isr),
    }
    if state.leader_recovery_state != RECOVERED:
        body["leader_recovery_state"] = state.leader_recovery_state
    return _dump(body)


def decode_leader_and_isr(data: bytes, partition_epoch: int) -> LeaderAndIsr:
    """The state znode's content; ``partition_epoch`` is its ZooKeeper version (from the read's stat)."""
    what = "partition state"
    obj = _load(data, what)
    recovery = _int(obj, "leader_recovery_state", what) if "leader_recovery_state" in obj else RECOVERED
    return LeaderAndIsr(
        leader=_int(obj, "leader", what),
        leader_epoch=_int(obj, "leader_epoch", what),
        isr=_int_list(obj.get("isr"), what),
        controller_epoch=_int(obj, "controller_epoch", what),
        partition_epoch=partition_epoch,
        leader_recovery_state=recovery,
    )


# ---- /latest_producer_id_block ----------------------------------------------------------------------


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    return _dump(
        {
            "version": 1,
            "broker": block.broker_id,
            "block_start": str(block.first_producer_id),
            "block_end": str(block.last_producer_id),
        }
    )


def decode_producer_id_block(data: bytes) -> ProducerIdBlock:
    what = "/latest_producer_id_block"
    obj = _load(data, what)
    start = _int_text(obj, "block_start", what)
    end = _int_text(obj, "block_end", what)
    if end < start:
        raise ZkDataError(f"{what}: block_end {end} is below block_start {start}")
    return ProducerIdBlock(_int(obj, "broker", what), start, end - start + 1)


# ---- /config/<type>/<name> and /config/changes ------------------------------------------------------


def encode_entity_config(config: Mapping[str, str]) -> bytes:
    return _dump({"version": 1, "config": dict(sorted(config.items()))})


def decode_entity_config(data: bytes | None) -> dict[str, str]:
    """The overrides of one entity; an empty znode (as Kafka creates a parent) has none."""
    if not data:
        return {}
    what = "entity config"
    config = _object(_load(data, what), "config", what)
    if not all(isinstance(v, str) for v in config.values()):
        raise ZkDataError(f"{what}: a value is not a string: {config!r}")
    return dict(config)


def encode_config_change_notification(entity_path: str) -> bytes:
    """``entity_path`` is ``<type>/<name>``: ``topics/T``, ``brokers/1``, ``brokers/<default>``."""
    return _dump({"version": 2, "entity_path": entity_path})


def decode_config_change_notification(data: bytes) -> str:
    what = "config change notification"
    obj = _load(data, what)
    version = _int(obj, "version", what)
    if version == 2:
        entity_path = obj.get("entity_path")
        if not isinstance(entity_path, str) or "/" not in entity_path:
            raise ZkDataError(f"{what}: bad entity_path {entity_path!r}")
        return entity_path
    if version == 1:  # {"version":1,"entity_type":"topics","entity_name":"T"}
        entity_type, entity_name = obj.get("entity_type"), obj.get("entity_name")
        if isinstance(entity_type, str) and isinstance(entity_name, str):
            return f"{entity_type}/{entity_name}"
    raise ZkDataError(f"{what}: unsupported {data[:200]!r}")


# ---- /isr_change_notification -----------------------------------------------------------------------


def encode_isr_change_notification(partitions: Iterable[TopicPartition]) -> bytes:
    ordered = sorted(set(partitions))
    return _dump(
        {"version": 1, "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in ordered]}
    )


def decode_isr_change_notification(data: bytes) -> frozenset[TopicPartition]:
    what = "ISR change notification"
    raw = _load(data, what).get("partitions")
    if not isinstance(raw, list):
        raise ZkDataError(f"{what}: 'partitions' is not a list")
    result = set()
    for entry in raw:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise ZkDataError(f"{what}: bad partition {entry!r}")
        result.add(TopicPartition(entry["topic"], _int(entry, "partition", what)))
    return frozenset(result)


# ---- /cluster/id ------------------------------------------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    cluster_id = _load(data, "/cluster/id").get("id")
    if not isinstance(cluster_id, str):
        raise ZkDataError(f"/cluster/id: 'id' is not a string: {cluster_id!r}")
    return cluster_id


# ---- /log_dir_event_notification ----------------------------------------------------------------------

LOG_DIR_FAILURE_EVENT = 1


def encode_log_dir_event(broker_id: int, partitions: Iterable[TopicPartition]) -> bytes:
    ordered = sorted(set(partitions))
    return _dump(
        {
            "version": 1,
            "broker": broker_id,
            "event": LOG_DIR_FAILURE_EVENT,
            "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in ordered],
        }
    )


def decode_log_dir_event(data: bytes) -> tuple[int, frozenset[TopicPartition]]:
    """(broker id, the partitions in its failed dir; empty when the writer named none, as Kafka's does)."""
    what = "log dir event notification"
    broker_id = _int(_load(data, what), "broker", what)
    partitions = decode_isr_change_notification(data) if b'"partitions"' in data else frozenset()
    return broker_id, partitions
