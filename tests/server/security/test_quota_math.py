"""Kafka's quota arithmetic with an injected clock: the windowed rate, the throttle time formula
``(observed - quota) / quota * window``, the token bucket, the precedence of quota entities and which
metric entity a client is measured as."""

from __future__ import annotations

import pytest

from tidelog.server.security.quota_entity import (
    EntityName,
    QuotaEntity,
    QuotaKey,
    precedence,
    quota_value_error,
)
from tidelog.server.security.quota_manager import (
    ClientQuotaManager,
    ControllerMutationQuotaManager,
    RequestQuotaManager,
    ThrottlingQuotaExceededError,
)
from tidelog.server.security.quota_rate import QuotaWindow, TokenBucket, WindowedAvg, WindowedRate

T0 = 1_700_000_000_000
KAFKA = QuotaWindow(11, 1000)


def test_a_fresh_rate_is_spread_over_samples_minus_one_windows() -> None:
    rate = WindowedRate(KAFKA)
    rate.record(5000, T0)
    # one sample, 0 ms old: the window counts as 10 full windows (10 s)
    assert rate.window_size_ms(T0) == 10_000
    assert rate.measure(T0) == 500.0
    rate.record(5000, T0 + 500)
    assert rate.window_size_ms(T0 + 500) == 10_500
    assert rate.measure(T0 + 500) == pytest.approx(10_000 / 10.5)


def test_throttle_time_is_kafkas_formula() -> None:
    rate = WindowedRate(KAFKA)
    rate.record(30_000, T0)
    # observed 3000/s over 10 s against a quota of 1000/s: (3000 - 1000) / 1000 * 10_000 = 20 s
    assert rate.throttle_time_ms(1000, T0) == 20_000
    assert rate.throttle_time_ms(3000, T0) == 0
    # after a 20 s wait the rate is back at the quota exactly when nothing else came (O*W/(W+X) = T)
    rate2 = WindowedRate(KAFKA)
    rate2.record(1500, T0)
    assert rate2.throttle_time_ms(100, T0) == 5000  # (150 - 100) / 100 * 10_000


def test_samples_roll_and_expire() -> None:
    rate = WindowedRate(QuotaWindow(3, 1000))
    rate.record(100, T0)
    rate.record(100, T0 + 1000)  # a new sample
    rate.record(100, T0 + 2000)
    assert rate.measure(T0 + 2000) == pytest.approx(300 / 2.0)
    # three windows of silence after the last event: everything is purged
    assert rate.measure(T0 + 5000) == 0.0
    # a sample older than samples * window since its last event is reset, newer ones are kept
    rate.record(100, T0 + 6000)
    rate.record(100, T0 + 9500)
    assert rate.measure(T0 + 9500) == pytest.approx(100 / 2.0)


def test_token_bucket_starts_full_refills_and_throttles_until_zero() -> None:
    bucket = TokenBucket(KAFKA)
    assert bucket.tokens(2.0, T0) == 22.0  # burst: 11 windows * 1 s * 2 per second
    bucket.record(30, 2.0, T0)
    assert bucket.tokens(2.0, T0) == -8.0
    assert bucket.throttle_time_ms(2.0, T0) == 4000  # 8 tokens at 2 per second
    assert bucket.throttle_time_ms(2.0, T0 + 3000) == 1000
    assert bucket.throttle_time_ms(2.0, T0 + 4000) == 0
    assert bucket.tokens(2.0, T0 + 60_000) == 22.0  # never above the burst


def test_precedence_is_kafkas_order() -> None:
    paths = [e.path for e in precedence("alice", "c1")]
    assert paths == [
        "users/alice/clients/c1",
        "users/alice/clients/<default>",
        "users/alice",
        "users/<default>/clients/c1",
        "users/<default>/clients/<default>",
        "users/<default>",
        "clients/c1",
        "clients/<default>",
    ]
    assert [QuotaEntity.from_path(p) for p in paths] == list(precedence("alice", "c1"))
    assert QuotaEntity.of(user="a b/c").path == "users/a%20b%2Fc"
    assert QuotaEntity.from_path("users/a%20b%2Fc") == QuotaEntity.of(user="a b/c")
    assert QuotaEntity.from_path("topics/x") is None


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        ("producer_byte_rate", 1024.0, None),
        ("request_percentage", 12.5, None),
        ("controller_mutation_rate", 0.5, None),
        ("producer_byte_rate", 0.0, "Quota producer_byte_rate must be greater than 0"),
        ("consumer_byte_rate", -1.0, "Quota consumer_byte_rate must be greater than 0"),
        ("consumer_byte_rate", 1.5, "consumer_byte_rate cannot be a fractional value."),
        ("connection_rate", 1.0, "Invalid configuration key connection_rate"),
    ],
)
def test_quota_values_are_validated_as_kafka_does(key: str, value: float, error: str | None) -> None:
    assert quota_value_error(key, value) == error


