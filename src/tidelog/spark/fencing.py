"""Fencing the exactly-once sink's leftover transactions, so a killed query never stalls read_committed readers.

A task of query ``q`` in write partition ``p`` uses the transactional id ``tidelog-spark-{q}-{p}``. A killed
run leaves the transactions of its running tasks open; the restarted run's task ``p`` fences its own id, but
if the restart writes to fewer partitions, the ids of the others stay open and hold back every
read_committed reader of the output partitions until the sink's ``transaction.timeout.ms`` (15 min).

Invariants:

- The leftovers are found exactly: ListTransactions (state ``Ongoing``) asked of every broker of the
  cluster (each lists the transactions it coordinates; ListTransactions v0/v1 filter only by state,
  producer id and duration, so the id prefix ``tidelog-spark-{q}-`` followed by a partition number is
  matched here). Each one is fenced with InitProducerId on its id (a transactional producer's
  ``init_transactions()``), which bumps the epoch and aborts its open transaction.
- It runs only where no live task of the query can hold a transaction: when the query (re)starts and
  before each commit or abort (Spark builds the writer on the driver then, after every task of the
  micro-batch ended, and before the next micro-batch's tasks start), so it never aborts a live write;
  a task attempt still running after its micro-batch was aborted is fenced, as its retry would fence it.
- The query id comes from the checkpoint's ``metadata`` file (``{"id": ...}``, written by Spark before
  any sink is built) when the ``checkpointLocation`` option is an absolute local path or ``file:`` URI;
  otherwise (a checkpoint on HDFS or S3, or set by ``spark.sql.streaming.checkpointLocation``) from the
  transactional ids the tasks report, in the micro-batch's ``commit`` / ``abort``.
- Fencing is best effort: a broker or setting the wire client cannot serve (a SASL mechanism other than
  PLAIN or SCRAM, a refused ListTransactions) is logged as a warning and the query goes on; leftovers
  then end at the broker's transaction timeout, as before.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterable
from pathlib import Path

from confluent_kafka import KafkaException, Producer

from tidelog.spark.options import WriterOptions
from tidelog.spark.retry import ride_through

__all__ = [
    "TRANSACTIONAL_ID_PREFIX",
    "checkpoint_query_id",
    "fence_leftovers",
    "leftover_ids",
    "local_checkpoint",
    "open_transactions",
    "query_of",
    "transactional_id",
]

log = logging.getLogger("tidelog.spark")

TRANSACTIONAL_ID_PREFIX = "tidelog-spark-"
_OPEN_STATES = ("Ongoing",)
_TIMEOUT_S = 60.0
_TRANSACTION_STATE = "__transaction_state"
# Spark's query ids are UUIDs; the partition is the last dash-separated part.
_ID = re.compile(r"^tidelog-spark-(?P<query>.+)-(?P<partition>\d+)$")


def transactional_id(query_id: str, partition: int) -> str:
    """The transactional id (and progress group) of write partition ``partition`` of query ``query_id``."""
    return f"{TRANSACTIONAL_ID_PREFIX}{query_id}-{partition}"


def query_of(transactional_id: str) -> str | None:
    """The query id in one of the sink's transactional ids, else None."""
    match = _ID.match(transactional_id)
    return match["query"] if match else None


def leftover_ids(listed: Iterable[tuple[str, str]], query_id: str) -> list[str]:
    """The ids among ``(transactional id, state)`` that are open transactions of query ``query_id``'s sink,
    in partition order."""
    found: list[tuple[int, str]] = []
    for name, state in listed:
        match = _ID.match(name)
        if match and match["query"] == query_id and state in _OPEN_STATES:
            found.append((int(match["partition"]), name))
    return [name for _, name in sorted(set(found))]


def local_checkpoint(checkpoint_location: str | None) -> Path | None:
    """The checkpoint's directory when it is on this machine's file system (an absolute path or a ``file:``
    URI), else None."""
    if not checkpoint_location:
        return None
    location = checkpoint_location.strip()
    if location.startswith("file:"):
        location = location.removeprefix("file:")
        location = "/" + location.lstrip("/")  # file:/x, file:///x
    path = Path(location)
    return path if path.is_absolute() else None  # a relative one is the driver JVM's, maybe not ours


