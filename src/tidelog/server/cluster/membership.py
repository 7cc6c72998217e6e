"""This broker's membership of the cluster: its registration in ``/brokers/ids/N`` and its broker epoch,
across ZooKeeper session expiries (Kafka's ``KafkaServer`` registration and ``KafkaZkClient`` session
handling, KIP-380's broker epochs).

Invariants:

- The broker epoch is the czxid of this broker's current ``/brokers/ids/N``: a new registration (a restart, or
  a new session after an expiry) gets a larger one. Followers send it with their fetches (KIP-380/903); the
  controller tells a restarted broker from a live one by it.
- A registration that finds ``/brokers/ids/N`` held by another session is retried until that session ends
  (a previous life of this broker killed less than a session timeout ago) or the wait runs out, which
  stops the start with a message naming the id: two live brokers never share an id.
- When the session expires the broker is *fenced* first (it leads nothing: ``on_fenced``; its controller
  resigns through its own session listener; its followers keep fetching, which is harmless: a follower
  never acknowledges anything), synchronously, before anything else runs on the loop; only once the new session
  is up and the broker registered again (a new epoch) is ``on_registered`` awaited (re-read the cluster's
  state, then unfence). A broker cut off from ZooKeeper can therefore never act on a view ZooKeeper has
  moved past: its ISR writes fail (no session) and its leadership ends with the session.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from tidelog.server.zk.client import KafkaZkClient
from tidelog.server.zk.errors import BrokerIdInUseError, ZkError, ZkSessionExpiredError
from tidelog.server.zk.zk_data import BrokerRegistration

__all__ = ["BrokerMembership"]

log = logging.getLogger("tidelog.cluster.membership")


class BrokerMembership:
    """Registers this broker and keeps it registered; see the module docstring."""

    def __init__(
        self,
        zk: KafkaZkClient,
        registration: Callable[[], BrokerRegistration],
        *,
        on_fenced: Callable[[], None],
        on_registered: Callable[[int], Awaitable[None]],
        wait_for_id_s: float,
    ) -> None:
        self._zk = zk
        self._registration = registration
        self._on_fenced = on_fenced
        self._on_registered = on_registered
        self._wait_for_id_s = wait_for_id_s
        self.epoch = -1
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopped = False
        zk.session.on_expired(self._expired)
        zk.session.on_new_session(self._new_session)

    async def register(self) -> int:
        """Register this broker (waiting out a previous life's registration); returns the broker epoch."""
        registration = self._registration()
        deadline = asyncio.get_running_loop().time() + self._wait_for_id_s
        while True:
            try:
                self.epoch = await self._zk.register_broker(registration)
            except BrokerIdInUseError:
                if asyncio.get_running_loop().time() >= deadline:
                    raise
                log.info(
                    "broker id %d is still registered by another session (a previous life of this broker?); "
                    "waiting for it to end",
                    registration.broker_id,
                )
                await asyncio.sleep(0.5)
                continue
            log.info("registered as broker %d with broker epoch %d", registration.broker_id, self.epoch)
            return self.epoch

    def _expired(self, old_session: int) -> None:
        if self._stopped:
            return
        log.warning(
            "the ZooKeeper session %#x expired: this broker leads nothing until it registers again",
            old_session,
        )
        self.epoch = -1
        self._on_fenced()

    def _new_session(self, new_session: int) -> None:
        if self._stopped:
            return
        task = asyncio.get_running_loop().create_task(self._rejoin(new_session))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _rejoin(self, new_session: int) -> None:
        while not self._stopped:
            try:
                epoch = await self.register()
                await self._on_registered(epoch)
                log.info("rejoined the cluster in session %#x", new_session)
                return
            except ZkSessionExpiredError:
                return  # yet another session: its own rejoin takes over
            except (ZkError, BrokerIdInUseError) as exc:
                log.warning("registering again failed (%s); retrying", exc)
                await asyncio.sleep(1)

    async def stop(self) -> None:
        self._stopped = True
        for task in list(self._tasks):
            task.cancel()
