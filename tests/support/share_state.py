"""Test support for the share state coordinator (``__share_group_state``) in process: one group ``g``, one
share-partition (``TOPIC_ID``, partition 0), and its Read/Write/DeleteShareGroupState requests, each
answered with what the coordinator says and the records it would write."""

from __future__ import annotations

import uuid

from tidelog.coordinator.common import CoordinatorRecord
from tidelog.coordinator.share.state_coordinator import ShareStateCoordinator
from tidelog.protocol.messages import (
    DeleteShareGroupStateRequest,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)

TOPIC_ID = uuid.UUID(int=7)


def loading_coordinator() -> ShareStateCoordinator:
    """A coordinator of one ``__share_group_state`` partition that has begun loading it (replay next)."""
    coordinator = ShareStateCoordinator(1)
    coordinator.begin_loading(0, 0)
    return coordinator


def write_state(
    coordinator: ShareStateCoordinator, *, state_epoch: int, leader_epoch: int, start: int
) -> tuple[int, list[CoordinatorRecord]]:
    """WriteShareGroupState of the share-partition's start offset: (its error code, the records written)."""
    request = WriteShareGroupStateRequest(
        group_id="g",
        topics=[
            WriteShareGroupStateRequest.WriteStateData(
                topic_id=TOPIC_ID,
                partitions=[
                    WriteShareGroupStateRequest.PartitionData(
                        partition=0, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start
                    )
                ],
            )
        ],
    )
    result = coordinator.handle(request, 0, now_ms=0)
    assert isinstance(result.response, WriteShareGroupStateResponse)
    return result.response.results[0].partitions[0].error_code, result.records.get(0, [])


def read_state(
    coordinator: ShareStateCoordinator, leader_epoch: int
) -> tuple[ReadShareGroupStateResponse.PartitionResult, list[CoordinatorRecord]]:
    """ReadShareGroupState of the share-partition: (its result, the records written, e.g. a new epoch)."""
    request = ReadShareGroupStateRequest(
        group_id="g",
        topics=[
            ReadShareGroupStateRequest.ReadStateData(
                topic_id=TOPIC_ID,
                partitions=[ReadShareGroupStateRequest.PartitionData(partition=0, leader_epoch=leader_epoch)],
            )
        ],
    )
    result = coordinator.handle(request, 0, now_ms=0)
    assert isinstance(result.response, ReadShareGroupStateResponse)
    return result.response.results[0].partitions[0], result.records.get(0, [])


def delete_state(coordinator: ShareStateCoordinator) -> list[CoordinatorRecord]:
    """DeleteShareGroupState of the share-partition: the records written (a tombstone if it existed)."""
    request = DeleteShareGroupStateRequest(
        group_id="g",
        topics=[
            DeleteShareGroupStateRequest.DeleteStateData(
                topic_id=TOPIC_ID, partitions=[DeleteShareGroupStateRequest.PartitionData(partition=0)]
            )
        ],
    )
    return coordinator.handle(request, 0, now_ms=0).records.get(0, [])
