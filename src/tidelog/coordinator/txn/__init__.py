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
from tidelog.coordinator.txn.coordinator import (
    GROUP_METADATA_TOPIC_NAME,
    TRANSACTION_COORDINATOR_REQUESTS,
    TRANSACTION_STATE_TOPIC_NAME,
    TransactionCoordinator,
)
from tidelog.coordinator.txn.metadata import TransactionMetadata
from tidelog.coordinator.txn.partition import ProducerIdAllocator, TxnPartition
from tidelog.coordinator.txn.records import TxnRecordError
from tidelog.coordinator.txn.result import (
    CancelTxnTimer,
    ScheduleTxnTimer,
    TxnCoordinatorResult,
    TxnTimerKey,
    TxnTimerKind,
    WriteTxnMarkers,
)
from tidelog.coordinator.txn.state import TransactionState

__all__ = [
    "GROUP_METADATA_TOPIC_NAME",
    "TRANSACTION_COORDINATOR_REQUESTS",
    "TRANSACTION_STATE_TOPIC_NAME",
    "CancelTxnTimer",
    "ProducerIdAllocator",
    "ScheduleTxnTimer",
    "TransactionCoordinator",
    "TransactionCoordinatorConfig",
    "TransactionMetadata",
    "TransactionState",
    "TxnCoordinatorResult",
    "TxnPartition",
    "TxnRecordError",
    "TxnTimerKey",
    "TxnTimerKind",
    "WriteTxnMarkers",
]
