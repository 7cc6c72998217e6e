"""A blocking two-phase-commit (KIP-939) transactional producer over :mod:`tidelog.client.wire`, for a
writer whose transaction is decided elsewhere (a Spark task prepares, the driver commits).

:class:`TwoPhaseProducer` initialises its transactional id with InitProducerId v6 ``Enable2Pc`` (not
keeping anything the id had open: that is aborted and its producer fenced), buffers ``send`` per partition
and writes idempotent transactional batches (acks=-1) to each partition's leader, one connection per
broker; :meth:`TwoPhaseProducer.prepare` flushes and stops, returning a :class:`PreparedTransaction` that
another process hands to :func:`complete_prepared` to commit or abort it.

Invariants:

- A partition is added to the transaction (AddPartitionsToTxn, the client versions <= 3) before its first
  batch is produced; each partition's batches carry consecutive sequences from 0 at the session's epoch.
- A batch that failed with a retriable error (or a lost connection) is resent unchanged, same sequence,
  until ``timeout``; NOT_LEADER_OR_FOLLOWER and its kin refresh the leaders first. DUPLICATE_SEQUENCE_NUMBER
  on a resend means the first send was written. Any other error poisons the producer: every later call
  raises it, so nothing is ever prepared over a hole.
- :func:`complete_prepared` ends a transaction only when the broker names it as the id's kept Ongoing
  transaction with exactly the prepared producer id and epoch; a different Ongoing transaction raises
  :class:`TransactionMismatchError`: before any request that changes state when DescribeTransactions
  shows another producer id or an epoch below the prepared one; else (the same producer id at a higher
  epoch: a kept transaction and a later session's look alike there) after the keeping InitProducerId,
  whose only effect was bumping the id's epoch, which fences that later session's producer.
- What can be known of a transaction no longer open: DescribeTransactions reports the id's *last*
  transaction (CompleteCommit / CompleteAbort, with its producer id); when that producer id is the
  prepared one, :class:`Completion` says ALREADY_COMMITTED / ALREADY_ABORTED, which is this transaction's
  outcome as long as no other session ran a transaction under the same id at the same producer id since
  (a sink using one id per task and batch guarantees it). Otherwise (the id expired, Describe is not
  allowed, another producer id) it is ALREADY_COMPLETED: ended, outcome unknown.
- A coordinator request is retried (finding the coordinator again) while it fails with a retriable error
  code or a ``retriable`` :class:`~tidelog.client.wire.WireError` (the broker unreachable, a lost
  connection), until ``timeout``; any other error is raised at once.
- Errors are :class:`TransactionError` (a :class:`~tidelog.client.wire.WireError`, ``retriable`` as its
  code is) naming the Kafka error code; :class:`TwoPhaseCommitUnavailableError` when the broker refuses Enable2Pc or cannot speak v6 (the
  setting ``transaction.two.phase.commit.enable`` is off, or the principal lacks TWO_PHASE_COMMIT), so a
  caller can fall back to one-phase transactions.
"""

from __future__ import annotations

import enum
import json
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import TypeVar

from tidelog.client.lookup import find_coordinator, partition_leaders
from tidelog.client.wire import WireClient, WireError, connect
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from tidelog.protocol.records import SimpleRecord, encode_batch

__all__ = [
    "Completion",
    "PreparedTransaction",
    "TransactionError",
    "TransactionMismatchError",
    "TwoPhaseCommitUnavailableError",
    "TwoPhaseProducer",
    "complete_prepared",
]

T = TypeVar("T")
TopicPartition = tuple[str, int]

NO_ID = -1
BATCH_BYTES = 1 << 19
"""A partition's buffer is produced once its records reach about this many bytes (else at flush /
prepare): half of Kafka's default ``message.max.bytes``, so a batch of small records always fits."""
_COORDINATOR_MOVED = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}
_LEADER_MOVED = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.FENCED_LEADER_EPOCH,
}


class TransactionError(WireError):
    """The broker answered a transactional request with ``error_code``."""

    def __init__(self, message: str, error_code: int = ErrorCode.UNKNOWN_SERVER_ERROR) -> None:
        self.error_code = ErrorCode.of(error_code)
        super().__init__(message, retriable=self.error_code.retriable)


class TwoPhaseCommitUnavailableError(TransactionError):
    """The broker does not let this producer take part in two-phase commit (setting off, ACL, version)."""


