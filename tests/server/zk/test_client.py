"""tidelog.server.zk against a real ZooKeeper (Debian's, through tidelog.testing.ZooKeeper): Kafka's znodes
and JSON, broker registration and epochs, controller election and fencing, conditional partition-state
writes, session expiry, chroot, producer-id blocks, configs, topic deletion."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kazoo.client import KazooClient

from tidelog.protocol import TopicPartition
from tidelog.server.zk import (
    BadVersion,
    BrokerIdInUseError,
    BrokerRegistration,
    ControllerEpoch,
    ControllerMovedError,
    Endpoint,
    KafkaZkClient,
    LeaderAndIsr,
    SessionState,
    TopicAlreadyMarkedForDeletionError,
    TopicExistsError,
    ZkSessionExpiredError,
)
from tidelog.testing import ZooKeeper

T = TypeVar("T")
_chroots = itertools.count()
TP0 = TopicPartition("orders", 0)


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    base = tmp_path_factory.mktemp("zk")
    with ZooKeeper(data_dir=base / "data", run_dir=base / "run") as server:
        yield server


@pytest.fixture
def connect(zk_server: ZooKeeper, request: pytest.FixtureRequest) -> str:
    """A connect string with a chroot of this test's own: tests share the server, not their znodes."""
    return f"{zk_server.connect_string}/tests/{request.node.name.replace('[', '_').replace(']', '')}-{next(_chroots)}"


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, 60))


async def _client(connect: str, session_timeout_ms: int = 10_000) -> KafkaZkClient:
    client = await KafkaZkClient.connect(connect, session_timeout_ms=session_timeout_ms)
    await client.create_top_level_paths()
    return client


def _registration(broker_id: int, port: int = 9092) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id, (Endpoint("PLAINTEXT", "127.0.0.1", port, "PLAINTEXT"),), timestamp_ms=1700000000000
    )


def _raw(zk: ZooKeeper) -> KazooClient:
    client = KazooClient(hosts=zk.connect_string)
    client.start(timeout=15)
    return client


async def _next(queue: asyncio.Queue[T]) -> T:
    return await asyncio.wait_for(queue.get(), 20)


# ---- chroot and layout --------------------------------------------------------------------------------


def test_a_missing_chroot_is_created_and_znodes_are_kafkas(zk_server: ZooKeeper, connect: str) -> None:
    chroot = connect[len(zk_server.connect_string) :]

    async def scenario() -> int:
        client = await _client(connect)
        try:
            return await client.register_broker(_registration(1))
        finally:
            await client.close()

    epoch = run(scenario())
    raw = _raw(zk_server)
    try:
        assert sorted(raw.get_children(chroot)) == [
            "admin",
            "brokers",
            "config",
            "isr_change_notification",
            "latest_producer_id_block",
            "log_dir_event_notification",  # issue 15: a broker's failed log dir, as in Kafka
        ]
        assert sorted(raw.get_children(f"{chroot}/config")) == [
            "brokers",
            "changes",
            "clients",
            "ips",
            "topics",
            "users",
        ]
        assert raw.exists(f"{chroot}/brokers/ids/1") is None  # ephemeral: gone with the closed session
        assert epoch > 0
    finally:
        raw.stop()
        raw.close()


# ---- brokers ----------------------------------------------------------------------------------------------


def test_register_broker_returns_the_czxid_as_epoch_and_refuses_a_taken_id(
    zk_server: ZooKeeper, connect: str
) -> None:
    async def scenario() -> None:
        first, second = await _client(connect), await _client(connect)
        try:
            epoch = await first.register_broker(_registration(1))
            assert await first.register_broker(_registration(1)) == epoch  # our own node: same epoch
            with pytest.raises(BrokerIdInUseError, match=r"broker.id 1 is already registered .*NODE_EXISTS"):
                await second.register_broker(_registration(1, port=9093))
            live = await second.get_live_brokers()
            assert list(live) == [1]
            assert live[1].broker_epoch == epoch
            assert live[1].registration == _registration(1)
            raw = json.loads((await second.session.get("/brokers/ids/1") or (b"", None))[0])
            assert raw["endpoints"] == ["PLAINTEXT://127.0.0.1:9092"]
            assert (raw["version"], raw["host"], raw["port"]) == (5, "127.0.0.1", 9092)
            await first.close()
            second_epoch = await second.register_broker(_registration(1, port=9093))
            assert second_epoch > epoch
            assert (await second.get_broker(1)) is not None
        finally:
            await first.close()
            await second.close()

    run(scenario())