def test_the_most_specific_quota_applies() -> None:
    m = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE, KAFKA)
    m.update_quota(QuotaEntity.of(default_client_id=True), 100)
    m.update_quota(QuotaEntity.of(client_id="c1"), 200)
    assert m.quota("ANONYMOUS", "c1") == 200
    assert m.quota("ANONYMOUS", "c2") == 100
    m.update_quota(QuotaEntity.of(default_user=True), 300)
    assert m.quota("alice", "c1") == 300  # any user level beats every client-id level
    m.update_quota(QuotaEntity.of(user="alice"), 400)
    assert m.quota("alice", "c1") == 400
    assert m.quota("bob", "c1") == 300
    m.update_quota(QuotaEntity.of(user="alice", default_client_id=True), 500)
    assert m.quota("alice", "c9") == 500
    m.update_quota(QuotaEntity.of(user="alice", client_id="c1"), 600)
    assert m.quota("alice", "c1") == 600
    m.update_quota(QuotaEntity.of(user="alice", client_id="c1"), None)
    assert m.quota("alice", "c1") == 500


def test_metric_entities_follow_the_levels_in_use() -> None:
    m = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE, KAFKA)
    assert not m.enabled
    assert m.record_and_get_throttle_ms("alice", "c1", 10**9, T0) == 0  # no quota ever set: not measured
    assert m.sensor_count == 0
    m.update_quota(QuotaEntity.of(user="alice"), 1000)
    assert m.metric_tags("alice", "c1") == ("alice", "")
    # a user quota is shared by the user's client ids
    assert m.record_and_get_throttle_ms("alice", "c1", 5000, T0) == 0
    assert m.record_and_get_throttle_ms("alice", "c2", 10_000, T0) == 5000  # 1500/s over 10 s
    m.update_quota(QuotaEntity.of(default_client_id=True), 50)
    assert m.metric_tags("bob", "c1") == ("", "c1")  # no user quota for bob: measured by client id
    assert m.metric_tags("alice", "c1") == ("alice", "")


def test_each_client_id_has_its_own_default_budget_and_the_other_keeps_its_rate() -> None:
    m = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE, KAFKA)
    m.update_quota(QuotaEntity.of(client_id="slow"), 1000)
    assert m.record_and_get_throttle_ms("ANONYMOUS", "slow", 20_000, T0) == 10_000
    assert m.record_and_get_throttle_ms("ANONYMOUS", "fast", 10**7, T0) == 0
    assert m.measured("ANONYMOUS", "fast", T0) == 10**6


def test_unrecord_takes_a_value_back_and_max_value_in_window() -> None:
    m = ClientQuotaManager(QuotaKey.CONSUMER_BYTE_RATE, KAFKA)
    m.update_quota(QuotaEntity.of(client_id="c"), 1000)
    assert m.max_value_in_window("ANONYMOUS", "c") == 10_000
    assert m.max_value_in_window("ANONYMOUS", "other") is None
    assert m.record_and_get_throttle_ms("ANONYMOUS", "c", 20_000, T0) == 10_000
    m.unrecord("ANONYMOUS", "c", 20_000, T0)
    assert m.record_and_get_throttle_ms("ANONYMOUS", "c", 1000, T0) == 0


def test_idle_sensors_expire_after_an_hour() -> None:
    m = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE, KAFKA)
    m.update_quota(QuotaEntity.of(default_client_id=True), 1000)
    for i in range(100):
        m.record_and_get_throttle_ms("ANONYMOUS", f"c{i}", 1, T0)
    assert m.sensor_count == 100
    m.record_and_get_throttle_ms("ANONYMOUS", "c0", 1, T0 + 3_599_000)
    assert m.sensor_count == 100
    m.record_and_get_throttle_ms("ANONYMOUS", "c0", 1, T0 + 3_660_000)  # swept at most once a minute
    assert m.sensor_count == 1


def test_request_throttle_is_capped_at_one_window() -> None:
    m = RequestQuotaManager(KAFKA)
    m.update_quota(QuotaEntity.of(client_id="c"), 10.0)  # 10 % of a thread
    # 5 s of handler time at once: 50 %/s over 10 s windows, throttle (50-10)/10*10 s = 40 s, capped at 1 s
    assert m.record_time_ns("ANONYMOUS", "c", 5_000_000_000, T0) == 1000
    assert m.record_time_ns("ANONYMOUS", "other", 5_000_000_000, T0) == 0


