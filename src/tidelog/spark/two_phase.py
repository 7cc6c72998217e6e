"""The two-phase exactly-once sink: every task of a micro-batch prepares a KIP-939 transaction, the driver
commits them all after Spark has the batch, so read_committed readers see a batch whole or not at all.

Chosen by ``deliveryGuarantee=exactly-once`` when the broker lets producers use two-phase commit
(``transaction.two.phase.commit.enable=true``, InitProducerId v6); ``twoPhaseCommit=true`` requires it,
``twoPhaseCommit=false`` keeps one transaction committed per task (:mod:`tidelog.spark.transactional`), which
is also what ``auto`` (the default) falls back to, with one warning, against a broker without it. The
broker is asked when the writer is built (an InitProducerId with Enable2Pc): a broker restarting or a
coordinator moving is ridden through with the source's retry policy (:mod:`tidelog.spark.retry`, up to
60 s), and only a refusal (the setting off, not authorized, no InitProducerId v6) means "without it"; no
answer within the window, or another error, fails the writer's build (never a silent fall-back).

Protocol (Flink's two-phase Kafka sink, with Spark's ``write`` / ``commit`` / ``abort``):

1. Task ``write()`` of micro-batch ``b``, write partition ``p``, attempt ``a``: the transactional id is
   ``tidelog-spark-2pc-{q}-{b}-{p}-{a}-{nonce}`` (``nonce``: 12 random hex digits), so no id ever carries
   two transactions (a replayed batch, a retried task, a restarted query or a zombie attempt each get a new
   one) and :func:`~tidelog.client.txn_producer.complete_prepared`'s ALREADY_COMMITTED is exact. Rows go
   through :class:`~tidelog.client.txn_producer.TwoPhaseProducer` to the row's ``partition``, else
   murmur2 of the key (:mod:`tidelog.spark.murmur2`, as ``format("kafka")``); ``prepare()`` flushes, and the
   task returns the :class:`~tidelog.client.txn_producer.PreparedTransaction` (JSON) in its
   :class:`TwoPhaseCommitMessage` (none when it had no rows). A task that fails aborts its own transaction
   (best effort).
2. Driver ``commit(messages, b)``: (i) record the batch's *intent* durably, the prepared list
   (:mod:`tidelog.spark.two_phase_intent`); (ii) abort the query's other open transactions (failed or
   zombie attempts: ListTransactions, ids with the query's prefix); (iii) commit every prepared transaction
   (``complete_prepared(commit=True)``, in parallel); Spark then writes its commit log entry for ``b``.
3. Driver ``abort(messages, b)``: the tasks' transactions and the query's other open ones are aborted —
   unless ``b``'s intent was recorded (``commit`` failed after step (i); Spark calls ``abort`` then):
   those are committed instead (best effort; the restart finishes them).
4. Building the writer (Spark builds it when the query starts, and again in a new process for every
   ``commit`` / ``abort``, so building cannot tell a restart from a commit): the latest intent is finished
   (its transactions committed; those already committed answer ALREADY_COMMITTED), open transactions of
   the query's batches before the last one in Spark's offset log are aborted (needs a local checkpoint:
   its query id and offset log), and tasks of a batch ``<=`` the intent's batch write nothing
   (:attr:`TwoPhaseCommitMessage.skipped`): that batch is already in the output. Open transactions of the
   offset log's last batch may be the ones the coming ``commit`` commits; those no intent names are
   aborted by that batch's ``commit`` (step (ii)).

Crash points (the driver dies between two lines; Spark then replays ``b``, whose offsets it logged but whose
commit it did not):

- during the tasks, or after they prepared and before (i) completed (including after the intent record
  and before its pointer): no intent for ``b``. The replay writes ``b`` again under new ids; its
  ``commit`` records the new intent, aborts the dead run's transactions of ``b`` (ii) and commits the new
  ones. Readers see nothing of the dead run's attempt, ever; until the replay's commit the dead run's open
  transactions hold the output partitions' last stable offset (other writers' records there included).
  Open transactions of earlier batches (zombie attempts) are aborted when the restarted query starts.
- after (i), anywhere in (ii) or (iii): the intent names exactly the transactions of ``b``. The restart
  commits each of them (building the writer), the replay's tasks write nothing, and its ``commit`` finds
  the intent of ``b`` finished and aborts whatever else is open. Readers may have seen some of ``b``'s
  transactions and not others from the first commit until the restart (a driver death mid-commit is the
  one window where a batch is partly visible for longer than the commit itself).
- after (iii), before Spark's commit log: as the previous case, with every transaction already committed.
- ``commit`` raised after (i) and Spark called ``abort``: ``abort`` commits the intent (step 3), never
  aborts it; whatever it cannot finish, the restart does.
- a zombie task (an attempt still running after its batch was decided) prepares a transaction nobody
  commits; the next ``commit``'s step (ii), or a restart, aborts it.

Invariants:

- A transaction of batch ``b`` is committed only after ``b``'s intent is durable and names it, and is
  aborted only if no intent names it (an intent is immutable, and the next intent is written only after
  every transaction of the previous one was committed).
- Every transaction no intent names is aborted by the next ``commit`` or ``abort`` of the query, or when
  it restarts (earlier batches), whichever comes first.
- ``commit`` fails loudly (:class:`TwoPhaseCommitError`) when a transaction of the intent was aborted
  by someone else (ALREADY_ABORTED): the batch cannot be made whole.

Limits: within ``commit`` the transactions are committed one per task, concurrently, not atomically (Kafka
has no multi-transaction commit), so for those milliseconds a reader can see some tasks' rows of ``b``
before others'. Each micro-batch uses one new transactional id per write task; the broker keeps each for
``transactional.id.expiration.ms``. A query stays in the mode it started in (a query whose intent exists
refuses to fall back; one that committed per task keeps doing so) when its checkpoint is local; with a
remote checkpoint, switching modes under a query whose last batch was cut short can duplicate that batch.
"""

