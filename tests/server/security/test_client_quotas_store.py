"""The quota managers follow the entity configs store: what is stored at attach time, every later change
(this broker's, or another broker's learnt through ZooKeeper: the store calls its subscribers either way),
and nothing from keys that are not quotas."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping

from tidelog.server.entity_configs import EntityConfigs
from tidelog.server.security.client_quotas import ClientQuotas


class MemoryEntityConfigs(EntityConfigs):
    async def alter(self, path: str, set: Mapping[str, str], delete: Collection[str] = ()) -> None:
        updated = {k: v for k, v in self.get(path).items() if k not in delete}
        updated.update(set)
        self._apply(path, updated)

    def changed_elsewhere(self, path: str, configs: Mapping[str, str]) -> None:
        """What ZkEntityConfigs.reload does for another broker's change notification."""
        self._apply(path, configs)


def test_quotas_follow_the_store() -> None:
    store = MemoryEntityConfigs()
    asyncio.run(store.alter("clients/c1", {"producer_byte_rate": "1024", "SCRAM-SHA-256": "salted"}))
    quotas = ClientQuotas()
    quotas.attach(store)
    assert quotas.produce.quota("ANONYMOUS", "c1") == 1024
    assert not quotas.fetch.enabled  # a SCRAM credential or an absent key turns nothing on
    asyncio.run(store.alter("users/<default>", {"consumer_byte_rate": "2048"}))
    assert quotas.fetch.quota("anyone", "c1") == 2048
    store.changed_elsewhere("users/alice/clients/c%2F1", {"request_percentage": "25.5"})
    assert quotas.request.quota("alice", "c/1") == 25.5
    store.changed_elsewhere("clients/c1", {"producer_byte_rate": "not a number"})
    assert quotas.produce.quota("ANONYMOUS", "c1") is None
    asyncio.run(store.alter("users/<default>", {}, ["consumer_byte_rate"]))
    assert quotas.fetch.quota("anyone", "c1") is None