class TransactionMismatchError(TransactionError):
    """The transactional id's open transaction is not the prepared one: nothing was ended."""


class Completion(enum.Enum):
    """What :func:`complete_prepared` found and did."""

    COMMITTED = "committed"
    ABORTED = "aborted"
    ALREADY_COMMITTED = "already committed"
    ALREADY_ABORTED = "already aborted"
    ALREADY_COMPLETED = "already completed (outcome unknown)"


@dataclass(frozen=True)
class PreparedTransaction:
    """A flushed, still open transaction: what a participant reports to the transaction manager."""

    transactional_id: str
    producer_id: int
    producer_epoch: int

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PreparedTransaction:
        data = json.loads(text)
        return cls(str(data["transactional_id"]), int(data["producer_id"]), int(data["producer_epoch"]))


def _error(what: str, code: int, cls: type[TransactionError] = TransactionError) -> TransactionError:
    return cls(f"{what}: {ErrorCode.name_of(code)}", code)


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


@dataclass
class _Session:
    """Connections of one producer: the coordinator's, and one per partition leader."""

    bootstrap: str
    transactional_id: str
    timeout: float
    sasl: tuple[str, str, str] | None
    tls: ssl.SSLContext | None
    brokers: dict[str, WireClient] = field(default_factory=dict)
    coordinator: str = ""

    def client(self, address: str) -> WireClient:
        wire = self.brokers.get(address)
        if wire is None:
            host, port = _split(address)
            wire = WireClient(
                host, port, timeout=self.timeout, client_id="tidelog-2pc", sasl=self.sasl, tls=self.tls
            )
            self.brokers[address] = wire
        return wire

    def drop(self, address: str) -> None:
        wire = self.brokers.pop(address, None)
        if wire is not None:
            wire.close()

    def bootstrap_client(self) -> WireClient:
        return connect(self.bootstrap, timeout=self.timeout, sasl=self.sasl, tls=self.tls)

    def find_coordinator(self) -> WireClient:
        with self.bootstrap_client() as wire:
            _, self.coordinator = find_coordinator(wire, self.transactional_id)
        return self.client(self.coordinator)

    def coordinator_call(self, call: Callable[[WireClient], tuple[int, T]], what: str) -> T:
        """``call`` on the coordinator, retried (finding it again when it moved) until ``timeout``."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                wire = self.client(self.coordinator) if self.coordinator else self.find_coordinator()
                code, result = call(wire)
            except TransactionError:
                raise
            except WireError as exc:
                if not exc.retriable or time.monotonic() > deadline:
                    raise
                self.drop(self.coordinator)
                self.coordinator = ""
                time.sleep(0.1)
                continue
            if code == ErrorCode.NONE:
                return result
            if not ErrorCode.of(code).retriable or time.monotonic() > deadline:
                raise _error(f"{what} for {self.transactional_id!r}", code)
            if code in _COORDINATOR_MOVED:
                self.coordinator = ""
            time.sleep(0.05)

    def init_producer_id(self, *, keep_prepared: bool) -> InitProducerIdResponse:
        request = InitProducerIdRequest(
            transactional_id=self.transactional_id,
            transaction_timeout_ms=60_000,  # ignored under Enable2Pc: such a transaction has no timeout
            producer_id=NO_ID,
            producer_epoch=NO_ID,
            enable2_pc=True,
            keep_prepared_txn=keep_prepared,
        )

        def call(wire: WireClient) -> tuple[int, InitProducerIdResponse]:
            if wire.version_for(InitProducerIdRequest) < 6:
                raise TwoPhaseCommitUnavailableError(
                    f"broker at {wire.address} cannot do two-phase commit (no InitProducerId v6)",
                    ErrorCode.UNSUPPORTED_VERSION,
                )
            response = wire.call(request, 6, expect=InitProducerIdResponse)
            if response.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                raise _error(
                    f"broker at {wire.address} refused two-phase commit for {self.transactional_id!r} "
                    "(transaction.two.phase.commit.enable is off, or the principal lacks "
                    "TWO_PHASE_COMMIT on the transactional id)",
                    response.error_code,
                    TwoPhaseCommitUnavailableError,
                )
            return response.error_code, response

        return self.coordinator_call(call, "InitProducerId")

    def end_txn(self, producer_id: int, producer_epoch: int, *, commit: bool) -> None:
        request = EndTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            committed=commit,
        )

        def call(wire: WireClient) -> tuple[int, None]:
            version = wire.version_for(EndTxnRequest, 4)  # v5 is KIP-890's epoch-bumping end
            return wire.call(request, version, expect=EndTxnResponse).error_code, None

        self.coordinator_call(call, "EndTxn(commit)" if commit else "EndTxn(abort)")

    def describe(self) -> DescribeTransactionsResponse.TransactionState | None:
        """The id's transaction as its coordinator describes it (with TRANSACTIONAL_ID_NOT_FOUND when it
        has no such id: expired, or never used); None when it cannot (not allowed, an old broker)."""

        def call(wire: WireClient) -> tuple[int, DescribeTransactionsResponse.TransactionState | None]:
            try:
                version = wire.version_for(DescribeTransactionsRequest)
            except WireError:
                return ErrorCode.NONE, None
            request = DescribeTransactionsRequest(transactional_ids=[self.transactional_id])
            state = wire.call(request, version, expect=DescribeTransactionsResponse).transaction_states[0]
            if ErrorCode.of(state.error_code).retriable:
                return state.error_code, None
            known = (ErrorCode.NONE, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
            return ErrorCode.NONE, state if state.error_code in known else None

        return self.coordinator_call(call, "DescribeTransactions")

    def close(self) -> None:
        for address in list(self.brokers):
            self.drop(address)


class TwoPhaseProducer:
    """One prepared-or-aborted transaction under ``transactional_id``: ``send`` ... ``prepare()``."""

    def __init__(
        self,
        bootstrap: str,
        transactional_id: str,
        *,
        timeout: float = 30.0,
        sasl: tuple[str, str, str] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._session = _Session(bootstrap, transactional_id, timeout, sasl, tls)
        self._buffers: dict[TopicPartition, list[SimpleRecord]] = {}
        self._buffered_bytes: dict[TopicPartition, int] = {}
        self._sequences: dict[TopicPartition, int] = {}
        self._leaders: dict[TopicPartition, str] = {}
        self._failure: TransactionError | None = None
        self._done = False
        self.offsets: dict[TopicPartition, list[int]] = {}
        """The offset of every record written so far, per partition, in send order."""
        try:
            response = self._session.init_producer_id(keep_prepared=False)
        except BaseException:
            self._session.close()
            raise
        self.producer_id = response.producer_id
        self.producer_epoch = response.producer_epoch

    @property
    def transactional_id(self) -> str:
        return self._session.transactional_id

    def __enter__(self) -> TwoPhaseProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, topic: str, partition: int, records: Iterable[SimpleRecord | bytes]) -> None:
        """Buffer ``records`` (values, or :class:`SimpleRecord`) for ``topic``/``partition``, in order."""
        self._check_usable()
        tp = (topic, partition)
        now = int(time.time() * 1000)
        buffer = self._buffers.setdefault(tp, [])
        size = self._buffered_bytes.get(tp, 0)
        for record in records:
            if isinstance(record, bytes):
                record = SimpleRecord(value=record, timestamp=now)
            elif record.timestamp < 0:
                record = SimpleRecord(record.key, record.value, record.headers, now)
            buffer.append(record)
            size += len(record.value or b"") + len(record.key or b"") + 16
        self._buffered_bytes[tp] = size
        if size >= BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Write every buffered record (adding new partitions to the transaction first)."""
        self._check_usable()
        try:
            self._flush()
        except TransactionError as exc:
            self._failure = exc
            raise

    def prepare(self) -> PreparedTransaction:
        """Flush and stop: the transaction stays open, for :func:`complete_prepared` to end."""
        self.flush()
        self._done = True
        self._session.close()
        return PreparedTransaction(self.transactional_id, self.producer_id, self.producer_epoch)

    def abort(self) -> None:
        """Abort the transaction (dropping what is still buffered)."""
        if self._done:
            raise TransactionError(f"transaction of {self.transactional_id!r} is already prepared or ended")
        self._buffers.clear()
        self._done = True
        try:
            self._session.end_txn(self.producer_id, self.producer_epoch, commit=False)
        finally:
            self._session.close()

    def close(self) -> None:
        """Drop the connections; an unprepared open transaction stays open until the id is initialised
        again (a two-phase transaction never times out)."""
        self._done = True
        self._session.close()

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._done:
            raise TransactionError(f"transaction of {self.transactional_id!r} is already prepared or ended")

    def _flush(self) -> None:
        pending = {tp: records for tp, records in self._buffers.items() if records}
        if not pending:
            return
        self._add_partitions([tp for tp in pending if tp not in self._sequences])
        batches = {}
        for tp, records in pending.items():
            sequence = self._sequences[tp]
            batches[tp] = (
                encode_batch(
                    records,
                    producer_id=self.producer_id,
                    producer_epoch=self.producer_epoch,
                    base_sequence=sequence,
                    is_transactional=True,
                ),
                len(records),
            )
            self._sequences[tp] = sequence + len(records)
        self._buffers.clear()
        self._buffered_bytes.clear()
        self._produce(batches)

    def _add_partitions(self, new: list[TopicPartition]) -> None:
        if not new:
            return
        by_topic: dict[str, list[int]] = {}
        for topic, partition in new:
            by_topic.setdefault(topic, []).append(partition)
        request = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.transactional_id,
            v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.producer_epoch,
            v3_and_below_topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=p)
                for t, p in by_topic.items()
            ],
        )

        def call(wire: WireClient) -> tuple[int, None]:
            version = wire.version_for(AddPartitionsToTxnRequest, 3)  # v4+ is the brokers' batched form
            response = wire.call(request, version, expect=AddPartitionsToTxnResponse)
            codes = [
                p.partition_error_code
                for t in response.results_by_topic_v3_and_below
                for p in t.results_by_partition
                if p.partition_error_code != ErrorCode.OPERATION_NOT_ATTEMPTED
            ]
            worst = next((c for c in codes if not ErrorCode.of(c).retriable), None)
            return next((c for c in codes if c), ErrorCode.NONE) if worst is None else worst, None

        self._session.coordinator_call(call, f"AddPartitionsToTxn {sorted(new)}")
        for tp in new:
            self._sequences[tp] = 0
            self.offsets[tp] = []

    def _refresh_leaders(self, partitions: Iterable[TopicPartition]) -> None:
        with self._session.bootstrap_client() as wire:
            brokers, topics = partition_leaders(wire, sorted({t for t, _ in partitions}))
        for name, topic in topics.items():
            for p in topic.partitions:
                if p.error_code == ErrorCode.NONE and p.leader_id in brokers:
                    self._leaders[(name, p.partition_index)] = brokers[p.leader_id]

    def _produce(self, batches: dict[TopicPartition, tuple[bytes, int]]) -> None:
        deadline = time.monotonic() + self._session.timeout
        last_error = "no leader"
        while batches:
            if any(tp not in self._leaders for tp in batches):
                self._refresh_leaders(batches)
            by_leader: dict[str, dict[TopicPartition, tuple[bytes, int]]] = {}
            for tp, batch in batches.items():
                leader = self._leaders.get(tp)
                if leader is not None:
                    by_leader.setdefault(leader, {})[tp] = batch
            for leader, owned in by_leader.items():
                for tp, (code, base_offset, message) in self._produce_to(leader, owned).items():
                    if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
                        count = batches.pop(tp)[1]
                        if base_offset >= 0:
                            self.offsets[tp].extend(range(base_offset, base_offset + count))
                        continue
                    if not ErrorCode.of(code).retriable:
                        detail = f" ({message})" if message else ""
                        raise _error(
                            f"Produce to {tp[0]}-{tp[1]} for {self.transactional_id!r}{detail}", code
                        )
                    last_error = ErrorCode.name_of(code)
                    if code in _LEADER_MOVED or code == ErrorCode.NETWORK_EXCEPTION:
                        self._leaders.pop(tp, None)
            if batches:
                if time.monotonic() > deadline:
                    raise TransactionError(
                        f"Produce for {self.transactional_id!r} timed out on {sorted(batches)}: {last_error}",
                        ErrorCode.REQUEST_TIMED_OUT,
                    )
                time.sleep(0.05)

    def _produce_to(
        self, leader: str, batches: dict[TopicPartition, tuple[bytes, int]]
    ) -> dict[TopicPartition, tuple[int, int, str | None]]:
        """{partition: (error code, base offset, error message)}; a lost connection answers NETWORK_EXCEPTION
        (retriable) for each partition."""
        by_topic: dict[str, list[ProduceRequest.PartitionProduceData]] = {}
        for (topic, partition), (batch, _) in batches.items():
            by_topic.setdefault(topic, []).append(
                ProduceRequest.PartitionProduceData(index=partition, records=batch)
            )
        request = ProduceRequest(
            transactional_id=self.transactional_id,
            acks=-1,
            timeout_ms=int(self._session.timeout * 1000),
            topic_data=[
                ProduceRequest.TopicProduceData(name=t, partition_data=p) for t, p in by_topic.items()
            ],
        )
        try:
            wire = self._session.client(leader)
            response = wire.call(request, wire.version_for(ProduceRequest, 11), expect=ProduceResponse)
        except WireError:
            self._session.drop(leader)
            return dict.fromkeys(batches, (ErrorCode.NETWORK_EXCEPTION, -1, None))
        return {
            (t.name, p.index): (p.error_code, p.base_offset, p.error_message)
            for t in response.responses
            for p in t.partition_responses
            if (t.name, p.index) in batches
        }