from __future__ import annotations

import contextlib
import logging
import random
import secrets
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from tidelog.client.lookup import partition_leaders
from tidelog.client.security import WireSecurity
from tidelog.client.txn_producer import (
    Completion,
    PreparedTransaction,
    TransactionError,
    TwoPhaseCommitUnavailableError,
    TwoPhaseProducer,
    complete_prepared,
)
from tidelog.client.wire import WireError, connect
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import SimpleRecord
from tidelog.spark.exactly_once import ExactlyOnceUnavailableError
from tidelog.spark.fencing import checkpoint_query_id, local_checkpoint, open_transactions
from tidelog.spark.murmur2 import partition_for
from tidelog.spark.options import WriterOptions
from tidelog.spark.retry import ride_through
from tidelog.spark.transactional import read_batch_shape
from tidelog.spark.two_phase_intent import BatchIntent, read_intent, record_intent
from tidelog.spark.writer import (
    ProducerWriteError,
    _headers_column,
    _int_column,
    _text_column,
    _timestamp_column,
)

__all__ = [
    "TWO_PHASE_PREFIX",
    "TwoPhaseCommitError",
    "TwoPhaseCommitMessage",
    "TwoPhaseStreamWriter",
    "abort_batch",
    "abort_leftovers",
    "choose_two_phase",
    "commit_batch",
    "latest_logged_batch",
    "recover",
    "two_phase_id",
    "write_task",
]

log = logging.getLogger("tidelog.spark")

TWO_PHASE_PREFIX = "tidelog-spark-2pc-"
_TIMEOUT_S = 60.0
_PROBE_ID = "tidelog-spark-2pc-probe"
_PROBE_ATTEMPT_S = 15.0
"""One probe attempt's socket and coordinator timeout; attempts go on for the retry window."""
_warned: set[str] = set()


class TwoPhaseCommitError(RuntimeError):
    """A micro-batch's prepared transactions cannot all be committed."""


@dataclass(frozen=True)
class TwoPhaseCommitMessage(WriterCommitMessage):
    """What a task reports: its prepared transaction (JSON), or ``skipped`` (the batch is already decided)."""

    query_id: str
    rows: int
    prepared: str | None
    skipped: bool = False


