"""A broker's failed log dir in a cluster (KIP-112 in ZooKeeper mode): the broker announces it in
``/log_dir_event_notification/log_dir_event_N``, the controller moves leadership and ISR membership off
the replicas in that dir (Kafka's ``processLogDirEventNotification`` / ``onReplicasBecomeOffline``).

Invariants:

- Broker side (:func:`announce_log_dir_failure`): once per failed dir (the replica manager tells it only the
  first time), one notification naming this broker and the partitions whose logs were in that dir.
- Controller side (:func:`process_log_dir_events`): for each notification of a live broker, every named
  partition it leads gets a new leader, the first live ISR member in assignment order other than that
  broker (the ISR loses it); where it follows, it leaves the ISR (never emptied). A partition with no other
  ISR member keeps its state (its replica there answers KAFKA_STORAGE_ERROR, as nothing else can serve it).
  Writes are conditional on the partition epoch (:class:`PartitionStateWriter`); the notifications are
  deleted after, fenced by the controller epoch. Out of the ISR, the replica is never elected again by a
  clean election; its broker's restart brings it back through the follower fetch (Kafka's way too).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from tidelog.protocol import TopicPartition
from tidelog.replication.controller_context import ControllerContext
from tidelog.replication.leader_and_isr import (
    LeaderAndIsr,
    controlled_shutdown_election,
    remove_replicas_from_isr,
)
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.zk.client import ControllerEpoch, KafkaZkClient

from .partition_state_writer import PartitionStateWriter

__all__ = ["announce_log_dir_failure", "decide_log_dir_failure", "process_log_dir_events"]

log = logging.getLogger("tidelog.cluster.log_dir_events")


def announce_log_dir_failure(
    zk: KafkaZkClient, replicas: ReplicaManager, node_id: int, tasks: set[asyncio.Task[None]]
) -> Callable[[Path], None]:
    """The replica manager's log dir failure listener of broker ``node_id``."""

    def failed(log_dir: Path) -> None:
        partitions = [TopicPartition(p.topic, p.index) for p in replicas.partitions_in(log_dir)]

        async def write() -> None:
            try:
                number = await zk.propagate_log_dir_event(node_id, partitions)
                log.info(
                    "announced the failure of log dir %s (%d partitions) as event %s",
                    log_dir,
                    len(partitions),
                    number,
                )
            except Exception:
                log.exception("announcing the failure of log dir %s failed", log_dir)

        task = asyncio.get_running_loop().create_task(write())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    return failed


def decide_log_dir_failure(
    context: ControllerContext, tp: TopicPartition, current: LeaderAndIsr, broker_id: int
) -> LeaderAndIsr | None:
    if current.leader == broker_id:
        return controlled_shutdown_election(
            context.replicas(tp), current, context.live_broker_ids, {broker_id}
        )
    if broker_id in current.isr and len(current.isr) > 1:
        return remove_replicas_from_isr(current, [broker_id])
    return None


async def process_log_dir_events(
    zk: KafkaZkClient,
    context: ControllerContext,
    states: PartitionStateWriter,
    controller_epoch: ControllerEpoch,
) -> None:
    events = await zk.get_log_dir_events()
    if not events:
        return
    offline: dict[int, set[TopicPartition]] = {}
    for broker_id, partitions in events.values():
        offline.setdefault(broker_id, set()).update(partitions)
    for broker_id, named_partitions in sorted(offline.items()):
        if broker_id not in context.live_or_shutting_down_broker_ids:
            continue  # a dead broker's replicas were handled by its failure
        named = [
            tp
            for tp in sorted(named_partitions)
            if tp in context.leadership
            and broker_id in context.replicas(tp)
            and not context.is_queued_for_deletion(tp.topic)
        ]
        log.info(
            "log dir failure on broker %d: moving %d partitions off its replicas there", broker_id, len(named)
        )

        def decide(tp: TopicPartition, state: LeaderAndIsr, broker: int = broker_id) -> LeaderAndIsr | None:
            return decide_log_dir_failure(context, tp, state, broker)

        await states.update(named, decide, reason=f"log dir failure on broker {broker_id}")
    await zk.delete_log_dir_events(events, controller_epoch)
