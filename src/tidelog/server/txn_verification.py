"""Server-side verification of transactional produce (KIP-890 part 1): a transactional batch is appended
only to a partition its transaction has added (AddPartitionsToTxn), so a late retry from an ended
transaction can never slip into the next one (the hanging/aborted-read anomalies Jepsen found in Kafka).

The transaction coordinator decides, through a :data:`TransactionVerifier` the server registers with
``ReplicaManager.set_transaction_verifier``: ``verifier(transactional_id, producer_id, producer_epoch,
topic, partition) -> ErrorCode`` answers ``NONE`` when the partition is part of that producer's ongoing
transaction, else the coordinator's error (as its verify-only AddPartitionsToTxn would):
``INVALID_TXN_STATE`` for a partition not in the transaction, ``INVALID_PRODUCER_EPOCH`` /
``PRODUCER_FENCED`` / ``INVALID_PRODUCER_ID_MAPPING`` for a producer it does not know as current, or
``CONCURRENT_TRANSACTIONS`` / ``COORDINATOR_LOAD_IN_PROGRESS`` / ``NOT_COORDINATOR`` /
``COORDINATOR_NOT_AVAILABLE`` while it cannot tell yet.

Invariants:

* Until a coordinator registers a verifier, :func:`reject_unverified` rejects every transactional batch:
  nothing can write transactional data that no coordinator will ever end (which would hold the last
  stable offset forever).
* Verification and append happen in one synchronous step of the event loop, so no marker can land in
  between (Kafka needs its VerificationGuard for that; a single-threaded broker does not). That is why, in
  a cluster, a partition leader verifies only against a coordinator on its own broker: the transaction
  runtime's verifier answers NONE for a transactional id coordinated elsewhere (Kafka 3.5's behaviour;
  see :mod:`tidelog.server.txn_runtime`).
* The answer to the producer is Kafka 3.9's (``ReplicaManager.appendRecords`` / ``KafkaApis``):
  a partition not in the transaction is ``TRANSACTION_ABORTABLE`` for Produce v11+ and
  ``INVALID_TXN_STATE`` "Partition was not added to the transaction" before; the coordinator's retriable
  errors become ``NOT_ENOUGH_REPLICAS`` (which older clients retry without a metadata refresh),
  ``PRODUCER_FENCED`` becomes ``INVALID_PRODUCER_EPOCH``; a
  transactional batch in a request without a transactional id is ``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import CorruptRecordError, iter_batch_headers

__all__ = ["TransactionVerifier", "reject_unverified", "transactional_producer", "verification_error"]

TransactionVerifier = Callable[[str | None, int, int, str, int], ErrorCode]
"""``(transactional_id, producer_id, producer_epoch, topic, partition) -> ErrorCode.NONE or the error``."""

NOT_ADDED_MESSAGE: Final = "Partition was not added to the transaction"
_FIRST_ABORTABLE_PRODUCE_VERSION: Final = 11
_RETRIABLE_BY_OLD_CLIENTS: Final = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    }
)


def reject_unverified(
    _transactional_id: str | None, _producer_id: int, _producer_epoch: int, _topic: str, _partition: int
) -> ErrorCode:
    """The verifier before a transaction coordinator exists: no partition is in any transaction."""
    return ErrorCode.INVALID_TXN_STATE


def transactional_producer(records: object) -> tuple[int, int] | None:
    """``(producer_id, producer_epoch)`` of the first transactional batch in a produce payload, None if
    there is none (or the bytes are no batches: the append reports that)."""
    if not isinstance(records, bytes | bytearray | memoryview):
        return None
    try:
        for _, header in iter_batch_headers(records):
            if header.is_transactional and header.has_producer_id:
                return header.producer_id, header.producer_epoch
    except CorruptRecordError:
        return None
    return None


def verification_error(verdict: ErrorCode, api_version: int) -> tuple[ErrorCode, str | None]:
    """What a Produce of ``api_version`` answers for a partition whose verification gave ``verdict``."""
    if verdict == ErrorCode.INVALID_TXN_STATE:
        if api_version >= _FIRST_ABORTABLE_PRODUCE_VERSION:
            return ErrorCode.TRANSACTION_ABORTABLE, None
        return ErrorCode.INVALID_TXN_STATE, NOT_ADDED_MESSAGE
    if verdict in _RETRIABLE_BY_OLD_CLIENTS:
        return (
            ErrorCode.NOT_ENOUGH_REPLICAS,
            f"Unable to verify the partition has been added to the transaction. Underlying error: {verdict.name}",
        )
    if verdict == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH, None  # as Kafka's AddPartitionsToTxnManager answers Produce
    return verdict, None