def two_phase_id(query_id: str, batch: int, partition: int, attempt: int, nonce: str | None = None) -> str:
    """A transactional id for one task attempt, never used again."""
    return f"{TWO_PHASE_PREFIX}{query_id}-{batch}-{partition}-{attempt}-{nonce or secrets.token_hex(6)}"


def _security(options: WriterOptions) -> WireSecurity:
    return WireSecurity.from_settings(options.client_config)


# -- the task ---------------------------------------------------------------------------------------------


class _Partitions:
    """Partition counts of the output topics (Metadata, once per topic per task)."""

    def __init__(self, options: WriterOptions, security: WireSecurity) -> None:
        self.options = options
        self.security = security
        self.counts: dict[str, int] = {}

    def count(self, topic: str) -> int:
        known = self.counts.get(topic)
        if known is not None:
            return known
        with connect(
            self.options.bootstrap_servers, timeout=_TIMEOUT_S, sasl=self.security.sasl, tls=self.security.tls
        ) as wire:
            _, topics = partition_leaders(wire, [topic])
        found = topics.get(topic)
        if found is None or found.error_code != ErrorCode.NONE or not found.partitions:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if found is None else found.error_code
            raise ProducerWriteError(f"cannot write to topic {topic!r}: {ErrorCode.name_of(code)}")
        self.counts[topic] = len(found.partitions)
        return self.counts[topic]


def _as_bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _send_rows(
    producer: TwoPhaseProducer, options: WriterOptions, partitions: _Partitions, batch: pa.RecordBatch
) -> int:
    n = batch.num_rows
    if n == 0:
        return 0
    values = _text_column(batch, "value")
    assert values is not None
    keys = _text_column(batch, "key") or [None] * n
    topics = [options.topic] * n if options.topic is not None else _text_column(batch, "topic")
    assert topics is not None
    chosen = _int_column(batch, "partition")
    header_lists = _headers_column(batch)
    timestamps = _timestamp_column(batch)
    rng = random.Random()
    out: dict[tuple[str, int], list[SimpleRecord]] = {}
    for i in range(n):
        topic = topics[i]
        if topic is None:
            raise ProducerWriteError("a row has a null topic and no topic option is set")
        assert isinstance(topic, str)
        key = _as_bytes(keys[i])
        count = partitions.count(topic)
        partition = chosen[i] if chosen is not None else None
        if partition is None:
            partition = partition_for(key, count, rng)
        elif not 0 <= partition < count:
            raise ProducerWriteError(
                f"partition {partition} of topic {topic!r} does not exist ({count} partitions)"
            )
        row_headers = header_lists[i] if header_lists is not None else None
        headers = tuple((h["key"], _as_bytes(h["value"])) for h in row_headers) if row_headers else ()
        timestamp = timestamps[i] if timestamps is not None else None
        out.setdefault((topic, partition), []).append(
            SimpleRecord(key, _as_bytes(values[i]), headers, -1 if timestamp is None else timestamp)
        )
    for (topic, partition), records in out.items():
        producer.send(topic, partition, records)
    return int(n)


def write_task(
    options: WriterOptions,
    query_id: str,
    batch_id: int,
    partition: int,
    attempt: int,
    batches: Iterable[pa.RecordBatch],
) -> TwoPhaseCommitMessage:
    """Write one task's rows in a new transaction and prepare it (the task side, callable without Spark).
    A task with no rows opens no transaction and reports none."""
    security = _security(options)
    partitions = _Partitions(options, security)
    producer: TwoPhaseProducer | None = None
    rows = 0
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if producer is None:
                producer = TwoPhaseProducer(
                    options.bootstrap_servers,
                    two_phase_id(query_id, batch_id, partition, attempt),
                    timeout=_TIMEOUT_S,
                    sasl=security.sasl,
                    tls=security.tls,
                )
            rows += _send_rows(producer, options, partitions, batch)
        prepared = None if producer is None else producer.prepare()
    except BaseException:
        if producer is not None:
            with contextlib.suppress(Exception):  # else the driver's next commit, or the restart, aborts it
                producer.abort()
        raise
    finally:
        if producer is not None:
            producer.close()
    return TwoPhaseCommitMessage(query_id, rows, None if prepared is None else prepared.to_json())


