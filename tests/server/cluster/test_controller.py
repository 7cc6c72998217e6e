"""The controller against a real ZooKeeper (Debian's, through tidelog.testing.ZooKeeper).

Brokers are simulated by their registrations: each has its own ZooKeeper session holding
``/brokers/ids/N``; closing the session kills the broker, expiring it is a network partition longer than
the session timeout, registering again from a new session is a restart (a new broker epoch). Waits poll
ZooKeeper or the controller's view with a deadline; nothing sleeps a fixed time.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any, TypeVar

import pytest

from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.replication.leader_and_isr import NO_LEADER, LeaderAndIsr
from tidelog.server.cluster.controller import (
    BrokerNotAvailableError,
    Controller,
    ControllerConfig,
    ElectionType,
    NotControllerError,
    StaleBrokerEpochError,
)
from tidelog.server.cluster.controller_events import TopicDeletion
from tidelog.server.config import parse_broker_config
from tidelog.server.zk import (
    BadVersion,
    BrokerRegistration,
    ControllerMovedError,
    Endpoint,
    KafkaZkClient,
    TopicAssignment,
    paths,
)
from tidelog.server.zk.zk_data import ReplicaAssignment, encode_topic_assignment
from tidelog.testing import ZooKeeper

T = TypeVar("T")
_chroots = itertools.count()
DEADLINE = 30.0
NO_REBALANCE = ControllerConfig(auto_leader_rebalance_enable=False)


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    base = tmp_path_factory.mktemp("zk")
    with ZooKeeper(data_dir=base / "data", run_dir=base / "run") as server:
        yield server


@pytest.fixture
def connect(zk_server: ZooKeeper, request: pytest.FixtureRequest) -> str:
    """A chroot of this test's own: tests share the server, not their znodes."""
    return f"{zk_server.connect_string}/controller-tests/{request.node.name.replace('[', '_').replace(']', '')}-{next(_chroots)}"


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, 90))


async def eventually(check: Callable[[], Awaitable[T | bool | None]], what: str) -> T:
    """Poll ``check`` until it returns something truthy (returned), or fail after DEADLINE seconds."""
    async with asyncio.timeout(DEADLINE):
        while True:
            result = await check()
            if result:
                return result  # type: ignore[return-value]
            await asyncio.sleep(0.02)
    raise AssertionError(what)  # pragma: no cover - the timeout raises first