def test_live_broker_watch_follows_registrations_and_session_ends(connect: str) -> None:
    async def scenario() -> None:
        observer, one, two = await _client(connect), await _client(connect), await _client(connect)
        seen: asyncio.Queue[frozenset[int]] = asyncio.Queue()
        watch = observer.watch_live_broker_ids(seen.put_nowait)
        try:
            assert await _next(seen) == frozenset()
            await one.register_broker(_registration(1))
            assert await _next(seen) == {1}
            await two.register_broker(_registration(2))
            assert await _next(seen) == {1, 2}
            await one.close()
            assert await _next(seen) == {2}
            assert await observer.get_live_broker_ids() == [2]
        finally:
            watch.cancel()
            for client in (observer, one, two):
                await client.close()

    run(scenario())


# ---- controller ---------------------------------------------------------------------------------------


def test_two_racing_contenders_one_controller_and_the_deposed_ones_writes_fail(connect: str) -> None:
    async def scenario() -> None:
        a, b, observer = await _client(connect), await _client(connect), await _client(connect)
        try:
            results = await asyncio.gather(a.elect_controller(1), b.elect_controller(2))
            winners = [r for r in results if r is not None]
            assert winners == [ControllerEpoch(epoch=1, zk_version=1)]
            winner, loser = (a, b) if results[0] is not None else (b, a)
            winner_id = 1 if winner is a else 2
            assert await observer.get_controller_id() == winner_id
            assert await observer.get_controller_epoch() == ControllerEpoch(1, 1)
            assert await loser.elect_controller(9) is None  # /controller exists

            epoch1 = winners[0]
            await observer.create_topic_assignment("orders", None, {0: [1, 2], 1: [1, 2]})
            state = LeaderAndIsr(leader=1, leader_epoch=0, isr=(1, 2), controller_epoch=0)
            created = await winner.create_partition_states({TP0: state}, epoch1)
            assert created == {TP0: LeaderAndIsr(1, 0, (1, 2), controller_epoch=1, partition_epoch=0)}

            # The winner's session ends; the loser takes over with epoch 2.
            await winner.close()
            epoch2 = await loser.elect_controller(3)
            assert epoch2 == ControllerEpoch(2, 2)
            assert await observer.get_controller_id() == 3

            # A write fenced with the deposed controller's epoch changes nothing.
            stale = await observer.get_partition_state(TP0)
            assert stale is not None
            with pytest.raises(ControllerMovedError, match="controller epoch 1 is deposed"):
                await loser.update_leader_and_isr({TP0: stale.new_leader_and_isr(2, [2])}, epoch1)
            with pytest.raises(ControllerMovedError):
                await loser.create_partition_states({TopicPartition("orders", 1): state}, epoch1)
            assert await observer.get_partition_state(TP0) == stale
            assert await observer.get_partition_state(TopicPartition("orders", 1)) is None

            moved = await loser.update_leader_and_isr({TP0: stale.new_leader_and_isr(2, [2])}, epoch2)
            assert moved.retry == ()
            assert moved.finished == {TP0: LeaderAndIsr(2, 1, (2,), controller_epoch=2, partition_epoch=1)}
            await loser.resign_controller(epoch2)
            assert await observer.get_controller_id() is None
        finally:
            for client in (a, b, observer):
                await client.close()

    run(scenario())


