"""What a server runtime needs of a coordinator, whatever it coordinates (Kafka's ``CoordinatorShard``
as ``CoordinatorRuntime`` drives it, for all the partitions of one internal topic a broker leads).

One runtime can drive any :class:`PartitionedCoordinator`: create its internal topic
(:attr:`~PartitionedCoordinator.topic_name`, :attr:`~PartitionedCoordinator.num_partitions`), load each
partition it leads (:meth:`~PartitionedCoordinator.begin_loading`, then every record of the partition's
log to :meth:`~PartitionedCoordinator.replay` and every transaction marker in it to
:meth:`~PartitionedCoordinator.replay_end_transaction_marker`, in log order, then
:meth:`~PartitionedCoordinator.complete_loading`), route requests to it
(:meth:`~PartitionedCoordinator.handle`), fire its timers (:meth:`~PartitionedCoordinator.on_timeout`),
and unload a partition when it loses it or when an append fails
(:meth:`~PartitionedCoordinator.unload`, answering with :meth:`~PartitionedCoordinator.error_response`
and :meth:`~PartitionedCoordinator.append_error_to_response_error`). Every result is applied as
:mod:`tidelog.coordinator.common.result` describes. What is particular to one coordinator (the
transaction coordinator's markers and produce-path verification, the group coordinator's topic image
and deleted topics) stays outside this protocol.

Invariants the implementations keep: a partition is owned from :meth:`begin_loading` to :meth:`unload`;
while it loads, requests for its keys are answered COORDINATOR_LOAD_IN_PROGRESS and only ``replay*``
calls change it; a key (group id, transactional id) lives on ``partition_for(key)`` for the
coordinator's lifetime; a timer key that no longer matches what the coordinator asked for is ignored.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol, TypeVar

from tidelog.coordinator.common.result import CoordinatorResult
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import NO_PRODUCER_ID
from tidelog.protocol.schema import Request, Response

__all__ = ["PartitionedCoordinator"]

K = TypeVar("K", bound=Hashable)


class PartitionedCoordinator(Protocol[K]):
    """A coordinator over the partitions of one internal topic; ``K`` is its timer key type."""

    @property
    def topic_name(self) -> str:
        """The internal topic (``__consumer_offsets``, ``__transaction_state``)."""
        ...

    @property
    def num_partitions(self) -> int:
        """How many partitions the internal topic has (``partition_for`` maps keys onto them)."""
        ...

    @property
    def owned_partitions(self) -> list[int]:
        """The partitions this coordinator owns, loading or loaded, in ascending order."""
        ...

    def partition_for(self, key: str) -> int:
        """The partition whose leader coordinates ``key`` (a group id, a transactional id)."""
        ...

    def is_loading(self, partition: int) -> bool:
        """Whether ``partition`` is owned and still being loaded."""
        ...

    def begin_loading(self, partition: int, coordinator_epoch: int) -> object:
        """Own ``partition`` from now, empty and loading; ``coordinator_epoch`` is its leader epoch.
        Raises if it is owned already. (What it returns is for tests; a runtime ignores it.)"""
        ...

    def replay(
        self,
        partition: int,
        key: bytes | memoryview,
        value: bytes | memoryview | None,
        producer_id: int = NO_PRODUCER_ID,
    ) -> None:
        """Apply one record of a loading ``partition``'s log (``value`` ``None``: a tombstone), with the
        producer id of its batch when that batch is transactional. Raises
        :class:`~tidelog.coordinator.common.records.CoordinatorRecordError` for a record that does not
        parse (the runtime skips it)."""
        ...

    def replay_end_transaction_marker(self, partition: int, producer_id: int, committed: bool) -> None:
        """Apply a COMMIT (``committed``) or ABORT marker of ``producer_id`` found in ``partition``."""
        ...

    def complete_loading(self, partition: int, now_ms: int) -> CoordinatorResult[K]:
        """``partition`` is replayed up to its high watermark: serve it from now."""
        ...

    def unload(self, partition: int) -> CoordinatorResult[K]:
        """Stop owning ``partition`` (leadership moved, the broker stops, or an append failed)."""
        ...

    def on_timeout(self, key: K, now_ms: int) -> CoordinatorResult[K]:
        """A timer this coordinator asked for has fired (never before its deadline)."""
        ...

    def handle(
        self, request: Request, api_version: int, *, now_ms: int, client_id: str = "", client_host: str = ""
    ) -> CoordinatorResult[K]:
        """Serve one request this coordinator takes, at ``api_version``; ``client_id`` and
        ``client_host`` are the request header's client id and the peer's address (``/<ip>``)."""
        ...

    def error_response(self, request: Request, api_version: int, error: ErrorCode) -> Response:
        """``request``'s response carrying ``error`` wherever Kafka puts a request-wide error."""
        ...

    def append_error_to_response_error(self, error: ErrorCode) -> ErrorCode:
        """What a client is told when this coordinator's records could not be appended (``error``)."""
        ...
