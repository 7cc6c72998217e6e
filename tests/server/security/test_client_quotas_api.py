"""DescribeClientQuotas / AlterClientQuotas through the broker's routes, and quota enforcement of user
quotas (a request context carrying the authenticated principal) and of controller mutations, in process."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from tests.server.inprocess import ctx, handle, make_broker

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    ApiKey,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    ProduceRequest,
)
from tidelog.server.broker import Broker
from tidelog.server.dispatch import KafkaPrincipal, RequestContext


def _in_loop(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


E = AlterClientQuotasRequest.EntityData
Op = AlterClientQuotasRequest.OpData
C = DescribeClientQuotasRequest.ComponentData
EXACT, DEFAULT, SPECIFIED = 0, 1, 2


async def _answer(broker: Broker, context: RequestContext, request: Any) -> Any:
    result = handle(broker, context, request)
    return await result if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future) else result


async def alter(
    broker: Broker, *entries: tuple[list[E], list[Op]], validate_only: bool = False
) -> list[tuple[int, str | None]]:
    request = AlterClientQuotasRequest(
        entries=[AlterClientQuotasRequest.EntryData(entity=e, ops=o) for e, o in entries],
        validate_only=validate_only,
    )
    response: AlterClientQuotasResponse = await _answer(broker, ctx(ApiKey.ALTER_CLIENT_QUOTAS, 1), request)
    return [(e.error_code, e.error_message) for e in response.entries]


async def describe(broker: Broker, *components: C, strict: bool = False) -> Any:
    request = DescribeClientQuotasRequest(components=list(components), strict=strict)
    response: DescribeClientQuotasResponse = await _answer(
        broker, ctx(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1), request
    )
    if response.entries is None:
        return response.error_code, response.error_message
    return sorted(
        (
            (
                tuple((d.entity_type, d.entity_name) for d in e.entity),
                tuple((v.key, v.value) for v in e.values),
            )
            for e in response.entries
        ),
        key=repr,
    )


@_in_loop
async def test_alter_then_describe_with_every_match_type(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    assert (
        await alter(
            broker,
            ([E(entity_type="client-id", entity_name="c1")], [Op(key="producer_byte_rate", value=1024)]),
            ([E(entity_type="client-id", entity_name=None)], [Op(key="consumer_byte_rate", value=2048)]),
            ([E(entity_type="user", entity_name="alice")], [Op(key="request_percentage", value=12.5)]),
            (
                [E(entity_type="user", entity_name="alice"), E(entity_type="client-id", entity_name="c1")],
                [Op(key="controller_mutation_rate", value=2)],
            ),
        )
        == [(0, None)] * 4
    )
    c1 = ((("client-id", "c1"),), (("producer_byte_rate", 1024.0),))
    default_client = ((("client-id", None),), (("consumer_byte_rate", 2048.0),))
    alice = ((("user", "alice"),), (("request_percentage", 12.5),))
    alice_c1 = ((("user", "alice"), ("client-id", "c1")), (("controller_mutation_rate", 2.0),))
    assert await describe(broker) == sorted([c1, default_client, alice, alice_c1], key=repr)
    assert await describe(broker, C(entity_type="client-id", match_type=EXACT, match="c1")) == sorted(
        [c1, alice_c1], key=repr
    )
    assert await describe(broker, C(entity_type="client-id", match_type=EXACT, match="c1"), strict=True) == [
        c1
    ]
    assert await describe(broker, C(entity_type="client-id", match_type=DEFAULT, match=None)) == [
        default_client
    ]
    assert await describe(
        broker, C(entity_type="client-id", match_type=SPECIFIED, match=None), strict=True
    ) == sorted([c1, default_client], key=repr)
    assert await describe(
        broker,
        C(entity_type="user", match_type=SPECIFIED, match=None),
        C(entity_type="client-id", match_type=SPECIFIED, match=None),
    ) == [alice_c1]
    # the entity store keeps them durably: a broker started again on the same log dir has them
    broker.logs.shutdown(broker.clock.now_ms())
    again = make_broker(tmp_path)
    assert again.client_quotas.produce.quota("ANONYMOUS", "c1") == 1024
    assert again.client_quotas.fetch.quota("ANONYMOUS", "other") == 2048
    assert await describe(again, C(entity_type="user", match_type=EXACT, match="alice"), strict=True) == [
        alice
    ]
    # removing the last key removes the entity
    assert await alter(
        again, ([E(entity_type="client-id", entity_name="c1")], [Op(key="producer_byte_rate", remove=True)])
    ) == [(0, None)]
    assert again.client_quotas.produce.quota("ANONYMOUS", "c1") is None
    assert c1 not in await describe(again)
    again.logs.shutdown(again.clock.now_ms())


@pytest.mark.parametrize(
    ("entity", "ops", "message"),
    [
        ([], [Op(key="producer_byte_rate", value=1)], "Invalid empty client quota entity"),
        (
            [E(entity_type="user", entity_name="a"), E(entity_type="user", entity_name="b")],
            [Op(key="producer_byte_rate", value=1)],
            "Invalid client quota entity, duplicate entity entry user",
        ),
        ([E(entity_type="group", entity_name="g")], [], "Unhandled client quota entity type: group"),
        ([E(entity_type="user", entity_name="")], [], "Empty user not supported"),
        (
            [E(entity_type="user", entity_name="a")],
            [Op(key="bogus", value=1)],
            "Invalid configuration key bogus",
        ),
        (
            [E(entity_type="user", entity_name="a")],
            [Op(key="producer_byte_rate", value=-5)],
            "Quota producer_byte_rate must be greater than 0",
        ),
        (
            [E(entity_type="user", entity_name="a")],
            [Op(key="consumer_byte_rate", value=10.5)],
            "consumer_byte_rate cannot be a fractional value.",
        ),
        (
            [E(entity_type="user", entity_name="a")],
            [Op(key="request_percentage", value=5), Op(key="request_percentage", value=6)],
            "Duplicate quota key request_percentage not updating quota for this entity",
        ),
    ],
)
@_in_loop
async def test_alter_refuses_what_kafka_refuses(
    tmp_path: Path, entity: list[E], ops: list[Op], message: str
) -> None:
    broker = make_broker(tmp_path)
    good = ([E(entity_type="client-id", entity_name="ok")], [Op(key="producer_byte_rate", value=10)])
    assert await alter(broker, (entity, ops), good) == [(ErrorCode.INVALID_REQUEST, message), (0, None)]
    assert await describe(broker) == [((("client-id", "ok"),), (("producer_byte_rate", 10.0),))]
    broker.logs.shutdown(broker.clock.now_ms())


@_in_loop
async def test_validate_only_and_bad_filters_change_nothing(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    entry = ([E(entity_type="client-id", entity_name="c")], [Op(key="producer_byte_rate", value=10)])
    assert await alter(broker, entry, validate_only=True) == [(0, None)]
    assert await describe(broker) == []
    assert not broker.client_quotas.produce.enabled
    assert await describe(
        broker, C(entity_type="user", match_type=SPECIFIED), C(entity_type="user", match_type=SPECIFIED)
    ) == (ErrorCode.INVALID_REQUEST, "Duplicate user filter component entity type")
    assert await describe(broker, C(entity_type="topic", match_type=SPECIFIED)) == (
        ErrorCode.UNSUPPORTED_VERSION,
        "Custom entity type 'topic' not supported",
    )
    broker.logs.shutdown(broker.clock.now_ms())


def _produce_request(topic: str, payload_bytes: int) -> ProduceRequest:
    # a payload the handler refuses (not a record batch) still counts: the quota measures request bytes
    data = ProduceRequest.PartitionProduceData(index=0, records=b"")
    return ProduceRequest(
        acks=1,
        timeout_ms=1000,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[data])],
    )


@_in_loop
async def test_a_user_quota_throttles_that_users_produces_across_client_ids(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    assert await alter(
        broker, ([E(entity_type="user", entity_name="alice")], [Op(key="producer_byte_rate", value=1000)])
    ) == [(0, None)]

    def as_user(name: str, client_id: str, size: int) -> RequestContext:
        context = ctx(ApiKey.PRODUCE, 9, client_id=client_id)
        context.principal = KafkaPrincipal("User", name)
        context.request_size = size
        return context

    first = await _answer(broker, as_user("alice", "c1", 6000), _produce_request("t", 0))
    assert first.throttle_time_ms == 0  # 6000 B over the 10 s minimum window: 600 B/s
    second = await _answer(broker, as_user("alice", "c2", 6000), _produce_request("t", 0))
    # the same user from another client id: 12000 B / 10 s = 1200 B/s, (1200-1000)/1000 * 10 s = 2 s
    assert 1900 <= second.throttle_time_ms <= 2100
    other = await _answer(broker, as_user("bob", "c1", 60_000), _produce_request("t", 0))
    assert other.throttle_time_ms == 0
    broker.logs.shutdown(broker.clock.now_ms())


def _create(*names: str, partitions: int) -> CreateTopicsRequest:
    return CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(name=n, num_partitions=partitions, replication_factor=1)
            for n in names
        ],
        timeout_ms=5000,
    )


@_in_loop
async def test_controller_mutation_rate_refuses_a_burst_of_creations(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    assert await alter(
        broker,
        ([E(entity_type="client-id", entity_name="admin")], [Op(key="controller_mutation_rate", value=1)]),
    ) == [(0, None)]
    create = ctx(ApiKey.CREATE_TOPICS, 6, client_id="admin")
    # burst of 11 partitions: 8 + 8 are taken (the bucket was not negative yet), the third is refused
    response = await _answer(broker, create, _create("q1", "q2", "q3", partitions=8))
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("q1", 0),
        ("q2", 0),
        ("q3", ErrorCode.THROTTLING_QUOTA_EXCEEDED),
    ]
    assert response.topics[2].error_message == "The throttling quota has been exceeded."
    assert (
        0 < response.throttle_time_ms <= 5000
    )  # 5 tokens short at 1 per second, less the time creating took
    assert broker.metadata.topic("q3") is None
    # other clients are not limited; old versions are throttled but never refused (permissive)
    other = await _answer(broker, ctx(ApiKey.CREATE_TOPICS, 6, client_id="x"), _create("x1", partitions=50))
    assert other.topics[0].error_code == 0
    assert other.throttle_time_ms == 0
    old = await _answer(broker, ctx(ApiKey.CREATE_TOPICS, 5, client_id="admin"), _create("q4", partitions=1))
    assert old.topics[0].error_code == 0
    assert old.throttle_time_ms > 0
    more = await _answer(
        broker,
        ctx(ApiKey.CREATE_PARTITIONS, 3, client_id="admin"),
        CreatePartitionsRequest(
            topics=[CreatePartitionsRequest.CreatePartitionsTopic(name="q1", count=9, assignments=None)],
            timeout_ms=5000,
        ),
    )
    assert more.results[0].error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    delete = await _answer(
        broker,
        ctx(ApiKey.DELETE_TOPICS, 5, client_id="admin"),
        DeleteTopicsRequest(topic_names=["q1"], timeout_ms=5000),
    )
    assert delete.responses[0].error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert broker.metadata.topic("q1") is not None
    broker.logs.shutdown(broker.clock.now_ms())
