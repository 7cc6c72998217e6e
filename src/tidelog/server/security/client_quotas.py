"""The broker's client quotas: one manager per quota key, kept in step with the user and client entity
configs (:mod:`tidelog.server.entity_configs`).

Invariants:

- Every quota key stored on an entity (``producer_byte_rate``, ``consumer_byte_rate``,
  ``request_percentage``, ``controller_mutation_rate``) is the override of that entity in the manager of
  that key; a key absent from the entity removes its override. Other keys of an entity (SCRAM
  credentials) are not looked at.
- :meth:`ClientQuotas.attach` reads every entity once and then follows each change the store reports
  (this broker's own AlterClientQuotas, or another broker's through ZooKeeper's change notifications), so
  a quota set through any broker applies on every broker, each enforcing it on its own traffic as Kafka
  does (a quota is per broker).
- :meth:`ClientQuotas.metric_values` is what Kafka's quota sensors show, read at scrape time: per
  measured client, ``throttle-time`` and ``byte-rate`` of ``Produce`` and ``Fetch``, ``throttle-time``
  and ``request-time`` of ``Request`` (the MBean types and attributes of Kafka's
  ``kafka.server:type=Produce,user=..,client-id=..``). Controller mutations are not shown.
- A stored value that does not parse as a positive number is ignored (logged), never a crash.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

from tidelog.server.config import BrokerConfig
from tidelog.server.entity_configs import EntityConfigs

from .quota_entity import QuotaEntity, QuotaKey, quota_value_error
from .quota_manager import ClientQuotaManager, ControllerMutationQuotaManager, RequestQuotaManager
from .quota_rate import KAFKA_QUOTA_WINDOW, QuotaWindow

__all__ = ["ClientQuotas", "QuotaMetricValue", "client_quotas_for"]

QuotaMetricValue = tuple[str, str, str, str, float]
"""(MBean type, attribute, user tag, client-id tag, value), e.g. ``("Produce", "throttle-time", "", "slow", 12.5)``."""

log = logging.getLogger("tidelog.quotas")


class ClientQuotas:
    """The produce, fetch, request and controller mutation quota managers of one broker."""

    def __init__(
        self, window: QuotaWindow = KAFKA_QUOTA_WINDOW, controller_window: QuotaWindow = KAFKA_QUOTA_WINDOW
    ) -> None:
        self.produce = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE, window)
        self.fetch = ClientQuotaManager(QuotaKey.CONSUMER_BYTE_RATE, window)
        self.request = RequestQuotaManager(window)
        self.controller_mutation = ControllerMutationQuotaManager(controller_window)
        self._by_key: dict[str, ClientQuotaManager] = {
            QuotaKey.PRODUCER_BYTE_RATE: self.produce,
            QuotaKey.CONSUMER_BYTE_RATE: self.fetch,
            QuotaKey.REQUEST_PERCENTAGE: self.request,
            QuotaKey.CONTROLLER_MUTATION_RATE: self.controller_mutation,
        }
        self.store: EntityConfigs | None = None

    def metric_values(self, now_ms: int) -> Iterator[QuotaMetricValue]:
        """Kafka's quota sensors of every measured client at ``now_ms`` (see the module invariants)."""
        for resource, manager, rate_name in (
            ("Produce", self.produce, "byte-rate"),
            ("Fetch", self.fetch, "byte-rate"),
            ("Request", self.request, "request-time"),
        ):
            for user, client_id, rate, throttle in manager.metric_values(now_ms):
                yield resource, "throttle-time", user, client_id, throttle
                yield resource, rate_name, user, client_id, rate

    def attach(self, store: EntityConfigs) -> None:
        """Take every quota in ``store`` and follow its changes."""
        self.store = store
        for path, configs in store.all().items():
            self.apply(path, configs)
        store.subscribe(lambda path: self.apply(path, store.get(path)))

    def apply_all(self) -> None:
        """Take every quota of the attached store again (after a cluster member's first load)."""
        if self.store is not None:
            for path, configs in self.store.all().items():
                self.apply(path, configs)

    def apply(self, path: str, configs: Mapping[str, str]) -> None:
        """Make the managers hold exactly the quotas of ``configs`` for the entity at ``path``."""
        entity = QuotaEntity.from_path(path)
        if entity is None:
            return
        for key, manager in self._by_key.items():
            raw = configs.get(key)
            value: float | None = None
            if raw is not None:
                try:
                    value = float(raw)
                except ValueError:
                    value = None
                if value is None or quota_value_error(key, value) is not None:
                    log.warning("ignoring %s=%r of %s: not a valid quota", key, raw, path)
                    value = None
            manager.update_quota(entity, value)


def client_quotas_for(config: BrokerConfig, store: EntityConfigs) -> ClientQuotas:
    """A broker's quotas: windows from ``quota.window.*`` and ``controller.quota.window.*``, overrides from
    ``store``."""
    quotas = ClientQuotas(
        QuotaWindow(config.quota_window_num, config.quota_window_size_seconds * 1000),
        QuotaWindow(config.controller_quota_window_num, config.controller_quota_window_size_seconds * 1000),
    )
    quotas.attach(store)
    return quotas