def test_strict_mutation_quota_refuses_only_once_the_bucket_is_negative() -> None:
    now = [T0]
    m = ControllerMutationQuotaManager(KAFKA)
    m.update_quota(QuotaEntity.of(client_id="admin"), 1.0)  # burst 11 partitions
    quota = m.quota_for("ANONYMOUS", "admin", strict=True, clock=lambda: now[0])
    quota.record(5)
    quota.record(10)  # accepted: the bucket was not negative (6 left), now -4
    with pytest.raises(ThrottlingQuotaExceededError) as refused:
        quota.record(1)
    assert refused.value.throttle_time_ms == 4000
    assert quota.is_exceeded
    now[0] += 1500
    assert quota.throttle_time_ms() == 2500
    now[0] += 2500
    later = m.quota_for("ANONYMOUS", "admin", strict=True, clock=lambda: now[0])
    later.record(1)  # back at zero: accepted
    assert later.throttle_time_ms() == 0


def test_permissive_mutation_quota_accepts_and_throttles() -> None:
    m = ControllerMutationQuotaManager(KAFKA)
    m.update_quota(QuotaEntity.of(client_id="admin"), 2.0)
    quota = m.quota_for("ANONYMOUS", "admin", strict=False, clock=lambda: T0)
    quota.record(30)
    quota.record(2)
    assert not quota.is_exceeded
    assert quota.throttle_time_ms() == 5000  # 10 tokens short at 2 per second
    unbounded = ControllerMutationQuotaManager(KAFKA).quota_for("u", "c", strict=True, clock=lambda: T0)
    unbounded.record(10**6)
    assert unbounded.throttle_time_ms() == 0


@pytest.mark.parametrize(
    ("args", "entity"),
    [
        (["--entity-type", "users", "--entity-name", "alice"], [("user", "alice", False)]),
        (["--entity-type", "clients", "--entity-default"], [("client-id", None, True)]),
        (["--entity-type", "users"], [("user", None, False)]),
        (
            ["--entity-type", "users", "--entity-default", "--entity-type", "clients", "--entity-name", "c1"],
            [("user", None, True), ("client-id", "c1", False)],
        ),
        (
            ["--entity-type=users", "--entity-name=alice", "--entity-type", "clients", "--entity-default"],
            [("user", "alice", False), ("client-id", None, True)],
        ),
    ],
)
def test_cli_entities_pair_names_and_defaults_with_the_type_before_them(
    args: list[str], entity: list[tuple[str, str | None, bool]]
) -> None:
    from tidelog.cli.configs_quotas import entity_option_order, parse_entity

    types = tuple(
        a.split("=")[-1] if "=" in a else args[i + 1]
        for i, a in enumerate(args)
        if a.startswith("--entity-type")
    )
    names = tuple(
        a.split("=")[-1] if "=" in a else args[i + 1]
        for i, a in enumerate(args)
        if a.startswith("--entity-name")
    )
    assert parse_entity(entity_option_order(args), types, names, None, None, False, False) == entity


def test_throttle_time_average_is_kept_per_metric_entity_for_the_scrape() -> None:
    window = QuotaWindow(2, 1000)
    manager = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE, window)
    manager.update_quota(QuotaEntity(None, EntityName("slow")), 1000)
    first = manager.record_and_get_throttle_ms("alice", "slow", 3000, T0)
    second = manager.record_and_get_throttle_ms("alice", "slow", 1000, T0 + 10)
    assert first == 2000
    assert second == 2990
    manager.record_and_get_throttle_ms("bob", "fast", 500, T0 + 10)
    assert list(manager.metric_values(T0 + 10)) == [
        ("", "fast", 500.0, 0.0),
        ("", "slow", pytest.approx(4000 / 1.01), (first + second) / 2),
    ]
    # both windows expired: nothing measured, nothing throttled
    assert list(manager.metric_values(T0 + 2010)) == [("", "fast", 0.0, 0.0), ("", "slow", 0.0, 0.0)]


def test_windowed_avg_is_the_mean_of_live_samples() -> None:
    avg = WindowedAvg(QuotaWindow(2, 1000))
    assert avg.measure(T0) == 0.0
    avg.record(10, T0)
    avg.record(30, T0 + 1500)
    assert avg.measure(T0 + 1500) == 20.0
    assert avg.measure(T0 + 2500) == 30.0  # the first sample is 2 windows old