# -- the driver -------------------------------------------------------------------------------------------


def _complete_all(
    options: WriterOptions, batch: int, transactions: Iterable[PreparedTransaction], commit: bool
) -> None:
    """Complete every transaction (concurrently); committing, one that was aborted raises."""
    security = _security(options)
    transactions = list(transactions)
    if not transactions:
        return

    def complete(prepared: PreparedTransaction) -> tuple[PreparedTransaction, Completion]:
        outcome = complete_prepared(
            options.bootstrap_servers,
            prepared,
            commit,
            timeout=_TIMEOUT_S,
            sasl=security.sasl,
            tls=security.tls,
        )
        return prepared, outcome

    with ThreadPoolExecutor(max_workers=min(8, len(transactions))) as pool:
        outcomes = list(pool.map(complete, transactions))
    for prepared, outcome in outcomes:
        if commit and outcome is Completion.ALREADY_ABORTED:
            raise TwoPhaseCommitError(
                f"micro-batch {batch}: the prepared transaction {prepared.transactional_id} was aborted before "
                "the driver committed it; the batch cannot be made whole (was the transactional id fenced or "
                "aborted from outside the query?)"
            )
        if commit and outcome is Completion.ALREADY_COMPLETED:
            log.warning(
                "micro-batch %d: the transaction %s ended before this commit and the broker no longer knows how "
                "(its transactional id expired)",
                batch,
                prepared.transactional_id,
            )


def _batch_of(name: str, prefix: str) -> int | None:
    """The micro-batch in one of the query's ids (``{prefix}{batch}-{partition}-{attempt}-{nonce}``)."""
    batch = name[len(prefix) :].split("-", 1)[0]
    return int(batch) if batch.isdigit() else None


def abort_leftovers(
    options: WriterOptions, query_id: str, keep: Iterable[str] = (), before_batch: int | None = None
) -> list[str]:
    """Abort every open transaction of query ``query_id``'s two-phase sink except ``keep`` (only those of
    micro-batches before ``before_batch`` when given); returns their ids.

    Raises :class:`TwoPhaseCommitError` when the open transactions cannot be listed (a two-phase transaction
    never times out: a leftover would hold read_committed readers back for good)."""
    try:
        listed = open_transactions(options)
    except WireError as exc:
        raise TwoPhaseCommitError(f"cannot list the open transactions of query {query_id}: {exc}") from exc
    prefix = f"{TWO_PHASE_PREFIX}{query_id}-"
    kept = set(keep)
    leftovers = []
    for name in sorted({name for name, _ in listed if name.startswith(prefix) and name not in kept}):
        batch = _batch_of(name, prefix)
        if before_batch is None or (batch is not None and batch < before_batch):
            leftovers.append(name)
    security = _security(options)
    for name in leftovers:
        # InitProducerId (not keeping the prepared transaction) aborts it and fences its producer.
        TwoPhaseProducer(
            options.bootstrap_servers, name, timeout=_TIMEOUT_S, sasl=security.sasl, tls=security.tls
        ).close()
    if leftovers:
        log.warning(
            "query %s: aborted %d open transactions no micro-batch commits: %s",
            query_id,
            len(leftovers),
            ", ".join(leftovers),
        )
    return leftovers


def latest_logged_batch(checkpoint_location: str | None) -> int | None:
    """The last micro-batch in a local checkpoint's offset log (the one running or to be replayed)."""
    path = local_checkpoint(checkpoint_location)
    if path is None:
        return None
    try:
        batches = [int(p.name) for p in (path / "offsets").iterdir() if p.name.isdigit()]
    except OSError:
        return None
    return max(batches, default=None)


