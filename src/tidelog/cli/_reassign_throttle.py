"""The replication throttles of ``tidelog reassign`` (``kafka-reassign-partitions.sh --throttle``).

Invariants (Kafka's ``ReassignPartitionsCommand``, 3.x):

- ``execute --throttle R`` sets, before the moves start, ``leader.replication.throttled.rate`` and
  ``follower.replication.throttled.rate`` = R on every broker a moving partition has now or will have
  (each broker's own BROKER resource, sent to that broker), and on each topic with a moving partition
  ``leader.replication.throttled.replicas`` = its moving partitions' current replicas and
  ``follower.replication.throttled.replicas`` = the replicas they are gaining (``partition:broker``).
  Partitions whose target equals their replicas are not throttled.
- ``verify`` clears them once no move of the plan is in progress (throttled or not, as Kafka's; not with
  ``--preserve-throttles``): the two rates on every live broker and the plan's target brokers, and the two
  topic configs of the plan's topics (IncrementalAlterConfigs DELETE); while any move is in progress it
  leaves them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sized

from tidelog.cli._common import ClientOptions, fail, out_console
from tidelog.cli._txn_wire import open_wire
from tidelog.server.replication_quota import (
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_REPLICAS,
    format_throttled_replicas,
)

__all__ = ["BROKER_THROTTLE_RATES", "clear_throttles", "set_throttles", "throttled_replicas"]

BROKER_THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
_TOPIC = 2
_BROKER = 4
_SET = 0
_DELETE = 1

Assignment = Mapping[tuple[str, int], tuple[int, ...]]


def throttled_replicas(current: Assignment, plan: Assignment) -> tuple[dict[str, dict[str, str]], list[int]]:
    """The topic configs (topic -> {key: value}) and the brokers (sorted) a throttled move sets."""
    leaders: dict[str, dict[int, list[int]]] = {}
    followers: dict[str, dict[int, list[int]]] = {}
    brokers: set[int] = set()
    for (topic, partition), target in sorted(plan.items()):
        replicas = current[(topic, partition)]
        if tuple(target) == tuple(replicas):
            continue
        leaders.setdefault(topic, {})[partition] = sorted(replicas)
        gaining = sorted(set(target) - set(replicas))
        if gaining:
            followers.setdefault(topic, {})[partition] = gaining
        brokers.update(replicas, target)
    configs = {
        topic: {
            LEADER_THROTTLED_REPLICAS: format_throttled_replicas(by_partition),
            FOLLOWER_THROTTLED_REPLICAS: format_throttled_replicas(followers.get(topic, {})),
        }
        for topic, by_partition in leaders.items()
    }
    return configs, sorted(brokers)


def set_throttles(
    client: ClientOptions,
    addresses: Mapping[int, str],
    current: Assignment,
    plan: Assignment,
    rate: int,
) -> None:
    """Set the rates on the moving partitions' brokers and the throttled replicas of their topics."""
    configs, brokers = throttled_replicas(current, plan)
    missing = [b for b in brokers if b not in addresses]
    if missing:
        fail(f"cannot throttle brokers {', '.join(map(str, missing))}: they are not alive")
    for broker in brokers:
        _alter(
            client, addresses[broker], _BROKER, str(broker), dict.fromkeys(BROKER_THROTTLE_RATES, str(rate))
        )
    for topic, values in sorted(configs.items()):
        _alter(client, None, _TOPIC, topic, dict(values))
    out_console.print(
        "Warning: You must run --verify periodically, until the reassignment completes, to ensure the"
        " throttle is removed."
    )
    out_console.print(f"The inter-broker throttle limit was set to {rate} B/s")


def clear_throttles(
    client: ClientOptions, addresses: Mapping[int, str], targets: Iterable[int], topics: Iterable[str]
) -> None:
    """Kafka's ``clearAllThrottles``: delete the rates on every live broker and on the plan's ``targets``
    (those down are named but skipped: they are not reachable), and the throttled replicas of ``topics``."""
    brokers = sorted(set(addresses) | set(targets))
    out_console.print(f"Clearing broker-level throttles on broker{_s(brokers)} {','.join(map(str, brokers))}")
    for broker in brokers:
        if broker in addresses:
            _alter(client, addresses[broker], _BROKER, str(broker), dict.fromkeys(BROKER_THROTTLE_RATES))
    names = sorted(set(topics))
    out_console.print(f"Clearing topic-level throttles on topic{_s(names)} {','.join(names)}")
    topic_keys = dict.fromkeys((LEADER_THROTTLED_REPLICAS, FOLLOWER_THROTTLED_REPLICAS))
    for topic in names:
        _alter(client, None, _TOPIC, topic, topic_keys)


def _s(items: Sized) -> str:
    return "" if len(items) == 1 else "s"


def _alter(
    client: ClientOptions,
    address: str | None,
    resource_type: int,
    name: str,
    configs: Mapping[str, str | None],
) -> None:
    """IncrementalAlterConfigs: SET each key with a value, DELETE each without."""
    from tidelog.client.wire import WireError
    from tidelog.protocol.errors import ErrorCode
    from tidelog.protocol.messages import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

    entry = IncrementalAlterConfigsRequest.AlterableConfig
    request = IncrementalAlterConfigsRequest(
        resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=resource_type,
                resource_name=name,
                configs=[
                    entry(name=key, value=value, config_operation=_DELETE if value is None else _SET)
                    for key, value in configs.items()
                ],
            )
        ]
    )
    kind = "broker" if resource_type == _BROKER else "topic"
    with open_wire(client, address) as wire:
        try:
            response = wire.call(request, expect=IncrementalAlterConfigsResponse)
        except WireError as exc:
            fail(f"cannot set the throttle configs of {kind} {name}: {exc}")
    result = response.responses[0]
    if result.error_code != ErrorCode.NONE:
        fail(
            f"cannot set the throttle configs of {kind} {name}: {ErrorCode.name_of(result.error_code)}:"
            f" {result.error_message or ''}".rstrip(": ")
        )
