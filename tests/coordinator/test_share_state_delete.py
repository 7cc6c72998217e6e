"""The share coordinator's deletes (a share group or its offsets removed by an admin): a ShareSnapshot
tombstone per persisted share-partition, which a replay forgets; and the pending-records tagged value."""

from __future__ import annotations

import uuid

import pytest

from tidelog.coordinator.share.state_coordinator import ShareStateCoordinator
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    DeleteShareGroupStateRequest,
    DeleteShareGroupStateResponse,
    WriteShareGroupStateRequest,
)
from tidelog.protocol.share_pending import PendingRange, decode_pending, encode_pending

TOPIC = uuid.UUID(int=7)


def _write(group: str, partition: int, start: int) -> WriteShareGroupStateRequest:
    return WriteShareGroupStateRequest(
        group_id=group,
        topics=[
            WriteShareGroupStateRequest.WriteStateData(
                topic_id=TOPIC,
                partitions=[
                    WriteShareGroupStateRequest.PartitionData(
                        partition=partition, state_epoch=1, start_offset=start
                    )
                ],
            )
        ],
    )


def _delete(group: str, *partitions: int) -> DeleteShareGroupStateRequest:
    return DeleteShareGroupStateRequest(
        group_id=group,
        topics=[
            DeleteShareGroupStateRequest.DeleteStateData(
                topic_id=TOPIC,
                partitions=[DeleteShareGroupStateRequest.PartitionData(partition=p) for p in partitions],
            )
        ],
    )


def test_delete_writes_tombstones_that_a_replay_forgets() -> None:
    coordinator = ShareStateCoordinator(1)
    coordinator.begin_loading(0, 0)
    coordinator.complete_loading(0, 0)
    written = [coordinator.handle(_write("jobs", p, 10 + p), 0, now_ms=0) for p in (0, 1)]
    coordinator.handle(_write("other", 0, 5), 0, now_ms=0)
    assert coordinator.group_ids() == {"jobs", "other"}
    assert {k: v.start_offset for k, v in coordinator.states_of("jobs").items()} == {
        (TOPIC, 0): 10,
        (TOPIC, 1): 11,
    }

    result = coordinator.handle(_delete("jobs", 0, 1, 2), 0, now_ms=0)
    assert isinstance(result.response, DeleteShareGroupStateResponse)
    assert [p.error_code for p in result.response.results[0].partitions] == [ErrorCode.NONE] * 3
    tombstones = result.records[0]
    assert len(tombstones) == 2  # partition 2 had nothing persisted: nothing to delete
    assert all(r.value is None for r in tombstones)
    assert coordinator.group_ids() == {"other"}

    replayed = ShareStateCoordinator(1)
    replayed.begin_loading(0, 0)
    for record in [*(r for w in written for r in w.records[0]), *tombstones]:
        replayed.replay(0, record.key, record.value)
    replayed.complete_loading(0, 0)
    assert replayed.states_of("jobs") == {}


def test_delete_on_a_partition_not_owned_is_not_coordinator() -> None:
    result = ShareStateCoordinator(1).handle(_delete("jobs", 0), 0, now_ms=0)
    assert isinstance(result.response, DeleteShareGroupStateResponse)
    assert result.response.results[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
    assert not result.records


def test_pending_value_round_trip_and_refusals() -> None:
    ranges = [PendingRange("m-ü", 3, 7, 2, 1500), PendingRange("", 9, 9, 1, 0)]
    assert decode_pending(encode_pending(ranges)) == ranges
    assert decode_pending(encode_pending([])) == []
    with pytest.raises(ValueError, match="not a pending-records value"):
        decode_pending(encode_pending(ranges)[:-1])
    with pytest.raises(ValueError, match="trailing bytes"):
        decode_pending(encode_pending(ranges) + b"\0")