class Cluster:
    """ZooKeeper sessions standing for brokers, an admin session, and controllers; all closed at the end."""

    def __init__(self, connect: str, zk_server: ZooKeeper) -> None:
        self.connect = connect
        self.zk_server = zk_server
        self.admin: KafkaZkClient
        self.brokers: dict[int, KafkaZkClient] = {}
        self.broker_epochs: dict[int, int] = {}
        self.controllers: list[Controller] = []
        self._clients: list[KafkaZkClient] = []

    async def __aenter__(self) -> Cluster:
        self.admin = await self.client()
        await self.admin.create_top_level_paths()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for controller in self.controllers:
            await controller.stop()
        for client in self._clients:
            await client.close()

    async def client(self) -> KafkaZkClient:
        client = await KafkaZkClient.connect(self.connect, session_timeout_ms=10_000)
        self._clients.append(client)
        return client

    # ---- brokers ----

    async def start_broker(self, broker_id: int) -> int:
        """Register ``broker_id`` from a session of its own (a new one if it had one): its broker epoch."""
        client = self.brokers.get(broker_id)
        if client is None:
            client = self.brokers[broker_id] = await self.client()
        registration = BrokerRegistration(
            broker_id, (Endpoint("PLAINTEXT", "127.0.0.1", 9090 + broker_id, "PLAINTEXT"),), 1700000000000
        )
        self.broker_epochs[broker_id] = await client.register_broker(registration)
        return self.broker_epochs[broker_id]

    async def start_brokers(self, *broker_ids: int) -> None:
        for broker_id in broker_ids:
            await self.start_broker(broker_id)

    async def kill_broker(self, broker_id: int) -> None:
        """Close the broker's session: ZooKeeper deletes ``/brokers/ids/N`` at once."""
        client = self.brokers.pop(broker_id)
        await client.close()
        self._clients.remove(client)

    async def expire_session(self, client: KafkaZkClient) -> None:
        client_id = client.session.client_id
        assert client_id is not None
        await asyncio.to_thread(self.zk_server.expire_session, *client_id)

    async def restart_broker(self, broker_id: int) -> int:
        """A new session and a new registration: a larger broker epoch."""
        await self.brokers[broker_id].session.recreate()
        return await self.start_broker(broker_id)

    # ---- controllers ----

    async def start_controller(self, broker_id: int, config: ControllerConfig = NO_REBALANCE) -> Controller:
        controller = Controller(await self.client(), broker_id, config=config)
        self.controllers.append(controller)
        await controller.start()
        return controller

    async def active(self, *candidates: Controller) -> Controller:
        """The one active controller among ``candidates`` once exactly one is and ``/controller`` names it."""

        async def check() -> Controller | None:
            active = [c for c in candidates if c.is_active]
            if len(active) != 1:
                return None
            return active[0] if await self.admin.get_controller_id() == active[0].broker_id else None

        return await eventually(check, "no single active controller")

    # ---- topics and states ----

    async def create_topic(self, topic: str, assignment: Mapping[int, Sequence[int]]) -> uuid.UUID:
        topic_id = uuid.uuid4()
        await self.admin.create_topic_assignment(topic, topic_id, assignment)
        return topic_id

    async def state(self, partition: TopicPartition) -> LeaderAndIsr | None:
        return await self.admin.get_partition_state(partition)

    async def wait_state(
        self, partition: TopicPartition, predicate: Callable[[LeaderAndIsr], bool], what: str
    ) -> LeaderAndIsr:
        async def check() -> LeaderAndIsr | None:
            found = await self.state(partition)
            return found if found is not None and predicate(found) else None

        return await eventually(check, f"{partition}: {what}")

    async def wait_leader(self, partition: TopicPartition, leader: int, isr: Sequence[int]) -> LeaderAndIsr:
        return await self.wait_state(
            partition, lambda s: (s.leader, s.isr) == (leader, tuple(isr)), f"leader {leader} ISR {isr}"
        )

    async def settle(self, controller: Controller) -> None:
        """Until every event queued before now has been handled (an ElectLeaders for nothing goes last)."""
        assert await controller.elect_leaders([], ElectionType.PREFERRED) == {}

    async def wait_live(self, controller: Controller, broker_ids: set[int]) -> None:
        async def check() -> bool:
            return controller.context.live_broker_ids == broker_ids

        await eventually(check, f"live brokers {broker_ids}")
        await self.settle(controller)


def cluster(connect: str, zk_server: ZooKeeper) -> Cluster:
    return Cluster(connect, zk_server)


def brief(state: LeaderAndIsr | None) -> tuple[int, tuple[int, ...], int] | None:
    return (state.leader, state.isr, state.leader_epoch) if state is not None else None


def test_the_controller_config_comes_from_kafkas_broker_keys() -> None:
    assert ControllerConfig.from_broker_config(parse_broker_config({})[0]) == ControllerConfig()
    config, _ = parse_broker_config(
        {
            "unclean.leader.election.enable": "true",
            "auto.leader.rebalance.enable": "false",
            "leader.imbalance.check.interval.seconds": "30",
            "leader.imbalance.per.broker.percentage": "5",
            "delete.topic.enable": "false",
        }
    )
    assert ControllerConfig.from_broker_config(config) == ControllerConfig(
        unclean_leader_election_enable=True,
        auto_leader_rebalance_enable=False,
        leader_imbalance_check_interval_seconds=30,
        leader_imbalance_per_broker_percentage=5,
        delete_topic_enable=False,
    )


# ---- election of the controller --------------------------------------------------------------------


