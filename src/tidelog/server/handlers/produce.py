"""Produce (key 0): validate each partition's batches whole, append, answer per partition.

Invariants: each partition succeeds or fails on its own (one bad partition never fails another);
acks must be 0, 1 or -1 (else INVALID_REQUIRED_ACKS for every partition); acks=0 gets no response at all;
acks=-1 checks ``min.insync.replicas`` before the append (NOT_ENOUGH_REPLICAS) and answers once the high
watermark passed every partition's batch (the replica manager's produce purgatory; on a single node at
once: the ISR is this broker), or ``timeout_ms`` ran out (REQUEST_TIMED_OUT).
A partition's payload must be exactly one record batch (Kafka's rule for Produce v3+, the only versions served),
else INVALID_RECORD: so the verified producer of a transactional payload is the only producer in it.
Authorization (Kafka's): a request with transactional batches needs WRITE on its transactional id, else every
partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED; each topic needs WRITE, else TOPIC_AUTHORIZATION_FAILED,
answered before existence is looked at.
A partition's transactional batches are appended only after the transaction coordinator verified that the
partition is in the producer's transaction (KIP-890, :mod:`tidelog.server.txn_verification`), in the
same synchronous step as the append; in a cluster only where this broker is the transactional id's
coordinator, elsewhere the batch is taken as Kafka 3.5 takes it (:mod:`tidelog.server.txn_runtime`).
"""

from __future__ import annotations

from tidelog.protocol.codec import constructor
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ProduceRequest, ProduceResponse
from tidelog.protocol.records import CorruptRecordError, iter_batch_headers
from tidelog.protocol.records_header import NO_PRODUCER_ID, TRANSACTIONAL_BIT, single_batch_producer
from tidelog.server.clock import Clock
from tidelog.server.dispatch import NO_RESPONSE, Answer, NoResponse, RequestContext
from tidelog.server.handlers.authz import Authz, topic_allowed, txn_allowed
from tidelog.server.handlers.leader_hint import LeaderHints
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.produce_purgatory import PendingAppend
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.security.acl import AclOperation as Op
from tidelog.server.txn_verification import transactional_producer, verification_error

__all__ = ["ProduceHandler", "batch_count_error"]

_PartitionResponse = ProduceResponse.PartitionProduceResponse
_LeaderIdAndEpoch = ProduceResponse.LeaderIdAndEpoch
_new = object.__new__
_BYTES_LIKE = (bytes, bytearray, memoryview)
"""The payload types a produce accepts, as a tuple: ``bytes | bytearray | memoryview`` in ``isinstance`` builds
a union at every call (about 0.1 µs, once per partition of every produce)."""
_topic_response = constructor(ProduceResponse.TopicProduceResponse, "name", "partition_responses")
_response = constructor(ProduceResponse, "responses")
"""``TopicProduceResponse(name=..., partition_responses=...)`` and ``ProduceResponse(responses=...)`` without
the keyword ``__init__`` (once per topic / request of every produce)."""


def _partition_response(index: int) -> ProduceResponse.PartitionProduceResponse:
    """``PartitionProduceResponse(index=index, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1)``
    built with one store per field instead of the dataclass's keyword ``__init__`` (and its default
    factories): about 0.2 µs instead of 0.6, once per partition of every produce (librdkafka sends one
    partition per request). Every field is stored, a fresh list and a fresh "no leader" per entry as the
    defaults give; tests compare it with the ``__init__``-built entry, so a field added to the schema fails
    them instead of being left unset."""
    leader = _new(_LeaderIdAndEpoch)
    leader.leader_id = -1
    leader.leader_epoch = -1
    leader.unknown_tagged_fields = None
    result = _new(_PartitionResponse)
    result.index = index
    result.error_code = 0
    result.base_offset = -1
    result.log_append_time_ms = -1
    result.log_start_offset = -1
    result.record_errors = []
    result.error_message = None
    result.current_leader = leader
    result.unknown_tagged_fields = None
    return result


def batch_count_error(records: object, api_version: int) -> str | None:
    """Why a partition's payload is not exactly one record batch (Kafka's ``ProduceRequest.validateRecords``
    for v3+), or None. Only whole batches count: damaged or cut-off bytes are left to the append's
    validation (CORRUPT_MESSAGE)."""
    return _read_payload(records, api_version)[0]


def _read_payload(records: object, api_version: int) -> tuple[str | None, tuple[int, int] | None]:
    """One look at a partition's payload: :func:`batch_count_error`, and (when that is None) what
    :func:`~tidelog.server.txn_verification.transactional_producer` says of it."""
    if not isinstance(records, _BYTES_LIKE) or len(records) == 0:
        return (
            f"Produce requests with version {api_version} must have at least one record batch per partition",
            None,
        )
    only = single_batch_producer(records)  # the common case, without the generator below
    if only is not None:
        attributes, producer_id, producer_epoch = only
        if attributes & TRANSACTIONAL_BIT and producer_id > NO_PRODUCER_ID:
            return None, (producer_id, producer_epoch)
        return None, None
    first = second = None
    try:
        batches = iter_batch_headers(records)
        first = next(batches, None)
        second = next(batches, None)
    except CorruptRecordError:
        second = None
    if second is not None:
        problem = (
            f"Produce requests with version {api_version} are only allowed to contain exactly one record "
            "batch per partition"
        )
        return problem, None
    if first is None or not (first[1].is_transactional and first[1].has_producer_id):
        return None, None
    return None, (first[1].producer_id, first[1].producer_epoch)


