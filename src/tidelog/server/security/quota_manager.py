"""Per-client quota accounting (Kafka's ``ClientQuotaManager``, ``ClientRequestQuotaManager`` and
``ControllerMutationQuotaManager``): one manager per quota key, measuring each client and answering how
long to throttle it. Pure and single-threaded: time comes in as ``now_ms``; nothing here knows sockets.

Invariants:

- Overrides are set per :class:`~.quota_entity.QuotaEntity` (:meth:`ClientQuotaManager.update_quota`).
  Which entity applies to a (user, client id) follows Kafka's precedence (``/config/users/<user>/clients/
  <client-id>`` first, ``/config/clients/<default>`` last).
- Usage is measured per *metric entity*, Kafka's (user, client-id) metric tags: with quotas set only by
  client id, every client id is measured on its own whatever its user; only by user, every user across
  its client ids; otherwise by whatever the most specific entity with a quota names (so a
  ``users/alice`` quota is shared by all of alice's client ids, while ``clients/<default>`` gives each
  client id its own budget). The levels in use only grow until restart, as in Kafka.
- A manager records nothing and answers 0 until a quota of its key was ever set (``enabled``): with no
  quota the per-request cost is one attribute check.
- A metric entity's sensor is dropped after an hour without a record (Kafka's
  ``InactiveSensorExpirationTimeSeconds``), swept at most once a minute, so idle clients cost nothing.
- Every throttle a manager hands out (> 0) is also recorded in its metric entity's ``throttle-time``
  average, which :meth:`ClientQuotaManager.metric_values` reads at scrape time with the measured rate
  (Kafka's ``throttle-time`` and ``byte-rate`` / ``request-time`` sensors); nothing else is kept for it.
- Byte rates and request time use a :class:`~.quota_rate.WindowedRate`; the request-time throttle is
  capped at one window (``quota.window.size.seconds``). Controller mutations use a
  :class:`~.quota_rate.TokenBucket`: a *strict* quota (new request versions, KIP-599) refuses a mutation
  while the bucket is negative and accepts any mutation while it is not; a *permissive* one accepts
  everything and throttles once negative.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

from .quota_entity import EntityName, QuotaEntity, QuotaKey
from .quota_rate import KAFKA_QUOTA_WINDOW, QuotaWindow, TokenBucket, WindowedAvg, WindowedRate

__all__ = [
    "ClientQuotaManager",
    "ControllerMutationQuota",
    "ControllerMutationQuotaManager",
    "RequestQuotaManager",
    "ThrottlingQuotaExceededError",
    "UNBOUNDED_MUTATION_QUOTA",
]

INACTIVE_SENSOR_EXPIRATION_MS: Final = 3_600_000
_SWEEP_INTERVAL_MS: Final = 60_000

_CLIENT_ID_LEVEL: Final = 1
_USER_LEVEL: Final = 2
_USER_CLIENT_ID_LEVEL: Final = 4

_DEFAULT: Final = EntityName(None)


class _Sensor:
    __slots__ = ("bucket", "last_record_ms", "quota", "rate", "throttle")

    def __init__(self, quota: float | None, rate: WindowedRate | None, bucket: TokenBucket | None) -> None:
        self.quota = quota
        self.rate = rate
        self.bucket = bucket
        self.throttle: WindowedAvg | None = None
        self.last_record_ms = 0


class ClientQuotaManager:
    """One quota key's overrides and per-client measurements (see the module invariants)."""

    def __init__(self, key: QuotaKey, window: QuotaWindow = KAFKA_QUOTA_WINDOW) -> None:
        self.key = key
        self.window = window
        self._overrides: dict[QuotaEntity, float] = {}
        self._levels = 0
        self.enabled = False
        """Whether a quota of this key was ever set (until restart, as Kafka's ``quotasEnabled``): ``_levels``
        is not 0. A plain attribute: every Produce and Fetch reads it (issue 17)."""
        self._sensors: dict[tuple[str, str], _Sensor] = {}
        self._next_sweep_ms = 0

    # -- configuration ---------------------------------------------------------------------------------

    def update_quota(self, entity: QuotaEntity, quota: float | None) -> None:
        """Set (or with None remove) ``entity``'s quota; measured clients pick it up at once. Removing a
        quota that was never set changes nothing (it does not turn the manager on)."""
        if quota is None and entity not in self._overrides:
            return
        if entity.user is not None:
            self._levels |= _USER_CLIENT_ID_LEVEL if entity.client_id is not None else _USER_LEVEL
        else:
            self._levels |= _CLIENT_ID_LEVEL
        self.enabled = True
        if quota is None:
            self._overrides.pop(entity, None)
        else:
            self._overrides[entity] = quota
        for tags, sensor in self._sensors.items():
            sensor.quota = self.quota_limit(*tags)

    def overrides(self) -> dict[QuotaEntity, float]:
        return dict(self._overrides)

    def quota(self, user: str, client_id: str) -> float | None:
        """The quota that applies to ``user`` with ``client_id`` (None: unlimited)."""
        return self.quota_limit(*self.metric_tags(user, client_id))

    def metric_tags(self, user: str, client_id: str) -> tuple[str, str]:
        """Kafka's ``quotaMetricTags``: the (user, client-id) this client is measured as."""
        levels = self._levels
        if levels in (0, _CLIENT_ID_LEVEL):
            return "", client_id
        if levels == _USER_LEVEL:
            return user, ""
        if levels == _USER_CLIENT_ID_LEVEL:
            return user, client_id
        o = self._overrides
        u, c = EntityName(user), EntityName(client_id)
        if QuotaEntity(u, c) in o or QuotaEntity(u, _DEFAULT) in o:
            return user, client_id
        if QuotaEntity(u, None) in o:
            return user, ""
        if QuotaEntity(_DEFAULT, c) in o or QuotaEntity(_DEFAULT, _DEFAULT) in o:
            return user, client_id
        if QuotaEntity(_DEFAULT, None) in o:
            return user, ""
        return "", client_id

    def quota_limit(self, user_tag: str, client_tag: str) -> float | None:
        """Kafka's ``DefaultQuotaCallback.quotaLimit`` for a metric entity."""
        o = self._overrides
        if not o:
            return None
        u, c = EntityName(user_tag), EntityName(client_tag)
        candidates: tuple[QuotaEntity, ...]
        if user_tag and client_tag:
            candidates = (
                QuotaEntity(u, c),
                QuotaEntity(u, _DEFAULT),
                QuotaEntity(_DEFAULT, c),
                QuotaEntity(_DEFAULT, _DEFAULT),
            )
        elif user_tag:
            candidates = (QuotaEntity(u, None), QuotaEntity(_DEFAULT, None))
        elif client_tag:
            candidates = (QuotaEntity(None, c), QuotaEntity(None, _DEFAULT))
        else:
            return None
        for entity in candidates:
            quota = o.get(entity)
            if quota is not None:
                return quota
        return None

    # -- measurement -----------------------------------------------------------------------------------

    def record_and_get_throttle_ms(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` for this client at ``now_ms``; how long to throttle it (0: within quota)."""
        if not self._levels:
            return 0
        sensor = self._sensor(user, client_id, now_ms)
        rate = sensor.rate
        assert rate is not None
        rate.record(value, now_ms)
        if sensor.quota is None:
            return 0
        throttle_ms = self._throttle_ms(rate.throttle_time_ms(sensor.quota, now_ms))
        if throttle_ms > 0:
            if sensor.throttle is None:
                sensor.throttle = WindowedAvg(self.window)
            sensor.throttle.record(throttle_ms, now_ms)
        return throttle_ms

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value (a throttled fetch sends nothing: Kafka's ``unrecordQuotaSensor``)."""
        if self._levels:
            rate = self._sensor(user, client_id, now_ms).rate
            assert rate is not None
            rate.record(-value, now_ms)

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """The most one request may carry without certain throttling (Kafka's ``getMaxValueInQuotaWindow``):
        ``quota * (samples - 1) * window``; None when unlimited."""
        if not self._levels:
            return None
        quota = self.quota(user, client_id)
        if quota is None:
            return None
        return quota * (self.window.samples - 1) * self.window.window_ms / 1000

    def measured(self, user: str, client_id: str, now_ms: int) -> float:
        """This client's current rate (0 when it is not measured)."""
        sensor = self._sensors.get(self.metric_tags(user, client_id))
        if sensor is None or sensor.rate is None:
            return 0.0
        return sensor.rate.measure(now_ms)

    def metric_values(self, now_ms: int) -> Iterator[tuple[str, str, float, float]]:
        """Every measured metric entity as (user tag, client-id tag, rate, average throttle ms): what
        Kafka's sensors of this quota show at ``now_ms``."""
        for (user, client_id), sensor in sorted(self._sensors.items()):
            rate = sensor.rate.measure(now_ms) if sensor.rate is not None else 0.0
            throttle = sensor.throttle.measure(now_ms) if sensor.throttle is not None else 0.0
            yield user, client_id, rate, throttle

    @property
    def sensor_count(self) -> int:
        return len(self._sensors)

    def _throttle_ms(self, throttle_ms: int) -> int:
        return throttle_ms

    def _new_sensor(self, quota: float | None) -> _Sensor:
        return _Sensor(quota, WindowedRate(self.window), None)

    def _sensor(self, user: str, client_id: str, now_ms: int) -> _Sensor:
        if now_ms >= self._next_sweep_ms:
            self._sweep(now_ms)
        tags = self.metric_tags(user, client_id)
        sensor = self._sensors.get(tags)
        if sensor is None:
            sensor = self._sensors[tags] = self._new_sensor(self.quota_limit(*tags))
        sensor.last_record_ms = now_ms
        return sensor

    def _sweep(self, now_ms: int) -> None:
        cutoff = now_ms - INACTIVE_SENSOR_EXPIRATION_MS
        for tags in [t for t, s in self._sensors.items() if s.last_record_ms < cutoff]:
            del self._sensors[tags]
        self._next_sweep_ms = now_ms + _SWEEP_INTERVAL_MS


class RequestQuotaManager(ClientQuotaManager):
    """``request_percentage``: handler time as a percentage of one thread; the throttle is capped at one
    quota window (Kafka's ``ClientRequestQuotaManager``)."""

    NANOS_TO_PERCENTAGE: Final = 100.0 / 1_000_000_000

    def __init__(self, window: QuotaWindow = KAFKA_QUOTA_WINDOW) -> None:
        super().__init__(QuotaKey.REQUEST_PERCENTAGE, window)

    def record_time_ns(self, user: str, client_id: str, elapsed_ns: int, now_ms: int) -> int:
        return self.record_and_get_throttle_ms(user, client_id, elapsed_ns * self.NANOS_TO_PERCENTAGE, now_ms)

    def _throttle_ms(self, throttle_ms: int) -> int:
        return min(throttle_ms, self.window.window_ms)


class ThrottlingQuotaExceededError(Exception):
    """A strict controller mutation quota refused a mutation (THROTTLING_QUOTA_EXCEEDED)."""

    def __init__(self, throttle_time_ms: int) -> None:
        super().__init__("The throttling quota has been exceeded.")
        self.throttle_time_ms = throttle_time_ms


class ControllerMutationQuota:
    """One request's view of its client's mutation quota (Kafka's ``ControllerMutationQuota``)."""

    def __init__(self, sensor: _Sensor | None, strict: bool, clock: Callable[[], int]) -> None:
        self._sensor = sensor
        self._strict = strict
        self._clock = clock
        self._last_throttle_ms = 0
        self._last_recorded_ms = 0

    @property
    def is_exceeded(self) -> bool:
        return self._strict and self._last_throttle_ms > 0

    def record(self, permits: float) -> None:
        """Take ``permits`` partition mutations; a strict quota raises :class:`ThrottlingQuotaExceededError`
        instead while the bucket is negative."""
        sensor = self._sensor
        if sensor is None or sensor.quota is None:
            return
        bucket = sensor.bucket
        assert bucket is not None
        now = self._clock()
        sensor.last_record_ms = now
        if self._strict:
            throttle = bucket.throttle_time_ms(sensor.quota, now)
            if throttle > 0:
                self._last_throttle_ms, self._last_recorded_ms = throttle, now
                raise ThrottlingQuotaExceededError(throttle)
            bucket.record(permits, sensor.quota, now)
        else:
            bucket.record(permits, sensor.quota, now)
            throttle = bucket.throttle_time_ms(sensor.quota, now)
            if throttle > 0:
                self._last_throttle_ms, self._last_recorded_ms = throttle, now

    def throttle_time_ms(self) -> int:
        """The throttle still due: the last one recorded, less the time since (a request may wait)."""
        if not self._last_throttle_ms:
            return 0
        return max(0, self._last_throttle_ms - (self._clock() - self._last_recorded_ms))


UNBOUNDED_MUTATION_QUOTA: Final = ControllerMutationQuota(None, False, lambda: 0)


class ControllerMutationQuotaManager(ClientQuotaManager):
    """``controller_mutation_rate``: partitions created or deleted per second, in a token bucket."""

    def __init__(self, window: QuotaWindow = KAFKA_QUOTA_WINDOW) -> None:
        super().__init__(QuotaKey.CONTROLLER_MUTATION_RATE, window)

    def _new_sensor(self, quota: float | None) -> _Sensor:
        return _Sensor(quota, None, TokenBucket(self.window))

    def quota_for(
        self, user: str, client_id: str, *, strict: bool, clock: Callable[[], int]
    ) -> ControllerMutationQuota:
        """A request's mutation quota: strict for request versions since KIP-599, else permissive."""
        if not self.enabled:
            return UNBOUNDED_MUTATION_QUOTA
        return ControllerMutationQuota(self._sensor(user, client_id, clock()), strict, clock)

    def record_and_get_throttle_ms(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        quota = self.quota_for(user, client_id, strict=True, clock=lambda: now_ms)
        try:
            quota.record(value)
        except ThrottlingQuotaExceededError as exc:
            return exc.throttle_time_ms
        return 0