def test_two_controllers_race_one_wins_and_the_other_takes_over(connect: str, zk_server: ZooKeeper) -> None:
    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2, 3)
            await c.create_topic("t", {0: [1, 2, 3]})
            first, second = await asyncio.gather(c.start_controller(1), c.start_controller(2))
            winner = await c.active(first, second)
            loser = second if winner is first else first
            assert winner.epoch == 1
            assert loser.epoch is None

            async def loser_knows() -> bool:
                return loser.active_controller_id == winner.broker_id

            await eventually(loser_knows, "the loser sees the winner")
            await c.wait_leader(tp("t", 0), 1, [1, 2, 3])
            old_epoch = winner.controller_epoch
            assert old_epoch is not None

            # The winner's session expires: someone wins epoch 2, the old epoch's writes are fenced.
            await c.expire_session(winner.zk)
            taken = await c.active(first, second)
            assert taken.epoch == 2
            assert await c.admin.get_controller_epoch() == taken.controller_epoch
            stale = replace(await c.state(tp("t", 0)) or LeaderAndIsr(1, 0, (1,), 1), leader=3)
            with pytest.raises(ControllerMovedError):  # from any session: the epoch's version fences it
                await c.admin.update_leader_and_isr({tp("t", 0): stale}, old_epoch)
            with pytest.raises(NotControllerError):
                await (winner if taken is not winner else loser).controlled_shutdown(3)
            assert brief(await c.state(tp("t", 0))) == (1, (1, 2, 3), 0)  # nothing rewritten

            # The active one stops: the other one takes over at once, epoch 3.
            await taken.stop()
            other = loser if taken is winner else winner
            assert await c.active(other) is other
            assert other.epoch == 3

            # And resigning moves it again (any broker may win the next epoch; here only one campaigns).
            await other.resign()
            again = await c.active(other)
            assert again.epoch == 4
            assert brief(await c.state(tp("t", 0))) == (1, (1, 2, 3), 0)

    run(scenario())


# ---- topics ------------------------------------------------------------------------------------------


def test_a_new_topic_gets_first_states_from_its_live_replicas(connect: str, zk_server: ZooKeeper) -> None:
    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2, 3)
            controller = await c.start_controller(1)
            await c.active(controller)
            await c.create_topic("t", {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
            first = await c.wait_state(tp("t", 2), lambda s: True, "a state")
            assert first == LeaderAndIsr(3, 0, (3, 1, 2), controller_epoch=1, partition_epoch=0)
            assert await c.state(tp("t", 0)) == LeaderAndIsr(1, 0, (1, 2, 3), 1, 0)
            assert await c.state(tp("t", 1)) == LeaderAndIsr(2, 0, (2, 3, 1), 1, 0)

            # A replica on a broker that is down is left out; a partition with no live replica waits.
            await c.create_topic("u", {0: [4, 2, 1], 1: [4, 5]})
            assert brief(await c.wait_state(tp("u", 0), lambda s: True, "a state")) == (2, (2, 1), 0)
            await c.settle(controller)
            assert await c.state(tp("u", 1)) is None
            await c.start_broker(5)
            assert brief(await c.wait_state(tp("u", 1), lambda s: True, "a state")) == (5, (5,), 0)

    run(scenario())


def test_added_partitions_get_first_states(connect: str, zk_server: ZooKeeper) -> None:
    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2)
            controller = await c.start_controller(1)
            topic_id = await c.create_topic("t", {0: [1, 2]})
            await c.wait_leader(tp("t", 0), 1, [1, 2])
            grown = TopicAssignment(
                "t",
                topic_id,
                {0: ReplicaAssignment((1, 2)), 1: ReplicaAssignment((2, 1)), 2: ReplicaAssignment((1,))},
            )
            await c.admin.session.set(
                paths.topic_path("t"), encode_topic_assignment(grown)
            )  # CreatePartitions
            await c.wait_leader(tp("t", 1), 2, [2, 1])
            await c.wait_leader(tp("t", 2), 1, [1])
            assert brief(await c.state(tp("t", 0))) == (1, (1, 2), 0)
            assert controller.context.replicas(tp("t", 1)) == (2, 1)

    run(scenario())


def test_topic_deletion_removes_every_znode(connect: str, zk_server: ZooKeeper) -> None:
    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2)
            controller = await c.start_controller(1)
            await c.create_topic("gone", {0: [1, 2], 1: [2, 1]})
            await c.create_topic("kept", {0: [1, 2]})
            await c.admin.change_topic_config("gone", {"retention.ms": "1000"})
            await c.wait_leader(tp("gone", 1), 2, [2, 1])
            await c.wait_leader(tp("kept", 0), 1, [1, 2])
            await c.admin.create_delete_topic_marker("gone")

            async def deleted() -> bool:
                return await c.admin.get_topic_deletions() == []

            await eventually(deleted, "the marker is removed")
            assert await c.admin.session.exists(paths.topic_path("gone")) is None
            assert await c.admin.session.exists(paths.config_entity_path("topics", "gone")) is None
            assert await c.admin.get_all_topics() == {"kept"}
            assert brief(await c.state(tp("kept", 0))) == (1, (1, 2), 0)
            assert "gone" not in controller.context.all_topics

            # The same name again is a new topic with new states.
            await c.create_topic("gone", {0: [2, 1]})
            assert brief(await c.wait_state(tp("gone", 0), lambda s: True, "a state")) == (2, (2, 1), 0)

    run(scenario())