class ProduceHandler:
    """Produce: appends through the replica manager, topics from the metadata cache."""

    def __init__(
        self, replicas: ReplicaManager, metadata: MetadataCache, clock: Clock, authz: Authz = None
    ) -> None:
        self._replicas = replicas
        self._metadata = metadata
        self._clock = clock
        self._authz = authz

    def _transactional_id_denied(self, ctx: RequestContext, request: ProduceRequest) -> bool:
        """Kafka's rule: a request carrying transactional batches needs WRITE on its transactional id
        (none given counts as denied); refused whole with TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
        if not any(
            transactional_producer(data.records) is not None
            for topic_data in request.topic_data
            for data in topic_data.partition_data
        ):
            return False
        tid = request.transactional_id
        return tid is None or not txn_allowed(self._authz, ctx, Op.WRITE, tid)

    def handle(self, ctx: RequestContext, request: ProduceRequest) -> Answer | NoResponse:
        acks = request.acks
        now = self._clock.now_ms()
        responses = []
        waiting: list[PendingAppend] = []
        hints: LeaderHints | None = None  # made for the first error that may name a leader
        refused = self._authz is not None and self._transactional_id_denied(ctx, request)
        api_version = ctx.api_version
        with_hints = api_version >= 10
        transactional_id = request.transactional_id
        replicas = self._replicas
        append = replicas.append
        decided = replicas.produce_purgatory.decided
        for topic_data in request.topic_data:
            name = topic_data.name
            topic_error, topic_message = self._topic_error(ctx, name, acks, refused)
            results = []
            for data in topic_data.partition_data:
                index = data.index
                result = _partition_response(index)
                results.append(result)
                if topic_error:  # the same for every partition of the topic: acks, authorization, existence
                    result.error_code = topic_error
                    result.error_message = topic_message
                    continue
                records = data.records
                problem, producer = _read_payload(records, api_version)
                if problem is not None:
                    result.error_code = ErrorCode.INVALID_RECORD
                    result.error_message = problem
                    continue
                if producer is not None and replicas.get(name, index) is not None:
                    if transactional_id is None:
                        result.error_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                        continue
                    verdict = replicas.verify_transaction(
                        transactional_id, producer[0], producer[1], name, index
                    )
                    if verdict != ErrorCode.NONE:
                        result.error_code, result.error_message = verification_error(verdict, api_version)
                        continue
                error, info, message = append(name, index, records, now_ms=now, required_acks=acks)
                if error:
                    result.error_code = error
                    result.error_message = message
                    if with_hints:
                        if hints is None:
                            hints = LeaderHints(self._metadata, ctx.listener_name)
                        hint = hints.hint(name, index, error)
                        if hint is not None:
                            result.current_leader = ProduceResponse.LeaderIdAndEpoch(
                                leader_id=hint.leader_id, leader_epoch=hint.leader_epoch
                            )
                if info is not None:
                    result.base_offset = info.first_offset
                    result.log_append_time_ms = info.log_append_time
                    result.log_start_offset = info.log_start_offset
                    if acks == -1 and not decided(name, index, info.last_offset + 1, result):
                        waiting.append(PendingAppend(name, index, info.last_offset + 1, result))
            responses.append(_topic_response(name, results))
        if acks == 0:
            return NO_RESPONSE
        response = _response(responses)  # node_endpoints: a fresh empty list
        if hints is not None:
            response.node_endpoints = [
                ProduceResponse.NodeEndpoint(node_id=node, host=host, port=port, rack=rack)
                for node, (host, port, rack) in sorted(hints.endpoints.items())
            ]
        if waiting:
            return replicas.produce_purgatory.delay(request.timeout_ms, waiting, response)
        return response

    def _topic_error(
        self, ctx: RequestContext, name: str, acks: int, refused: bool
    ) -> tuple[int, str | None]:
        """The error every partition of topic ``name`` gets before its payload is looked at (NONE: none),
        in Kafka's order; asked once per topic, not once per partition."""
        topic = self._metadata.topic(name)
        authz = self._authz
        writable = authz is None or topic_allowed(authz, ctx, Op.WRITE, name)  # no call without an authorizer
        if acks not in (0, 1, -1):
            return ErrorCode.INVALID_REQUIRED_ACKS, None
        if refused:
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
        if not writable:  # before existence: an unauthorized client learns nothing of the topic
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        if topic.is_internal:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {name}"
        return ErrorCode.NONE, None
