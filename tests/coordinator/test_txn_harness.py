"""A stand-in for the server runtime around a TransactionCoordinator, and tests of that stand-in.

:class:`TxnHarness` applies every CoordinatorResult the way the runtime must: records appended to a
per-partition log in order, the response encoded at its request's version, markers written to a
data-partition marker log only after the records (and reported back), timers kept in a table by key
and fired in deadline order as a manual clock advances. ``reload`` unloads every partition and loads it
again from the log, as the runtime does after a restart or a failed append.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tidelog.coordinator.common.records import CoordinatorRecord
from tidelog.coordinator.common.result import CancelTimer, CoordinatorResult, ScheduleTimer, WriteTxnMarkers
from tidelog.coordinator.txn.config import TransactionCoordinatorConfig
from tidelog.coordinator.txn.coordinator import TransactionCoordinator
from tidelog.coordinator.txn.metadata import TransactionMetadata
from tidelog.coordinator.txn.partition import TxnPartition
from tidelog.coordinator.txn.records import decode_key, decode_value, partitions_of
from tidelog.coordinator.txn.state import TransactionState
from tidelog.coordinator.txn.timers import TxnTimerKey
from tidelog.protocol import TopicPartition, codec
from tidelog.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ListTransactionsRequest,
)
from tidelog.protocol.records import ControlRecordType
from tidelog.protocol.schema import Request

COMMIT = ControlRecordType.COMMIT
START_MS = 1_700_000_000_000
TIMEOUT_MS = 60_000


@dataclass(frozen=True)
class WrittenMarker:
    """A control batch the harness "wrote" on a data partition."""

    partition: TopicPartition
    result: ControlRecordType
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


@dataclass
class TxnHarness:
    config: TransactionCoordinatorConfig = field(
        default_factory=lambda: TransactionCoordinatorConfig(
            transaction_state_log_num_partitions=3, offsets_topic_num_partitions=5
        )
    )
    now: int = START_MS
    auto_markers: bool = True
    """Write markers as soon as a result asks for them (a fast runtime); else they wait in ``in_flight``."""
    first_producer_id: int = 1000

    def __post_init__(self) -> None:
        self.producer_ids = itertools.count(self.first_producer_id)
        self.allocate: Callable[[], int] = lambda: next(self.producer_ids)
        """The producer id allocator the coordinator calls (tests may swap in a failing one)."""
        self.missing_topics: set[str] = {"missing"}
        self.coordinator = self._new_coordinator()
        self.log: dict[int, list[CoordinatorRecord]] = {}
        self.timers: dict[TxnTimerKey, int] = {}
        self.in_flight: list[WriteTxnMarkers] = []
        self.written: list[WrittenMarker] = []
        self.events: list[tuple[str, str | None, object]] = []
        """Everything the "runtime" did, in order: ("record", id, value or None), ("marker", id, WrittenMarker)."""
        self.coordinator_epoch = 0
        for partition in range(self.config.transaction_state_log_num_partitions):
            self.coordinator.begin_loading(partition, self.coordinator_epoch)
            self.apply(self.coordinator.complete_loading(partition, self.now))

    def _new_coordinator(self) -> TransactionCoordinator:
        return TransactionCoordinator(
            self.config,
            allocate_producer_id=self._allocate,
            partition_exists=lambda topic, _partition: topic not in self.missing_topics,
        )

    def _allocate(self) -> int:
        return self.allocate()  # looked up per call, so a test can swap ``allocate``

    # -- the runtime's duties --------------------------------------------------------------------

    def apply(
        self, result: CoordinatorResult[TxnTimerKey], version: int | None = None
    ) -> CoordinatorResult[TxnTimerKey]:
        for partition in sorted(result.records):
            self.log.setdefault(partition, []).extend(result.records[partition])
            for record in result.records[partition]:
                transactional_id = decode_key(record.key)
                self.events.append(("record", transactional_id, decode_value(record.value)))
        if result.response is not None:
            assert version is not None
            codec.encode(result.response, version)  # every answer must go on the wire as is
        for op in result.timers:
            if isinstance(op, ScheduleTimer):
                self.timers[op.key] = op.deadline_ms
            else:
                assert isinstance(op, CancelTimer)
                self.timers.pop(op.key, None)
        self.in_flight.extend(result.markers)
        if self.auto_markers:
            self.write_markers()
        return result

    def write_markers(self, count: int | None = None) -> None:
        """Write the markers waiting in ``in_flight`` (the first ``count`` instructions) and report them."""
        todo = self.in_flight if count is None else self.in_flight[:count]
        self.in_flight = [] if count is None else self.in_flight[count:]
        for markers in todo:
            self._write(markers, markers.partitions)
            self.apply(self.coordinator.on_markers_written(markers, self.now))

    def write_some_markers(self, n: int) -> None:
        """Write the first ``n`` partitions' markers of the first instruction in flight and report just
        those; the rest stays in flight."""
        markers = self.in_flight.pop(0)
        done, rest = markers.partitions[:n], markers.partitions[n:]
        if rest:
            self.in_flight.insert(0, replace(markers, partitions=rest))
        self._write(markers, done)
        self.apply(self.coordinator.on_markers_written(markers, self.now, done))

    def _write(self, markers: WriteTxnMarkers, partitions: tuple[TopicPartition, ...]) -> None:
        # The runtime's ordering duty: a marker only after the Prepare record that decided it is in the log.
        records = self.records_of(markers.transactional_id)
        assert records, markers
        latest = decode_value(records[-1].value)
        assert latest is not None
        prepared = (
            TransactionState.PREPARE_COMMIT if markers.result is COMMIT else TransactionState.PREPARE_ABORT
        )
        assert (latest.transaction_status, latest.producer_id, latest.producer_epoch) == (
            prepared,
            markers.producer_id,
            markers.producer_epoch,
        ), (latest, markers)
        assert set(partitions) <= partitions_of(latest)
        for tp in partitions:
            marker = WrittenMarker(
                tp, markers.result, markers.producer_id, markers.producer_epoch, markers.coordinator_epoch
            )
            self.written.append(marker)
            self.events.append(("marker", markers.transactional_id, marker))

    def send(self, request: Request, version: int) -> Any:
        return self.apply(self.coordinator.handle(request, version, now_ms=self.now), version).response

    def advance(self, ms: int) -> None:
        """Let ``ms`` pass, firing every timer that falls due, each at its own deadline."""
        target = self.now + ms
        while True:
            due = [
                (deadline, i, key)
                for i, (key, deadline) in enumerate(self.timers.items())
                if deadline <= target
            ]
            if not due:
                break
            deadline, _, key = min(due, key=lambda d: (d[0], d[1]))
            del self.timers[key]
            self.now = max(self.now, deadline)
            self.apply(self.coordinator.on_timeout(key, self.now))
        self.now = target

    def reload(self) -> None:
        """Unload every partition and load it again from the log at the next coordinator epoch
        (a broker restart: markers in flight are lost, timers are rebuilt)."""
        for partition in self.coordinator.owned_partitions:
            self.apply(self.coordinator.unload(partition))
        assert not self.timers
        self.in_flight.clear()
        self.coordinator = self._new_coordinator()
        self.coordinator_epoch += 1
        for partition in range(self.config.transaction_state_log_num_partitions):
            self.coordinator.begin_loading(partition, self.coordinator_epoch)
            for record in self.log.get(partition, []):
                self.coordinator.replay(partition, record.key, record.value)
            self.apply(self.coordinator.complete_loading(partition, self.now))

    # -- state peeking ---------------------------------------------------------------------------

    def txn(self, transactional_id: str) -> TransactionMetadata:
        txn = self.coordinator.transaction(transactional_id)
        assert txn is not None
        return txn

    def owner(self, transactional_id: str) -> TxnPartition:
        owned = self.coordinator.txn_partition(self.coordinator.partition_for(transactional_id))
        assert owned is not None
        return owned

    def records_of(self, transactional_id: str) -> list[CoordinatorRecord]:
        partition = self.coordinator.partition_for(transactional_id)
        return [r for r in self.log.get(partition, []) if decode_key(r.key) == transactional_id]

    # -- client requests -------------------------------------------------------------------------

    def init(
        self,
        transactional_id: str | None,
        *,
        timeout_ms: int = TIMEOUT_MS,
        version: int = 4,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> Any:
        return self.send(
            InitProducerIdRequest(
                transactional_id=transactional_id,
                transaction_timeout_ms=timeout_ms,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
            ),
            version,
        )

    def add(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[tuple[str, int]],
        *,
        version: int = 3,
    ) -> dict[tuple[str, int], int]:
        topics: dict[str, list[int]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(partition)
        response = self.send(
            AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=transactional_id,
                v3_and_below_producer_id=producer_id,
                v3_and_below_producer_epoch=producer_epoch,
                v3_and_below_topics=[
                    AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=p)
                    for t, p in topics.items()
                ],
            ),
            version,
        )
        return {
            (t.name, p.partition_index): p.partition_error_code
            for t in response.results_by_topic_v3_and_below
            for p in t.results_by_partition
        }

    def add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str, *, version: int = 3
    ) -> int:
        response = self.send(
            AddOffsetsToTxnRequest(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                group_id=group_id,
            ),
            version,
        )
        return int(response.error_code)

    def end(
        self, transactional_id: str, producer_id: int, producer_epoch: int, *, commit: bool, version: int = 3
    ) -> int:
        response = self.send(
            EndTxnRequest(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                committed=commit,
            ),
            version,
        )
        return int(response.error_code)

    def describe(self, *transactional_ids: str) -> Any:
        return self.send(DescribeTransactionsRequest(transactional_ids=list(transactional_ids)), 0)

    def list(
        self, states: list[str] | None = None, producer_ids: list[int] | None = None, duration: int = -1
    ) -> Any:
        return self.send(
            ListTransactionsRequest(
                state_filters=states or [], producer_id_filters=producer_ids or [], duration_filter=duration
            ),
            1,
        )

    def begin_txn(self, transactional_id: str, *partitions: tuple[str, int]) -> tuple[int, int]:
        """InitProducerId then AddPartitionsToTxn: (producer id, epoch) of an Ongoing transaction."""
        init = self.init(transactional_id)
        assert init.error_code == 0, init
        errors = self.add(transactional_id, init.producer_id, init.producer_epoch, list(partitions))
        assert set(errors.values()) == {0}, errors
        return init.producer_id, init.producer_epoch


# -- tests of the harness itself ---------------------------------------------------------------------


def test_harness_loads_every_partition_and_arms_expiry() -> None:
    h = TxnHarness()
    assert h.coordinator.owned_partitions == [0, 1, 2]
    assert len(h.timers) == 3
    assert all(deadline == START_MS + 3_600_000 for deadline in h.timers.values())


def test_harness_timer_table_mirrors_the_coordinator() -> None:
    h = TxnHarness()
    h.begin_txn("a", ("t", 0))
    h.begin_txn("b", ("t", 1))
    for partition in h.coordinator.owned_partitions:
        owned = h.coordinator.txn_partition(partition)
        assert owned is not None
        assert {k: v for k, v in h.timers.items() if k.partition == partition} == owned.timers


def test_harness_reload_rebuilds_from_the_log() -> None:
    h = TxnHarness()
    pid, epoch = h.begin_txn("a", ("t", 0))
    before = h.txn("a").durable()
    h.reload()
    assert h.txn("a") == before
    assert (h.txn("a").producer_id, h.txn("a").producer_epoch) == (pid, epoch)