def test_topic_deletion_disabled_drops_the_marker_only(connect: str, zk_server: ZooKeeper) -> None:
    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1)
            controller = await c.start_controller(1, replace(NO_REBALANCE, delete_topic_enable=False))
            await c.create_topic("t", {0: [1]})
            await c.wait_leader(tp("t", 0), 1, [1])
            await c.admin.create_delete_topic_marker("t")

            async def dropped() -> bool:
                return await c.admin.get_topic_deletions() == []

            await eventually(dropped, "the marker is dropped")
            await c.settle(controller)
            assert await c.admin.get_all_topics() == {"t"}
            assert brief(await c.state(tp("t", 0))) == (1, (1,), 0)

    run(scenario())


def test_topic_deletion_is_finished_by_the_next_controller(connect: str, zk_server: ZooKeeper) -> None:
    """The controller stops (its session expires) after deleting the topic's znodes but before its config
    and marker: the next controller finishes it, and gives the topic no new states meanwhile."""

    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2)
            first = await c.start_controller(1)
            await c.active(first)
            second = await c.start_controller(2)
            await c.create_topic("t", {0: [1, 2]})
            await c.admin.change_topic_config("t", {"retention.ms": "1000"})
            await c.wait_leader(tp("t", 0), 1, [1, 2])

            stuck = asyncio.Event()

            async def delete_topic_config_never_returns(*_args: object) -> None:
                stuck.set()
                await asyncio.Event().wait()

            first.zk.delete_topic_config = delete_topic_config_never_returns  # type: ignore[method-assign]
            await c.admin.create_delete_topic_marker("t")
            await asyncio.wait_for(stuck.wait(), DEADLINE)
            assert await c.admin.session.exists(paths.topic_path("t")) is None  # the first step is done
            assert await c.admin.get_topic_deletions() == ["t"]

            await c.expire_session(first.zk)
            assert await c.active(first, second) is second

            async def finished() -> bool:
                return await c.admin.get_topic_deletions() == []

            await eventually(finished, "the marker is removed")
            assert await c.admin.session.exists(paths.config_entity_path("topics", "t")) is None
            assert await c.admin.get_all_topics() == set()

    run(scenario())


def test_a_new_controller_finishes_a_deletion_that_left_partitions_without_states(
    connect: str, zk_server: ZooKeeper
) -> None:
    """A deletion interrupted by an older controller (state znodes deleted one by one): the marker makes
    the new controller delete the rest instead of giving the stateless partitions first states."""

    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2)
            await c.create_topic("t", {0: [1, 2], 1: [2, 1]})
            await c.admin.session.ensure_path(paths.partition_path(tp("t", 1)))
            epoch = await c.admin.elect_controller(9)
            assert epoch is not None
            await c.admin.create_partition_states({tp("t", 1): LeaderAndIsr(2, 0, (2, 1), 0)}, epoch)
            await c.admin.create_delete_topic_marker("t")
            await c.admin.resign_controller(epoch)

            controller = await c.start_controller(1)

            async def finished() -> bool:
                return await c.admin.get_topic_deletions() == []

            await eventually(finished, "the marker is removed")
            await c.settle(controller)
            assert await c.admin.get_all_topics() == set()
            assert await c.admin.session.exists(paths.topic_path("t")) is None

    run(scenario())


# ---- broker failures and start-ups -------------------------------------------------------------------


