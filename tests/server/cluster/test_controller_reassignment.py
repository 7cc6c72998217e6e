"""The controller's partition reassignments (KIP-455) against a real ZooKeeper, brokers simulated by their
registrations and the leader's ISR writes (see test_controller.py): what the topic znode and the state
znode hold at each step of a move, a replaced move, a cancellation, a failover, and the errors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.server.cluster.test_controller import brief, cluster, eventually, run, tp

from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.replication.reassignment import PartitionReassignment
from tidelog.server.cluster.controller import NotControllerError
from tidelog.server.zk import BadVersion
from tidelog.server.zk.zk_data import ReplicaAssignment
from tidelog.testing import ZooKeeper


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    base = tmp_path_factory.mktemp("zk")
    with ZooKeeper(data_dir=base / "data", run_dir=base / "run") as server:
        yield server


@pytest.fixture
def connect(zk_server: ZooKeeper, request: pytest.FixtureRequest) -> str:
    return f"{zk_server.connect_string}/reassignment-tests/{request.node.name}"


def codes(results: dict[Any, KafkaProtocolError | None]) -> dict[Any, int]:
    return {key: ErrorCode.NONE if error is None else error.error_code for key, error in results.items()}


def test_a_move_is_written_completed_once_the_targets_are_in_the_isr_and_listed_meanwhile(
    connect: str, zk_server: ZooKeeper
) -> None:
    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2, 3, 4)
            controller = await c.start_controller(9)
            await c.create_topic("t", {0: [1, 2, 3], 1: [2, 3, 4]})
            partition = tp("t", 0)
            start = await c.wait_leader(partition, 1, [1, 2, 3])
            await c.wait_live(controller, {1, 2, 3, 4})

            assert codes(await controller.alter_partition_reassignments({partition: (2, 3, 4)})) == {
                partition: 0
            }
            assignment = await c.admin.get_topic_assignment("t")
            assert assignment is not None
            assert assignment.partitions[0] == ReplicaAssignment((2, 3, 4, 1), (4,), (1,))
            assert assignment.partitions[1] == ReplicaAssignment((2, 3, 4))  # untouched
            assert await c.state(partition) == start  # nothing to write until 4 catches up
            moving = PartitionReassignment((2, 3, 4, 1), (4,), (1,))
            assert await controller.list_partition_reassignments(None) == {partition: moving}
            assert await controller.list_partition_reassignments([partition, tp("t", 1)]) == {
                partition: moving
            }

            # The leader (1) adds the caught-up 4 to its ISR: the controller completes the move.
            joined = await c.brokers[1].update_isr(partition, start.with_isr((1, 2, 3, 4)))
            assert not isinstance(joined, BadVersion)
            final = await c.wait_state(partition, lambda s: s.leader != 1, "a leader from the target set")
            assert brief(final) == (2, (2, 3, 4), start.leader_epoch + 1)

            async def settled() -> bool:
                found = await c.admin.get_topic_assignment("t")
                return found is not None and found.partitions[0] == ReplicaAssignment((2, 3, 4))

            await eventually(settled, "the final assignment")
            await c.settle(controller)
            assert await controller.list_partition_reassignments(None) == {}
            assert controller.context.replicas(partition) == (2, 3, 4)

    run(scenario())


def test_a_new_target_replaces_the_move_and_a_cancel_restores_the_original_replicas(
    connect: str, zk_server: ZooKeeper
) -> None:
    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2, 3, 4, 5)
            controller = await c.start_controller(9)
            await c.create_topic("t", {0: [1, 2, 3]})
            partition = tp("t", 0)
            start = await c.wait_leader(partition, 1, [1, 2, 3])
            await c.wait_live(controller, {1, 2, 3, 4, 5})
            await controller.alter_partition_reassignments({partition: (2, 3, 4)})
            # A new target replaces the move: 4 is no longer wanted, 5 is; relative to the original 1,2,3.
            assert codes(await controller.alter_partition_reassignments({partition: (1, 2, 5)})) == {
                partition: 0
            }
            assignment = await c.admin.get_topic_assignment("t")
            assert assignment is not None
            assert assignment.partitions[0] == ReplicaAssignment((1, 2, 5, 3), (5,), (3,))

            assert codes(await controller.alter_partition_reassignments({partition: None})) == {partition: 0}
            assignment = await c.admin.get_topic_assignment("t")
            assert assignment is not None
            assert assignment.partitions[0] == ReplicaAssignment((1, 2, 3))
            cancelled = await c.state(partition)
            assert brief(cancelled) == (1, (1, 2, 3), start.leader_epoch + 1)
            assert await controller.list_partition_reassignments(None) == {}
            again = await controller.alter_partition_reassignments({partition: None})
            assert codes(again) == {partition: ErrorCode.NO_REASSIGNMENT_IN_PROGRESS}

    run(scenario())


def test_the_next_controller_completes_a_move_in_progress(connect: str, zk_server: ZooKeeper) -> None:
    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2, 3, 4)
            first = await c.start_controller(8)
            await c.create_topic("t", {0: [1, 2, 3]})
            partition = tp("t", 0)
            start = await c.wait_leader(partition, 1, [1, 2, 3])
            await c.wait_live(first, {1, 2, 3, 4})
            await first.alter_partition_reassignments({partition: (1, 2, 4)})
            await first.stop()
            second = await c.start_controller(9)
            await c.active(second)
            await c.settle(second)
            listed = await second.list_partition_reassignments(None)
            assert listed == {partition: PartitionReassignment((1, 2, 4, 3), (4,), (3,))}
            with pytest.raises(NotControllerError):
                await first.list_partition_reassignments(None)

            await c.brokers[1].update_isr(partition, start.with_isr((1, 2, 3, 4)))
            final = await c.wait_state(partition, lambda s: 3 not in s.isr, "3 out of the ISR")
            assert brief(final) == (1, (1, 2, 4), start.leader_epoch + 1)  # 1 stays the leader

            async def settled() -> bool:
                found = await c.admin.get_topic_assignment("t")
                return found is not None and found.partitions[0] == ReplicaAssignment((1, 2, 4))

            await eventually(settled, "the final assignment")

    run(scenario())


def test_refused_moves(connect: str, zk_server: ZooKeeper) -> None:
    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2, 3)
            controller = await c.start_controller(9)
            await c.create_topic("t", {0: [1, 2, 3]})
            await c.wait_leader(tp("t", 0), 1, [1, 2, 3])
            await c.wait_live(controller, {1, 2, 3})
            results = await controller.alter_partition_reassignments(
                {
                    tp("t", 0): (1, 2, 7),
                    tp("t", 1): (1, 2, 3),
                    tp("nope", 0): (1, 2, 3),
                }
            )
            assert codes(results) == {
                tp("t", 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                tp("t", 1): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                tp("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            }
            error = results[tp("t", 0)]
            assert error is not None
            assert str(error) == (
                "Replica assignment has brokers that are not alive. Replica list: [7], live broker list: [1, 2, 3]"
            )
            assignment = await c.admin.get_topic_assignment("t")
            assert assignment is not None
            assert assignment.partitions[0] == ReplicaAssignment((1, 2, 3))

    run(scenario())


def test_a_replica_dropped_by_a_new_target_leaves_the_isr_at_once(connect: str, zk_server: ZooKeeper) -> None:
    async def scenario() -> None:
        async with cluster(connect, zk_server) as c:
            await c.start_brokers(1, 2, 3, 4, 5)
            controller = await c.start_controller(9)
            await c.create_topic("t", {0: [1, 2, 3]})
            partition = tp("t", 0)
            start = await c.wait_leader(partition, 1, [1, 2, 3])
            await c.wait_live(controller, {1, 2, 3, 4, 5})
            await controller.alter_partition_reassignments({partition: (1, 4, 5)})
            joined = await c.brokers[1].update_isr(partition, start.with_isr((1, 2, 3, 4)))  # 5 still lags
            assert not isinstance(joined, BadVersion)
            await c.settle(controller)
            assert await controller.list_partition_reassignments(None) != {}

            await controller.alter_partition_reassignments({partition: (1, 2, 5)})
            state = await c.state(partition)
            assert brief(state) == (1, (1, 2, 3), start.leader_epoch + 1)
            assignment = await c.admin.get_topic_assignment("t")
            assert assignment is not None
            assert assignment.partitions[0] == ReplicaAssignment((1, 2, 5, 3), (5,), (3,))

    run(scenario())