def complete_prepared(
    bootstrap: str,
    prepared: PreparedTransaction,
    commit: bool,
    *,
    timeout: float = 30.0,
    sasl: tuple[str, str, str] | None = None,
    tls: ssl.SSLContext | None = None,
) -> Completion:
    """Commit (or abort) ``prepared`` from any process; safe to replay (see the module's invariants)."""
    session = _Session(bootstrap, prepared.transactional_id, timeout, sasl, tls)
    try:
        return _complete(session, prepared, commit)
    finally:
        session.close()


def _complete(session: _Session, prepared: PreparedTransaction, commit: bool) -> Completion:
    tid = prepared.transactional_id
    described = session.describe()
    if described is not None and described.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
        return Completion.ALREADY_COMPLETED  # the id expired after its last transaction ended
    deadline = time.monotonic() + session.timeout
    while (
        described is not None
        and described.producer_id == prepared.producer_id
        and described.transaction_state in ("PrepareCommit", "PrepareAbort")
        and time.monotonic() < deadline
    ):  # another completion is writing its markers: its outcome is about to be known
        time.sleep(0.05)
        described = session.describe()
    if described is not None and (
        described.producer_id != prepared.producer_id or described.producer_epoch < prepared.producer_epoch
    ):  # the id moved to another producer id, or never reached the prepared epoch: not this transaction
        if described.transaction_state == "Ongoing":
            raise TransactionMismatchError(
                f"{tid!r} has another transaction open (producer id {described.producer_id}, epoch "
                f"{described.producer_epoch}), not the prepared one (producer id {prepared.producer_id}, "
                f"epoch {prepared.producer_epoch}): nothing was ended",
                ErrorCode.INVALID_TXN_STATE,
            )
        return Completion.ALREADY_COMPLETED
    if described is not None and described.transaction_state in ("CompleteCommit", "CompleteAbort"):
        return _already(described.transaction_state)
    kept = session.init_producer_id(keep_prepared=True)
    ongoing = (kept.ongoing_txn_producer_id, kept.ongoing_txn_producer_epoch)
    if ongoing == (NO_ID, NO_ID):
        after = session.describe()  # a concurrent completion we waited out (CONCURRENT_TRANSACTIONS)
        if after is not None and after.producer_id == prepared.producer_id:
            return _already(after.transaction_state)
        return Completion.ALREADY_COMPLETED
    if ongoing != (prepared.producer_id, prepared.producer_epoch):
        raise TransactionMismatchError(
            f"{tid!r} has another transaction open (producer id {ongoing[0]}, epoch {ongoing[1]}), not the "
            f"prepared one (producer id {prepared.producer_id}, epoch {prepared.producer_epoch}): nothing "
            "was ended (its producer is fenced)",
            ErrorCode.INVALID_TXN_STATE,
        )
    session.end_txn(kept.producer_id, kept.producer_epoch, commit=commit)
    return Completion.COMMITTED if commit else Completion.ABORTED


def _already(state: str) -> Completion:
    if state == "CompleteCommit":
        return Completion.ALREADY_COMMITTED
    if state == "CompleteAbort":
        return Completion.ALREADY_ABORTED
    return Completion.ALREADY_COMPLETED
