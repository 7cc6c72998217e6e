"""A replica fetcher's view of its leader broker (Kafka's ``RemoteLeaderEndPoint``): Fetch and ListOffsets
sent through the :class:`~tidelog.server.cluster.broker_client.BrokerClient`, each at the highest version
both sides speak.

Invariants:

- A request's version is the highest in ``[lowest, highest]`` that the leader advertised in its
  ApiVersions answer on the current connection. Before a connection is open the version is ``highest``;
  when the leader does not speak it, the client refuses it before sending
  (:class:`UnsupportedApiVersionError`, the connection now open and its versions known) and the request
  is built again at the negotiated version, once. A leader that speaks no version in the range fails the
  request with :class:`LeaderVersionError`; nothing is sent.
- Requests are built per version (``build(version)``): a field a version lacks is never set.
- ListOffsets is sent as a replica (``replica_id`` = this broker), so a tidelog or Kafka leader answers
  LATEST with its log end offset, not its high watermark; an error in the answer raises
  :class:`LeaderOffsetError` with the partition's error code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ApiKey, ListOffsetsRequest, ListOffsetsResponse
from tidelog.protocol.schema import Request, Response

from .broker_client import BrokerClient, UnsupportedApiVersionError

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "LeaderEndpoint",
    "LeaderOffsetError",
    "LeaderVersionError",
    "error_code",
    "pick_version",
]

R = TypeVar("R", bound=Response)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
_LIST_OFFSETS_VERSIONS = (1, ListOffsetsRequest.VALID_VERSIONS[1])  # v1: a single offset, not a list


def error_code(code: int) -> ErrorCode:
    """``code`` as an :class:`ErrorCode` (UNKNOWN_SERVER_ERROR for one this broker does not know)."""
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


class LeaderVersionError(Exception):
    """The leader speaks no version of a request in the range this broker needs."""


class LeaderOffsetError(Exception):
    """The leader answered a ListOffsets with an error for the partition."""

    def __init__(self, tp: TopicPartition, error_code: ErrorCode) -> None:
        super().__init__(f"ListOffsets of {tp} failed with {error_code.name}")
        self.error_code = error_code


def pick_version(
    versions: Mapping[int, tuple[int, int]] | None, api_key: int, lowest: int, highest: int
) -> int | None:
    """The highest version in ``[lowest, highest]`` the peer advertises for ``api_key`` (``versions`` None:
    not known yet, ``highest``); None when there is none."""
    if versions is None:
        return highest
    supported = versions.get(api_key)
    if supported is None:
        return None
    version = min(highest, supported[1])
    return version if version >= max(lowest, supported[0]) else None


class LeaderEndpoint:
    """Requests from this broker (``node_id``) to one leader broker (``leader_id``)."""

    def __init__(self, client: BrokerClient, leader_id: int, *, node_id: int) -> None:
        self._client = client
        self.leader_id = leader_id
        self._node_id = node_id

    def _peer_versions(self) -> Mapping[int, tuple[int, int]] | None:
        state = self._client.connection_state(self.leader_id)
        if state is None or not state.connected or not state.api_versions:
            return None
        return state.api_versions

    async def send(
        self,
        api_key: int,
        build: Callable[[int], Request],
        versions: tuple[int, int],
        *,
        expect: type[R],
        timeout_ms: int | None = None,
    ) -> tuple[R, int]:
        """Send ``build(v)`` at the negotiated version ``v``; returns the response and ``v``. Raises the
        client's errors, and :class:`LeaderVersionError`."""
        lowest, highest = versions
        for attempt in range(2):
            version = pick_version(self._peer_versions(), api_key, lowest, highest)
            if version is None:
                raise LeaderVersionError(
                    f"broker {self.leader_id} speaks no version {lowest}-{highest} of api key {api_key}"
                )
            try:
                response = await self._client.send(
                    self.leader_id, build(version), version, timeout_ms=timeout_ms, expect=expect
                )
            except UnsupportedApiVersionError:
                if attempt:
                    raise
                continue  # the connection is open now: its versions are known
            return response, version
        raise AssertionError("unreachable")

    async def list_offset(self, tp: TopicPartition, *, current_leader_epoch: int, timestamp: int) -> int:
        """The leader's EARLIEST (log start) or LATEST (log end, asked as a replica) offset of ``tp``."""

        def build(_version: int) -> ListOffsetsRequest:  # every field used is in every version from 1
            return ListOffsetsRequest(
                replica_id=self._node_id,
                isolation_level=0,
                topics=[
                    ListOffsetsRequest.ListOffsetsTopic(
                        name=tp.topic,
                        partitions=[
                            ListOffsetsRequest.ListOffsetsPartition(
                                partition_index=tp.partition,
                                current_leader_epoch=current_leader_epoch,
                                timestamp=timestamp,
                            )
                        ],
                    )
                ],
            )

        response, _version = await self.send(
            ApiKey.LIST_OFFSETS, build, _LIST_OFFSETS_VERSIONS, expect=ListOffsetsResponse
        )
        for topic in response.topics:
            if topic.name != tp.topic:
                continue
            for partition in topic.partitions:
                if partition.partition_index == tp.partition:
                    if partition.error_code != ErrorCode.NONE:
                        raise LeaderOffsetError(tp, error_code(partition.error_code))
                    return partition.offset
        raise LeaderOffsetError(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
