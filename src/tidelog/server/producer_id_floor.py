"""The producer ids a broker can see in use: what raises the producer id floor (see producer_id_manager.py).

Two sources, each reduced to its highest id and where it was seen (for the warning that names it):

* every partition log's producer state, as recovered at start-up (snapshot plus replay of the log):
  the producers that wrote to it and have not expired;
* every transactional id the transaction coordinator holds: its current producer id and the previous one
  (a rotation's old id, known after a load only from a ``TransactionLogValue`` v1 record).

Pure: reads the state handed in, nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from tidelog.coordinator.txn.metadata import NO_PRODUCER_ID, TransactionMetadata
from tidelog.storage import PartitionLog, TopicPartition

__all__ = ["NONE_IN_USE", "ProducerIdInUse", "highest_in_logs", "highest_in_transactions"]


class ProducerIdInUse(NamedTuple):
    producer_id: int
    """-1 when nothing is in use."""
    where: str


NONE_IN_USE = ProducerIdInUse(NO_PRODUCER_ID, "nowhere")


def highest_in_logs(logs: Iterable[tuple[TopicPartition, PartitionLog]]) -> ProducerIdInUse:
    """The highest producer id in the producer state of ``logs`` (topic partition, log pairs)."""
    best = NONE_IN_USE
    for tp, log in logs:
        producers = log.producer_state.producers
        if producers:
            highest = max(producers)
            if highest > best.producer_id:
                best = ProducerIdInUse(highest, f"producer state of partition {tp.topic}-{tp.partition}")
    return best


def highest_in_transactions(transactions: Iterable[TransactionMetadata]) -> ProducerIdInUse:
    """The highest producer id (current or previous) of ``transactions``."""
    best = NONE_IN_USE
    for txn in transactions:
        highest = max(txn.producer_id, txn.last_producer_id)
        if highest > best.producer_id:
            best = ProducerIdInUse(highest, f"transactional id {txn.transactional_id!r}")
    return best