def test_a_failed_leader_is_replaced_by_the_next_isr_member_and_leaves_every_isr(
    connect: str, zk_server: ZooKeeper, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2, 3)
            controller = await c.start_controller(9)
            await c.create_topic("t", {0: [1, 2, 3], 1: [2, 1, 3], 2: [3, 2, 1], 3: [2, 3]})
            await c.wait_leader(tp("t", 3), 2, [2, 3])
            await c.expire_session(c.brokers[1])
            await c.wait_leader(tp("t", 0), 2, [2, 3])
            await c.wait_leader(tp("t", 1), 2, [2, 3])
            await c.wait_leader(tp("t", 2), 3, [3, 2])
            assert brief(await c.state(tp("t", 0))) == (2, (2, 3), 1)
            assert brief(await c.state(tp("t", 1))) == (
                2,
                (2, 3),
                1,
            )  # a follower leaving: a new leader epoch
            assert brief(await c.state(tp("t", 2))) == (3, (3, 2), 1)
            assert brief(await c.state(tp("t", 3))) == (2, (2, 3), 0)  # not on broker 1: untouched
            assert controller.context.live_broker_ids == {2, 3}

    with caplog.at_level(logging.INFO, logger="tidelog.controller"):
        run(scenario())
    assert (
        "[Controller id=9 epoch=1] Partition t-0 elected leader 2 with ISR [2,3] at leader epoch 1 "
        "(broker 1 failed)" in caplog.messages
    )
    assert (
        "[Controller id=9 epoch=1] Partition t-1 ISR changed from [2,1,3] to [2,3] with leader 2 at "
        "leader epoch 1 (broker 1 failed)" in caplog.messages
    )


def test_the_isr_is_never_emptied_and_an_offline_partition_comes_back_with_an_isr_member(
    connect: str, zk_server: ZooKeeper
) -> None:
    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2)
            controller = await c.start_controller(9)
            await c.create_topic("t", {0: [1, 2]})
            await c.wait_leader(tp("t", 0), 1, [1, 2])
            await c.kill_broker(2)
            assert brief(await c.wait_leader(tp("t", 0), 1, [1])) == (1, (1,), 1)
            await c.kill_broker(1)
            offline = await c.wait_state(tp("t", 0), lambda s: not s.has_leader, "offline")
            assert brief(offline) == (NO_LEADER, (1,), 2)  # the last ISR member stays in the ISR

            # Broker 2 is not in the ISR: without unclean election the partition stays offline.
            await c.start_broker(2)
            await c.wait_live(controller, {2})
            assert brief(await c.state(tp("t", 0))) == (NO_LEADER, (1,), 2)
            # Broker 1 is: it leads again.
            await c.start_broker(1)
            assert brief(await c.wait_leader(tp("t", 0), 1, [1])) == (1, (1,), 3)

    run(scenario())


def test_unclean_election_only_where_enabled(
    connect: str, zk_server: ZooKeeper, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2)
            controller = await c.start_controller(9)
            for topic in ("t", "u", "v"):
                await c.create_topic(topic, {0: [1, 2]})
                await c.wait_leader(tp(topic, 0), 1, [1, 2])
            await c.kill_broker(2)
            for topic in ("t", "u", "v"):
                await c.wait_leader(tp(topic, 0), 1, [1])
            await c.kill_broker(1)
            for topic in ("t", "u", "v"):
                await c.wait_state(tp(topic, 0), lambda s: not s.has_leader, "offline")
            await c.start_broker(2)
            await c.wait_live(controller, {2})
            for topic in ("t", "u", "v"):
                assert brief(await c.state(tp(topic, 0))) == (NO_LEADER, (1,), 2)

            # The topic's config allows it: broker 2 leads t-0 alone.
            await c.admin.change_topic_config("t", {"unclean.leader.election.enable": "true"})
            assert brief(await c.wait_leader(tp("t", 0), 2, [2])) == (2, (2,), 3)
            await c.settle(controller)
            assert brief(await c.state(tp("u", 0))) == (NO_LEADER, (1,), 2)

            # ElectLeaders(UNCLEAN) for v-0 only; PREFERRED where the preferred replica is not in the ISR.
            results = await controller.elect_leaders(
                [tp("v", 0), tp("t", 0), tp("w", 0)], ElectionType.UNCLEAN
            )
            elected = results[tp("v", 0)]
            assert isinstance(elected, LeaderAndIsr)
            assert brief(elected) == (2, (2,), 3)
            assert _code(results[tp("t", 0)]) is ErrorCode.ELECTION_NOT_NEEDED
            assert _code(results[tp("w", 0)]) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            preferred = await controller.elect_leaders([tp("u", 0)], ElectionType.PREFERRED)
            assert _code(preferred[tp("u", 0)]) is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE

            # The default changes (a dynamic broker config): u-0 goes too.
            controller.update_config(replace(controller.config, unclean_leader_election_enable=True))
            assert brief(await c.wait_leader(tp("u", 0), 2, [2])) == (2, (2,), 3)

    with caplog.at_level(logging.INFO, logger="tidelog.controller"):
        run(scenario())
    assert (
        "[Controller id=9 epoch=1] Partition t-0 elected leader 2 with ISR [2] at leader epoch 3, an unclean "
        "election: 2 was not in the ISR [1] (offline partition election)" in caplog.messages
    )


