"""Share-group membership persisted in ``__consumer_offsets`` (KIP-932, as Kafka 4 does), between the share
runtime, which runs the groups, and the group runtime, which owns the partitions.

Invariants:
- After every change of a share group (a member joins, leaves, is fenced, changes its subscription or
  epoch; the group is deleted) the runtime hands :meth:`ShareMembership.write` the group's image, and the
  group coordinator's shard appends the records of the difference (:mod:`tidelog.coordinator.group.
  share_group_records`) and the heartbeat is answered once they are committed (on a single node the append
  is the commit); a failed append answers it with the error, and the partition is loaded again.
- A group whose ``__consumer_offsets`` partition is not loaded here yet is COORDINATOR_LOAD_IN_PROGRESS to
  its members (:meth:`ShareMembership.ready`); when the partition begins loading or is unloaded the runtime drops its
  groups, and once it is loaded adopts the groups it holds (members keep their ids and epochs, their
  sessions start again).
- A group deleted (DeleteGroups) is answered once its tombstones are committed
  (:meth:`ShareMembership.delete`): a failover of the coordinator's partition right after the answer
  never brings the deleted group back from its earlier records.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import overload

from tidelog.coordinator.group.share_group_records import ShareGroupImage
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse
from tidelog.server.dispatch import Answer
from tidelog.server.group_runtime import GroupRuntime

__all__ = ["ShareMembership"]

_HEARTBEAT_VERSION = 1
"""The version an append failure's error response is built at (ShareGroupHeartbeat's responses are alike)."""


class ShareMembership:
    """Share groups' durable part, kept by this broker's group coordinator."""

    def __init__(self, groups: GroupRuntime) -> None:
        self._groups = groups

    def partition_for(self, group_id: str) -> int:
        return self._groups.partition_for(group_id)

    def listen(self, on_partition: Callable[[int, dict[str, ShareGroupImage] | None], None]) -> None:
        """``on_partition(partition, images)``: the partition's share groups once it is loaded, None when it
        begins loading or is unloaded (its groups are not this runtime's to run until then)."""

        def heard(partition: int, loaded: bool) -> None:
            images = self._groups.coordinator.share_group_images(partition) if loaded else None
            on_partition(partition, images)

        self._groups.add_load_listener(heard)

    def loading(self, group_id: str) -> bool:
        """Whether ``group_id``'s coordinator partition is being loaded here (its share group is not known yet)."""
        return self._groups.coordinator.is_loading(self.partition_for(group_id))

    def ready(self, group_id: str) -> ErrorCode:
        """Whether ``group_id``'s coordinator partition is loaded here (NONE), so its share group may change;
        else COORDINATOR_LOAD_IN_PROGRESS (``__consumer_offsets`` is created first if it does not exist)."""
        coordinator = self._groups.coordinator
        partition = self.partition_for(group_id)
        if coordinator.shard(partition) is None and not coordinator.owned_partitions:
            self._groups.ensure_offsets_topic()
        shard = coordinator.shard(partition)
        return (
            ErrorCode.NONE
            if shard is not None and not shard.loading
            else ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        )

    def delete(self, group_id: str) -> Answer:
        """Tombstone ``group_id``'s share group (a DeleteGroups); a ShareGroupHeartbeat response, NONE or the
        error, once the tombstones are committed (the deleting request waits for it, as a heartbeat does)."""
        return self.write(
            group_id,
            None,
            ShareGroupHeartbeatRequest(group_id=group_id, member_id="", member_epoch=-1),
            ShareGroupHeartbeatResponse(),
        )

    @overload
    def write(self, group_id: str, image: ShareGroupImage | None) -> None: ...

    @overload
    def write(
        self,
        group_id: str,
        image: ShareGroupImage | None,
        request: ShareGroupHeartbeatRequest,
        response: ShareGroupHeartbeatResponse,
    ) -> Answer: ...

    def write(
        self,
        group_id: str,
        image: ShareGroupImage | None,
        request: ShareGroupHeartbeatRequest | None = None,
        response: ShareGroupHeartbeatResponse | None = None,
    ) -> Answer | None:
        """Persist ``group_id``'s share group as ``image`` (None: deleted); with a heartbeat's ``request``,
        its ``response`` once the records are committed (or the error if they cannot be)."""
        result = self._groups.coordinator.write_share_group(group_id, image)
        if isinstance(result, ErrorCode):
            return None if request is None else ShareGroupHeartbeatResponse(error_code=result)
        if request is None:
            self._groups.apply(result)
            return None
        result.response = response
        return self._groups.apply(result, request, _HEARTBEAT_VERSION)