def test_controller_watch_sees_elections_and_resignations(connect: str) -> None:
    async def scenario() -> None:
        contender, observer = await _client(connect), await _client(connect)
        seen: asyncio.Queue[int | None] = asyncio.Queue()
        watch = observer.watch_controller(seen.put_nowait)
        try:
            assert await _next(seen) is None
            epoch = await contender.elect_controller(5)
            assert epoch is not None
            assert await _next(seen) == 5
            await contender.resign_controller(epoch)
            assert await _next(seen) is None
        finally:
            watch.cancel()
            await contender.close()
            await observer.close()

    run(scenario())


# ---- partition state ----------------------------------------------------------------------------------


def test_conditional_isr_writes_refuse_a_stale_partition_epoch(connect: str) -> None:
    async def scenario() -> None:
        controller, leader = await _client(connect), await _client(connect)
        seen: asyncio.Queue[LeaderAndIsr | None] = asyncio.Queue()
        try:
            epoch = await controller.elect_controller(1)
            assert epoch is not None
            await controller.create_topic_assignment("orders", None, {0: [2, 3, 1]})
            await controller.create_partition_states({TP0: LeaderAndIsr(2, 0, (2, 3, 1), 0)}, epoch)
            watch = leader.watch_partition_state(TP0, seen.put_nowait)
            read = await leader.get_partition_state(TP0)
            assert read == LeaderAndIsr(2, 0, (2, 3, 1), controller_epoch=1, partition_epoch=0)
            assert await _next(seen) == read

            shrunk = await leader.update_isr(TP0, read.with_isr([2, 3]))
            assert shrunk == LeaderAndIsr(2, 0, (2, 3), controller_epoch=1, partition_epoch=1)
            assert await _next(seen) == shrunk

            # A writer still holding the old partition epoch is refused and must re-read.
            assert await leader.update_isr(TP0, read.with_isr([2])) == BadVersion(
                "/brokers/topics/orders/partitions/0/state", 0
            )
            result = await controller.update_leader_and_isr({TP0: read.new_leader_and_isr(3, [3])}, epoch)
            assert (result.finished, result.retry) == ({}, (TP0,))
            assert await leader.get_partition_state(TP0) == shrunk

            current = await controller.get_partition_state(TP0)
            assert current is not None
            result = await controller.update_leader_and_isr({TP0: current.new_leader_and_isr(3, [3])}, epoch)
            assert result.finished == {TP0: LeaderAndIsr(3, 1, (3,), controller_epoch=1, partition_epoch=2)}
            assert await _next(seen) == result.finished[TP0]
            watch.cancel()
        finally:
            await controller.close()
            await leader.close()

    run(scenario())


# ---- sessions -------------------------------------------------------------------------------------------


def test_session_expiry_removes_the_broker_and_tells_it(zk_server: ZooKeeper, connect: str) -> None:
    async def scenario() -> None:
        broker, observer = await _client(connect, session_timeout_ms=30_000), await _client(connect)
        events: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
        broker.session.on_expired(lambda old: events.put_nowait(("expired", old)))

        async def new_session(new: int) -> None:
            events.put_nowait(("new session", new))

        broker.session.on_new_session(new_session)
        brokers: asyncio.Queue[frozenset[int]] = asyncio.Queue()
        watch = observer.watch_live_broker_ids(brokers.put_nowait)
        try:
            assert await _next(brokers) == frozenset()  # the watch's first read, before anything registers
            epoch = await broker.register_broker(_registration(1))
            assert await _next(brokers) == {1}
            old_session = broker.session.session_id
            client_id = broker.session.client_id
            assert client_id is not None
            assert client_id[0] == old_session
            await asyncio.to_thread(zk_server.expire_session, *client_id)

            assert await _next(brokers) == frozenset()  # its ephemeral is gone at once
            assert await _next(events) == ("expired", old_session)
            kind, new = await _next(events)
            assert kind == "new session"
            assert new != old_session
            assert broker.session.state is SessionState.CONNECTED
            new_epoch = await broker.register_broker(_registration(1))  # the broker re-registers
            assert new_epoch > epoch
            assert await _next(brokers) == {1}
        finally:
            watch.cancel()
            await broker.close()
            await observer.close()

    run(scenario())