def recover(options: WriterOptions, query_id: str, running: int | None = None) -> int | None:
    """When Spark builds the writer: finish the latest intent (committing what is committed already is a
    no-op), abort open transactions of the query's micro-batches before ``running`` (the offset log's last
    batch: Spark builds a writer for each commit too, so that batch's prepared transactions may be the ones
    about to be committed); returns the intent's batch (the last batch whose output is decided), or None."""
    intent = read_intent(options, query_id)
    if intent is not None:
        _complete_all(options, intent.batch, intent.transactions, commit=True)
    if running is not None:
        abort_leftovers(options, query_id, before_batch=running)
    return None if intent is None else intent.batch


def commit_batch(
    options: WriterOptions, query_id: str, batch: int, prepared: list[PreparedTransaction]
) -> None:
    """The driver's commit of micro-batch ``batch`` (see the module's protocol, step 2)."""
    intent = read_intent(options, query_id)
    if intent is not None and intent.batch >= batch:  # decided by an earlier run: finish it, drop the replay
        if intent.batch == batch:
            _complete_all(options, batch, intent.transactions, commit=True)
        abort_leftovers(options, query_id)
        return
    intent = BatchIntent(batch, tuple(prepared))
    record_intent(options, query_id, intent)
    abort_leftovers(options, query_id, keep=[t.transactional_id for t in prepared])
    _complete_all(options, batch, prepared, commit=True)


def abort_batch(
    options: WriterOptions, query_id: str, batch: int, prepared: list[PreparedTransaction]
) -> None:
    """The driver's abort of micro-batch ``batch`` (see the module's protocol, step 3)."""
    intent = read_intent(options, query_id)
    if intent is not None and intent.batch == batch:  # commit() recorded it, then failed: finish, never undo
        keep = [t.transactional_id for t in intent.transactions]
        try:
            _complete_all(options, batch, intent.transactions, commit=True)
        except (TransactionError, WireError, TwoPhaseCommitError) as exc:
            log.warning("micro-batch %d: its commit is finished when the query restarts (%s)", batch, exc)
        abort_leftovers(options, query_id, keep=keep)
        return
    _complete_all(options, batch, prepared, commit=False)
    abort_leftovers(options, query_id)


def _started_per_task(options: WriterOptions) -> bool:
    """Whether the query (a local checkpoint's) committed batches one transaction per task and never in two
    phases: a replay of such a batch must stay per task (its tasks' progress marks say what is written)."""
    query_id = checkpoint_query_id(options.checkpoint_location)
    if query_id is None or read_batch_shape(options, query_id) is None:
        return False
    if read_intent(options, query_id) is not None:
        return False
    if options.two_phase_commit == "true":
        raise ExactlyOnceUnavailableError(
            f"two-phase commit for query {query_id}, whose checkpoint was written with one transaction per task"
        )
    log.warning(
        "deliveryGuarantee=exactly-once: query %s started with one transaction per task and keeps it (a new "
        "checkpoint commits in two phases)",
        query_id,
    )
    return True


def _probe_two_phase(options: WriterOptions) -> None:
    """An InitProducerId with Enable2Pc under :data:`_PROBE_ID`, riding through a broker restarting or the
    coordinator moving (:func:`~tidelog.spark.retry.ride_through`); raises
    :class:`~tidelog.client.txn_producer.TwoPhaseCommitUnavailableError` at once when the broker refuses
    two-phase commit (setting off, not authorized, no InitProducerId v6)."""
    security = _security(options)

    def attempt(seconds_left: float) -> None:
        TwoPhaseProducer(
            options.bootstrap_servers,
            _PROBE_ID,
            timeout=min(_PROBE_ATTEMPT_S, seconds_left),
            sasl=security.sasl,
            tls=security.tls,
        ).close()

    ride_through("asking whether the broker allows two-phase commit", attempt, _wire_retriable)


def _wire_retriable(exc: BaseException) -> bool:
    return isinstance(exc, WireError) and exc.retriable