def _code(result: LeaderAndIsr | KafkaProtocolError) -> ErrorCode:
    assert isinstance(result, KafkaProtocolError), result
    return result.error_code


def test_a_broker_registering_again_with_a_new_epoch_is_a_failure_and_a_start(
    connect: str, zk_server: ZooKeeper, caplog: pytest.LogCaptureFixture
) -> None:
    """The controller is busy while broker 1 restarts, so it sees /brokers/ids unchanged but for broker
    1's epoch (a bounce): broker 1's leaderships move, it leaves the ISRs, then it counts as live again."""

    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2, 3)
            controller = await c.start_controller(9)
            await c.create_topic("t", {0: [1, 2, 3], 1: [2, 1, 3]})
            await c.wait_leader(tp("t", 1), 2, [2, 1, 3])
            await c.wait_live(controller, {1, 2, 3})
            old_epoch = c.broker_epochs[1]

            busy, release = asyncio.Event(), asyncio.Event()

            async def blocked_deletion() -> None:
                busy.set()
                await release.wait()

            original = controller._process_topic_deletion
            controller._process_topic_deletion = blocked_deletion  # type: ignore[method-assign]
            controller._events.put(TopicDeletion())
            await asyncio.wait_for(busy.wait(), DEADLINE)
            new_epoch = await c.restart_broker(1)
            assert new_epoch > old_epoch
            controller._process_topic_deletion = original  # type: ignore[method-assign]
            release.set()

            assert brief(await c.wait_leader(tp("t", 0), 2, [2, 3])) == (2, (2, 3), 1)
            assert brief(await c.wait_leader(tp("t", 1), 2, [2, 3])) == (2, (2, 3), 1)

            async def epoch_updated() -> bool:
                return controller.context.live_broker_epochs.get(1) == new_epoch

            await eventually(epoch_updated, "broker 1's new epoch")
            assert controller.context.live_broker_ids == {1, 2, 3}

    with caplog.at_level(logging.INFO, logger="tidelog.controller"):
        run(scenario())
    assert (
        "[Controller id=9 epoch=1] Newly added brokers: , deleted brokers: , bounced brokers: 1, "
        "all live brokers: 1,2,3" in caplog.messages
    )


