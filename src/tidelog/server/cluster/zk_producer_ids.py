"""Producer ids unique across a cluster: blocks handed out by ZooKeeper (Kafka's ``ZkProducerIdManager``).

Every broker takes blocks of 1000 ids from ``/latest_producer_id_block`` by compare-and-set: the blocks of
two brokers never overlap, and a block once taken is never taken again (ZooKeeper persists the latest
one). The next block is fetched in the background when 90% of the current one is used (Kafka's prefetch),
so handing out an id never waits on ZooKeeper unless the broker runs through a whole block before the next
arrives; then InitProducerId answers the retriable COORDINATOR_LOAD_IN_PROGRESS.

Invariants, as the single-node :class:`~tidelog.server.producer_id_manager.ProducerIdManager`: ids increase
strictly within a process; no id at or below the floor (the highest id seen in use in the logs and the
transaction log) is handed out; while a hold is open (``__transaction_state`` loading) no id is handed
out at all (:class:`~tidelog.server.producer_id_manager.ProducerIdsNotReadyError`).
"""

from __future__ import annotations

import asyncio
import logging

from tidelog.server.producer_id_manager import PRODUCER_ID_BLOCK_SIZE, ProducerIdsNotReadyError
from tidelog.server.zk.client import KafkaZkClient
from tidelog.server.zk.errors import ZkError
from tidelog.server.zk.zk_data import ProducerIdBlock

__all__ = ["ZkProducerIdManager"]

log = logging.getLogger("tidelog.cluster.producer_ids")

_PREFETCH_AT = 0.9


class ZkProducerIdManager:
    """Hands out producer ids from blocks ZooKeeper reserves for this broker."""

    def __init__(self, zk: KafkaZkClient, *, node_id: int, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        self._zk = zk
        self._node_id = node_id
        self._block_size = block_size
        self._current: ProducerIdBlock | None = None
        self._next_id = 0
        self._prefetched: ProducerIdBlock | None = None
        self._fetching: asyncio.Task[None] | None = None
        self._floor = -1
        self._holds: set[str] = set()
        self._held_floor = -1

    @property
    def holds(self) -> frozenset[str]:
        return frozenset(self._holds)

    async def start(self) -> None:
        """Take the first block before any id is needed."""
        self._prefetched = await self._zk.allocate_producer_id_block(self._node_id, self._block_size)

    def generate_producer_id(self) -> int:
        if self._holds:
            raise ProducerIdsNotReadyError(f"producer ids wait for {min(self._holds)} to load")
        while True:
            block = self._current
            if block is None or self._next_id > block.last_producer_id:
                if self._prefetched is None:
                    self._prefetch()
                    raise ProducerIdsNotReadyError("waiting for a block of producer ids from ZooKeeper")
                self._current, self._prefetched = self._prefetched, None
                self._next_id = self._current.first_producer_id
                continue
            if self._next_id <= self._floor:
                self._next_id = self._floor + 1
                continue
            producer_id = self._next_id
            self._next_id += 1
            used = self._next_id - block.first_producer_id
            if used >= _PREFETCH_AT * block.size:
                self._prefetch()
            return producer_id

    def _prefetch(self) -> None:
        if self._prefetched is not None or (self._fetching is not None and not self._fetching.done()):
            return

        async def fetch() -> None:
            try:
                block = await self._zk.allocate_producer_id_block(self._node_id, self._block_size)
            except ZkError as exc:
                log.warning("cannot take a block of producer ids from ZooKeeper: %s", exc)
                return
            self._prefetched = block
            log.info("took producer ids %d-%d", block.first_producer_id, block.last_producer_id)

        self._fetching = asyncio.get_running_loop().create_task(fetch())

    def raise_floor(self, in_use: int, where: str) -> bool:
        """Never hand out ``in_use`` (seen in ``where``) or an id below it."""
        if in_use <= self._floor:
            return False
        self._floor = in_use
        log.debug("producer ids stay above %d (%s)", in_use, where)
        return True

    def hold(self, key: str) -> None:
        self._holds.add(key)

    def release(self, key: str, in_use: int, where: str) -> None:
        if key not in self._holds:
            self.raise_floor(in_use, where)
            return
        self._holds.discard(key)
        self._held_floor = max(self._held_floor, in_use)
        if not self._holds:
            self.raise_floor(self._held_floor, where)
            self._held_floor = -1
