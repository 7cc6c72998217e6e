"""Transaction coordinator: a pure state machine over ``__transaction_state`` (Kafka's
``TransactionCoordinator`` and ``TransactionStateManager``).

Requests and time go in; a response, records to append, transaction markers to write and timer
requests come out. A transactional id's durable state changes only by replaying its
``TransactionLogValue`` record: live, as a partition emits it, and when the runtime loads the partition.
The server runtime's entry point is :class:`TransactionCoordinator`; the produce path asks it to verify
transactional partitions (KIP-890).
"""

from __future__ import annotations

from tidelog.coordinator.txn.config import TransactionCoordinatorConfig
from tidelog.coordinator.txn.coordinator import TRANSACTION_COORDINATOR_REQUESTS, TransactionCoordinator
from tidelog.coordinator.txn.metadata import TransactionMetadata
from tidelog.coordinator.txn.partition import ProducerIdAllocator, TxnPartition
from tidelog.coordinator.txn.records import TxnRecordError
from tidelog.coordinator.txn.responses import txn_append_error_to_response_error, txn_error_response
from tidelog.coordinator.txn.state import TransactionState
from tidelog.coordinator.txn.timers import TxnTimerKey, TxnTimerKind

__all__ = [
    "TRANSACTION_COORDINATOR_REQUESTS",
    "ProducerIdAllocator",
    "TransactionCoordinator",
    "TransactionCoordinatorConfig",
    "TransactionMetadata",
    "TransactionState",
    "TxnPartition",
    "TxnRecordError",
    "TxnTimerKey",
    "TxnTimerKind",
    "txn_append_error_to_response_error",
    "txn_error_response",
]