def test_a_leader_isr_write_racing_the_controller_is_not_overwritten(
    connect: str, zk_server: ZooKeeper
) -> None:
    """The leader (broker 1) drops 2 from the ISR between the controller's read and its write removing
    failed broker 3: the controller's write fails on the partition epoch, it reads again and removes 3
    from what the leader wrote, never bringing 2 back."""

    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2, 3)
            controller = await c.start_controller(9)
            await c.create_topic("t", {0: [1, 2, 3]})
            partition = tp("t", 0)
            await c.wait_leader(partition, 1, [1, 2, 3])
            await c.wait_live(controller, {1, 2, 3})
            leader = c.brokers[1]
            read_states = controller.zk.get_partition_states
            raced: list[LeaderAndIsr] = []

            async def read_then_leader_writes(
                partitions: Sequence[TopicPartition],
            ) -> dict[TopicPartition, LeaderAndIsr]:
                states = await read_states(partitions)
                if partition in states and not raced:
                    shrunk = await leader.update_isr(partition, states[partition].with_isr((1, 3)))
                    assert not isinstance(shrunk, BadVersion)
                    raced.append(shrunk)
                return states

            controller.zk.get_partition_states = read_then_leader_writes  # type: ignore[assignment, method-assign]
            await c.kill_broker(3)
            final = await c.wait_state(partition, lambda s: 3 not in s.isr, "3 out of the ISR")
            assert [(r.isr, r.partition_epoch) for r in raced] == [((1, 3), 1)]
            assert (final.leader, final.isr, final.leader_epoch, final.partition_epoch) == (1, (1,), 1, 2)

            # A leader writing from a stale view is refused the same way.
            stale = await leader.update_isr(partition, raced[0].with_isr((1, 2, 3)))
            assert isinstance(stale, BadVersion)

    run(scenario())


# ---- controlled shutdown and preferred leaders -------------------------------------------------------


def test_controlled_shutdown_moves_leadership_and_leaves_the_isrs(connect: str, zk_server: ZooKeeper) -> None:
    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2, 3)
            controller = await c.start_controller(9)
            other = await c.start_controller(8)
            await c.active(controller)
            await c.create_topic("t", {0: [1, 2, 3], 1: [2, 1, 3], 2: [1], 3: [1, 2]})
            await c.wait_leader(tp("t", 3), 1, [1, 2])
            await c.wait_live(controller, {1, 2, 3})
            await c.admin.update_isr(
                tp("t", 3), (await c.state(tp("t", 3)) or LeaderAndIsr(1, 0, (1,), 1)).with_isr((1,))
            )

            with pytest.raises(StaleBrokerEpochError, match="old broker epoch"):
                await controller.controlled_shutdown(1, c.broker_epochs[1] - 1)
            with pytest.raises(BrokerNotAvailableError, match="Broker id 7 does not exist"):
                await controller.controlled_shutdown(7, 1)
            with pytest.raises(NotControllerError):
                await other.controlled_shutdown(1, c.broker_epochs[1])

            remaining = await controller.controlled_shutdown(1, c.broker_epochs[1])
            assert remaining == {tp("t", 2), tp("t", 3)}  # single replica; no other ISR member
            assert brief(await c.state(tp("t", 0))) == (2, (2, 3), 1)
            assert brief(await c.state(tp("t", 1))) == (2, (2, 3), 1)
            assert brief(await c.state(tp("t", 2))) == (1, (1,), 0)
            assert brief(await c.state(tp("t", 3))) == (1, (1,), 0)
            assert controller.context.live_broker_ids == {2, 3}  # still registered, not a candidate

            # Its session ends: it is gone from the shutting-down brokers; what it still led goes offline.
            await c.kill_broker(1)
            await c.wait_state(tp("t", 2), lambda s: not s.has_leader, "offline")
            assert controller.context.shutting_down_broker_ids == set()

    run(scenario())


def test_preferred_leaders_are_restored_by_the_periodic_rebalance(connect: str, zk_server: ZooKeeper) -> None:
    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2, 3)
            config = ControllerConfig(
                leader_imbalance_check_interval_seconds=0.05, leader_imbalance_per_broker_percentage=0
            )
            controller = await c.start_controller(9, config)
            await c.create_topic("t", {0: [1, 2, 3], 1: [2, 3, 1]})
            await c.wait_leader(tp("t", 0), 1, [1, 2, 3])
            await c.kill_broker(1)
            moved = await c.wait_leader(tp("t", 0), 2, [2, 3])
            await c.start_broker(1)
            await c.wait_live(controller, {1, 2, 3})
            assert brief(await c.state(tp("t", 0))) == (2, (2, 3), 1)  # 1 is back, but not in the ISR

            # The leader lets broker 1 back in the ISR: the rebalance makes it the leader again.
            expanded = await c.brokers[2].update_isr(tp("t", 0), moved.with_isr((2, 3, 1)))
            assert not isinstance(expanded, BadVersion)
            await c.brokers[2].propagate_isr_changes([tp("t", 0)])  # a Kafka leader's announcement

            async def notification_cleared() -> bool:
                return await c.admin.get_isr_change_notifications() == []

            await eventually(notification_cleared, "the ISR change notification is deleted")
            assert controller.context.leadership[tp("t", 0)].isr == (2, 3, 1)
            back = await c.wait_state(tp("t", 0), lambda s: s.leader == 1, "leader 1")
            assert brief(back) == (1, (2, 3, 1), 2)
            assert brief(await c.state(tp("t", 1))) == (2, (2, 3), 1)  # 1 is not its preferred leader

            results = await controller.elect_leaders([tp("t", 0), tp("t", 1)], ElectionType.PREFERRED)
            assert _code(results[tp("t", 0)]) is ErrorCode.ELECTION_NOT_NEEDED
            assert _code(results[tp("t", 1)]) is ErrorCode.ELECTION_NOT_NEEDED

    run(scenario())