def checkpoint_query_id(checkpoint_location: str | None) -> str | None:
    """The query id Spark keeps in ``{checkpoint}/metadata``, or None unless the checkpoint is on this
    machine's file system (an absolute path or a ``file:`` URI) and has that file."""
    path = local_checkpoint(checkpoint_location)
    if path is None:
        return None
    try:
        first_line = (path / "metadata").read_text(encoding="utf-8").splitlines()[0]
        query_id = json.loads(first_line)["id"]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    return query_id if isinstance(query_id, str) else None


def open_transactions(options: WriterOptions) -> list[tuple[str, str]]:
    """``(transactional id, state)`` of every open transaction of the cluster (ListTransactions on every
    broker). While a broker is going away or a transaction coordinator is moving (a broker unreachable, a
    partition of ``__transaction_state`` without a live leader, a retriable error) it asks again, with a
    fresh metadata, with the source's retry policy (:func:`~tidelog.spark.retry.ride_through`: backoff to
    1 s, for up to 60 s); then raises
    :class:`~tidelog.client.wire.WireError`."""
    from tidelog.client.wire import WireError

    return ride_through(
        "listing open transactions",
        lambda _left: _open_transactions_once(options),
        lambda exc: isinstance(exc, WireError),
    )


def _open_transactions_once(options: WriterOptions) -> list[tuple[str, str]]:
    from tidelog.client.lookup import partition_leaders
    from tidelog.client.security import WireSecurity
    from tidelog.client.wire import WireClient, WireError, connect
    from tidelog.protocol.errors import ErrorCode
    from tidelog.protocol.messages import ListTransactionsRequest, ListTransactionsResponse

    security = WireSecurity.from_settings(options.client_config)
    with connect(
        options.bootstrap_servers, timeout=_TIMEOUT_S, sasl=security.sasl, tls=security.tls
    ) as bootstrap:
        brokers, topics = partition_leaders(bootstrap, [_TRANSACTION_STATE])
    state_topic = topics.get(_TRANSACTION_STATE)
    if state_topic is not None and state_topic.error_code == ErrorCode.NONE:
        # complete only if every coordinator partition is led by a broker that answers below
        leaderless = [p.partition_index for p in state_topic.partitions if p.leader_id not in brokers]
        if leaderless:
            raise WireError(f"{_TRANSACTION_STATE} partitions {sorted(leaderless)} have no leader now")
    listed: list[tuple[str, str]] = []
    for node_id, address in sorted(brokers.items()):
        host, _, port = address.rpartition(":")
        with WireClient(host, int(port), timeout=_TIMEOUT_S, sasl=security.sasl, tls=security.tls) as wire:
            deadline = time.monotonic() + _TIMEOUT_S
            while True:
                response = wire.call(
                    ListTransactionsRequest(state_filters=list(_OPEN_STATES)), expect=ListTransactionsResponse
                )
                error = response.error_code
                if error == ErrorCode.NONE:
                    break
                if not ErrorCode.of(error).retriable or time.monotonic() > deadline:
                    raise WireError(f"broker {node_id} cannot list transactions: {ErrorCode.name_of(error)}")
                time.sleep(0.1)  # a coordinator still loading its transactions
        listed.extend((t.transactional_id, t.transaction_state) for t in response.transaction_states)
    return listed


def _fence(options: WriterOptions, name: str) -> None:
    """InitProducerId on ``name``: its epoch is bumped and its open transaction aborted."""
    producer = Producer(
        {"bootstrap.servers": options.bootstrap_servers, **options.client_config, "transactional.id": name}
    )
    producer.init_transactions(_TIMEOUT_S)


def fence_leftovers(options: WriterOptions, query_id: str) -> list[str]:
    """Fence every open transaction of query ``query_id``'s sink; returns the ids fenced (best effort:
    a failure is logged, never raised)."""
    from tidelog.client.wire import WireError

    try:
        leftovers = leftover_ids(open_transactions(options), query_id)
    except WireError as exc:
        log.warning(
            "cannot list the open transactions of query %s (%s): transactions a killed run left open end at "
            "the broker's transaction timeout",
            query_id,
            exc,
        )
        return []
    fenced: list[str] = []
    for name in leftovers:
        try:
            _fence(options, name)
        except KafkaException as exc:
            log.warning("cannot fence the leftover transaction %s: %s", name, exc)
            continue
        fenced.append(name)
    if fenced:
        log.warning("aborted %d transactions a previous run left open: %s", len(fenced), ", ".join(fenced))
    return fenced