class _Result:
    """A kazoo async result that is already settled (what ZkSession awaits)."""

    def __init__(self, value: object = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error

    def get(self, block: bool = True) -> object:
        if self.error is not None:
            raise self.error
        return self.value

    def rawlink(self, callback: Callable[[_Result], None]) -> None:
        callback(self)


@pytest.mark.parametrize("write", [True, False])
def test_a_request_lost_with_the_connection_is_retried_unless_a_write_would_land_in_a_new_session(
    write: bool,
) -> None:
    from kazoo.exceptions import ConnectionLoss

    from tidelog.server.zk import ZkSession

    async def scenario() -> object:
        session = ZkSession("127.0.0.1:1")
        session._loop = asyncio.get_running_loop()
        session._set_state(SessionState.CONNECTED, 1)
        attempts: list[int | None] = []

        def request() -> _Result:
            attempts.append(session.session_id)
            if len(attempts) == 1:  # lost with the connection; kazoo comes back with a new session
                session._set_state(SessionState.CONNECTED, 2)
                return _Result(error=ConnectionLoss())
            return _Result("done")

        try:
            return await session._retry(request, write=write)
        finally:
            assert attempts == ([1] if write else [1, 2])

    if write:
        with pytest.raises(ZkSessionExpiredError, match="expired while a write was in flight"):
            run(scenario())
    else:
        assert run(scenario()) == "done"


def test_recreate_gives_a_new_session(connect: str) -> None:
    async def scenario() -> None:
        broker, observer = await _client(connect), await _client(connect)
        expired: list[int] = []
        broker.session.on_expired(expired.append)
        try:
            await broker.register_broker(_registration(4))
            old = broker.session.session_id
            new = await broker.session.recreate()
            assert new != old
            assert expired == [old]
            assert await observer.get_broker(4) is None
            await broker.register_broker(_registration(4))
            assert await observer.get_broker(4) is not None
        finally:
            await broker.close()
            await observer.close()

    run(scenario())


def test_requests_wait_for_a_restarted_zookeeper(zk_server: ZooKeeper, connect: str) -> None:
    async def scenario() -> None:
        client = await _client(connect, session_timeout_ms=30_000)
        try:
            await client.create_or_get_cluster_id("before")
            await asyncio.to_thread(zk_server.kill)
            pending = asyncio.ensure_future(client.get_cluster_id())
            await client.session.wait_state(SessionState.SUSPENDED)
            assert not pending.done()
            await asyncio.to_thread(zk_server.restart)
            assert await pending == "before"  # same session: it outlived the 30 s timeout's share
            assert client.session.state is SessionState.CONNECTED
        finally:
            await client.close()

    run(scenario())


# ---- producer ids, cluster id, broker ids ---------------------------------------------------------------


def test_racing_producer_id_allocators_never_overlap(connect: str) -> None:
    async def scenario() -> None:
        clients = [await _client(connect) for _ in range(3)]
        try:

            async def allocate(client: KafkaZkClient, broker_id: int) -> list[tuple[int, int, int]]:
                blocks = []
                for _ in range(15):
                    block = await client.allocate_producer_id_block(broker_id)
                    blocks.append((block.first_producer_id, block.last_producer_id, block.broker_id))
                return blocks

            per_broker = await asyncio.gather(*(allocate(c, i) for i, c in enumerate(clients)))
            blocks = sorted(b for blocks in per_broker for b in blocks)
            assert [(first, last) for first, last, _ in blocks] == [
                (n * 1000, n * 1000 + 999) for n in range(45)
            ]
            latest = await clients[0].session.get("/latest_producer_id_block")
            assert latest is not None
            assert json.loads(latest[0])["block_end"] == "44999"
        finally:
            for client in clients:
                await client.close()

    run(scenario())


def test_cluster_id_is_created_once_and_broker_sequence_ids_count_up(connect: str) -> None:
    async def scenario() -> None:
        a, b = await _client(connect), await _client(connect)
        try:
            assert await a.get_cluster_id() is None
            ids = await asyncio.gather(a.create_or_get_cluster_id("one"), b.create_or_get_cluster_id("two"))
            assert ids[0] == ids[1]
            assert ids[0] in ("one", "two")
            raw = await a.session.get("/cluster/id")
            assert raw is not None
            assert json.loads(raw[0]) == {"version": "1", "id": ids[0]}
            assert [await a.generate_broker_sequence_id(), await b.generate_broker_sequence_id()] == [1, 2]
        finally:
            await a.close()
            await b.close()

    run(scenario())


# ---- topics, configs, deletion ---------------------------------------------------------------------------


def test_topics_configs_and_deletion_markers(connect: str) -> None:
    async def scenario() -> None:
        admin, controller = await _client(connect), await _client(connect)
        topics: asyncio.Queue[frozenset[str]] = asyncio.Queue()
        changes: asyncio.Queue[list[str]] = asyncio.Queue()
        topics_watch = controller.watch_topics(topics.put_nowait)
        changes_watch = controller.watch_config_change_notifications(changes.put_nowait)
        try:
            assert await _next(topics) == frozenset()
            assert await _next(changes) == []
            topic_id = uuid.uuid4()
            await admin.create_topic_assignment("orders", topic_id, {0: [1, 2, 3], 1: [2, 3, 1]})
            assert await _next(topics) == {"orders"}
            with pytest.raises(TopicExistsError, match="'orders' already exists"):
                await admin.create_topic_assignment("orders", None, {0: [1]})
            assignment = await controller.get_topic_assignment("orders")
            assert assignment is not None
            assert assignment.topic_id == topic_id
            assert {p: a.replicas for p, a in assignment.partitions.items()} == {0: (1, 2, 3), 1: (2, 3, 1)}

            assert await admin.change_topic_config("orders", {"retention.ms": "1000"}) == "0000000000"
            assert await _next(changes) == ["0000000000"]
            assert await controller.get_config_change_notification("0000000000") == "topics/orders"
            assert await controller.get_topic_config("orders") == {"retention.ms": "1000"}
            await admin.change_entity_config("brokers", "<default>", {"log.retention.ms": "5"})
            assert await controller.get_all_entities_with_config("brokers") == ["<default>"]
            assert await _next(changes) == ["0000000000", "0000000001"]
            await controller.delete_config_change_notification("0000000000")
            assert await controller.get_config_change_notifications() == ["0000000001"]

            sequence = await admin.propagate_isr_changes([TP0, TopicPartition("orders", 1)])
            assert await controller.get_isr_change_notifications() == [sequence]
            assert await controller.get_partitions_from_isr_change_notifications([sequence]) == {
                TP0,
                TopicPartition("orders", 1),
            }

            await admin.create_delete_topic_marker("orders")
            with pytest.raises(TopicAlreadyMarkedForDeletionError):
                await admin.create_delete_topic_marker("orders")
            assert await controller.is_topic_marked_for_deletion("orders")
            epoch = await controller.elect_controller(1)
            assert epoch is not None
            await controller.create_partition_states({TP0: LeaderAndIsr(1, 0, (1, 2, 3), 0)}, epoch)
            await controller.delete_isr_change_notifications([sequence], epoch)
            await controller.delete_topic_znode("orders", epoch)
            await controller.delete_topic_config("orders", epoch)
            await controller.delete_topic_deletions(["orders"], epoch)
            assert await _next(topics) == frozenset()
            assert await controller.get_topic_deletions() == []
            assert await controller.get_isr_change_notifications() == []
            assert await controller.get_topic_config("orders") == {}
        finally:
            topics_watch.cancel()
            changes_watch.cancel()
            await admin.close()
            await controller.close()

    run(scenario())


def test_connecting_to_nothing_fails_clearly(tmp_path: Path) -> None:
    from tidelog.server.zookeeper_process import free_port

    port = free_port()

    async def scenario() -> None:
        await KafkaZkClient.connect(
            f"127.0.0.1:{port}", session_timeout_ms=2_000, connection_timeout_ms=1_000
        )

    with pytest.raises(
        Exception, match=rf"could not connect to ZooKeeper at 127\.0\.0\.1:{port} within 1000 ms"
    ):
        run(scenario())