# ---- failover --------------------------------------------------------------------------------------


def test_a_failover_keeps_every_state_and_elects_only_where_the_leader_died(
    connect: str, zk_server: ZooKeeper
) -> None:
    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2, 3)
            first = await c.start_controller(1)
            await c.create_topic("t", {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
            await c.create_topic("u", {0: [2], 1: [1, 3]})
            await c.wait_leader(tp("u", 1), 1, [1, 3])
            await c.kill_broker(3)
            await c.wait_leader(tp("t", 2), 1, [1, 2])
            await c.settle(first)
            partitions = [tp("t", 0), tp("t", 1), tp("t", 2), tp("u", 0), tp("u", 1)]
            before = {p: await c.state(p) for p in partitions}
            assert {p: brief(s) for p, s in before.items()} == {
                tp("t", 0): (1, (1, 2), 1),
                tp("t", 1): (2, (2, 1), 1),
                tp("t", 2): (1, (1, 2), 1),
                tp("u", 0): (2, (2,), 0),
                tp("u", 1): (1, (1,), 1),
            }

            # A plain failover: nothing is written.
            await first.stop()
            second = await c.start_controller(2)
            await c.active(second)
            await c.settle(second)
            assert {p: await c.state(p) for p in partitions} == before

            # Broker 2 dies while there is no controller: the next one elects where 2 led, nowhere else.
            await second.stop()
            await c.kill_broker(2)
            third = await c.start_controller(3)
            await c.active(third)
            await c.settle(third)
            t1 = await c.state(tp("t", 1))
            assert t1 is not None
            assert brief(t1) == (1, (1,), 2)  # led by 2: elected, the dead replicas out of its ISR
            assert t1.controller_epoch == third.epoch == 3
            assert brief(await c.state(tp("u", 0))) == (NO_LEADER, (2,), 1)  # no one else: offline
            for p in (tp("t", 0), tp("t", 2), tp("u", 1)):  # leaders alive: not rewritten
                assert await c.state(p) == before[p]

    run(scenario())


def test_the_controller_resigns_on_session_expiry_and_campaigns_again(
    connect: str, zk_server: ZooKeeper, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2)
            controller = await c.start_controller(1)
            await c.active(controller)
            await c.create_topic("t", {0: [1, 2]})
            await c.wait_leader(tp("t", 0), 1, [1, 2])
            await c.expire_session(controller.zk)

            async def elected_again() -> bool:
                return controller.epoch == 2  # alone: it wins again from its new session

            await eventually(elected_again, "controller epoch 2")
            await c.active(controller)
            await c.kill_broker(1)
            assert brief(await c.wait_leader(tp("t", 0), 2, [2])) == (2, (2,), 1)
            assert (await c.state(tp("t", 0)) or LeaderAndIsr(0, 0, (), 0)).controller_epoch == 2

    with caplog.at_level(logging.INFO, logger="tidelog.controller"):
        run(scenario())
    messages = caplog.messages
    expired = messages.index("[Controller id=1] ZooKeeper session expired: resigning")
    assert messages[expired + 1] == "[Controller id=1] Resigned"
    assert (
        "[Controller id=1] 1 successfully elected as the controller. Epoch incremented to 2 and epoch zk "
        "version is now 2" in messages[expired:]
    )