def choose_two_phase(options: WriterOptions) -> bool:
    """Whether this exactly-once write uses two-phase commit (``twoPhaseCommit``, and what the broker
    allows): ``auto`` falls back with one warning per process and broker, ``true`` raises
    :class:`ExactlyOnceUnavailableError`. A query (local checkpoint) keeps the mode it started in: one with an
    intent never falls back, one with per-task batch records never switches to two phases."""
    if options.two_phase_commit == "false":
        return False
    try:
        _probe_two_phase(options)
    except TwoPhaseCommitUnavailableError as exc:
        reason = str(exc)
    except WireError as exc:  # no answer within the window, or one that is not about two-phase commit
        raise WireError(
            f"deliveryGuarantee=exactly-once: cannot ask the broker at {options.bootstrap_servers} whether it "
            f"allows two-phase commit ({exc})",
            retriable=exc.retriable,
        ) from exc
    else:
        return not _started_per_task(options)
    if options.two_phase_commit == "true":
        raise ExactlyOnceUnavailableError(f"two-phase commit (twoPhaseCommit=true: {reason})")
    query_id = checkpoint_query_id(options.checkpoint_location)
    if query_id is not None and read_intent(options, query_id) is not None:
        raise ExactlyOnceUnavailableError(
            f"two-phase commit, which this query's checkpoint was written with ({reason})"
        )
    if options.bootstrap_servers not in _warned:
        _warned.add(options.bootstrap_servers)
        log.warning(
            "deliveryGuarantee=exactly-once: the broker at %s does not allow two-phase commit (%s); falling back "
            "to one transaction per task, so read_committed readers can see part of a micro-batch (set "
            "transaction.two.phase.commit.enable=true on the brokers, or twoPhaseCommit=false to silence this)",
            options.bootstrap_servers,
            reason,
        )
    return False


# -- Spark ------------------------------------------------------------------------------------------------


def _task_identity() -> tuple[str, int, int, int]:
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("the exactly-once writer runs only inside a Spark task")
    query_id = context.getLocalProperty("sql.streaming.queryId")
    batch_id = context.getLocalProperty("streaming.sql.batchId")
    if query_id is None or batch_id is None:
        raise RuntimeError(
            "the exactly-once writer needs a streaming query (no query or batch id on the task)"
        )
    return query_id, int(batch_id), context.partitionId(), int(context.attemptNumber())


def _prepared(
    messages: list[WriterCommitMessage | None], batch: int
) -> tuple[str, list[PreparedTransaction]]:
    reported = [m for m in messages if isinstance(m, TwoPhaseCommitMessage)]
    if len(reported) != len(messages) or not reported:
        raise RuntimeError(
            f"micro-batch {batch}: {len(messages) - len(reported)} tasks reported no transaction"
        )
    queries = {m.query_id for m in reported}
    if len(queries) != 1:
        raise RuntimeError(f"micro-batch {batch}: tasks of several queries reported ({sorted(queries)})")
    prepared = [PreparedTransaction.from_json(m.prepared) for m in reported if m.prepared is not None]
    return queries.pop(), prepared


class TwoPhaseStreamWriter(DataSourceStreamArrowWriter):
    """``deliveryGuarantee=exactly-once`` with two-phase commit; ``decided`` is the batch the query's
    latest intent named when this writer was built after :func:`recover` (tasks of batches up to it skip)."""

    def __init__(
        self, options: WriterOptions, query_id: str | None = None, decided: int | None = None
    ) -> None:
        self.options = options
        self.query_id = query_id  # known when the checkpoint is local (then recovered when this was built)
        self.decided = decided

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TwoPhaseCommitMessage:
        query_id, batch_id, partition, attempt = _task_identity()
        if self.decided is not None and batch_id <= self.decided:
            return TwoPhaseCommitMessage(query_id, 0, None, skipped=True)
        return write_task(self.options, query_id, batch_id, partition, attempt, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        query_id, prepared = _prepared(messages, batchId)
        commit_batch(self.options, query_id, batchId, prepared)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        reported = [m for m in messages if isinstance(m, TwoPhaseCommitMessage)]
        query_id = reported[0].query_id if reported else self.query_id
        if query_id is None:
            return  # no task reported: open transactions are aborted by the next commit or the restart
        prepared = [PreparedTransaction.from_json(m.prepared) for m in reported if m.prepared is not None]
        abort_batch(self.options, query_id, batchId, prepared)
