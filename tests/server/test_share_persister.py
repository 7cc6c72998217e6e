"""The share persister (:mod:`tidelog.server.share_persister`) against a share coordinator on another broker,
played by a fake inter-broker client: writes are retried until committed (NONE), one share-partition's
writes reach the coordinator in order, carry this broker's leader epoch, fail after their timeout, and a
fenced write fails at once; loaded states are taken once by the runtime's synchronous read."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tidelog.coordinator.share.state_coordinator import SHARE_STATE_TOPIC
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)
from tidelog.protocol.schema import Request, Response
from tidelog.server.metadata_cache import MetadataCache, PartitionInfo, TopicInfo
from tidelog.server.share_persister import SharePersister, ShareStateWriteError

JOBS = uuid.UUID(int=1)
GROUP = "g"


@dataclass
class _Replica:
    leader_epoch: int


class _Replicas:
    def get(self, topic: str, index: int) -> _Replica | None:
        return _Replica(7) if (topic, index) == ("jobs", 0) else None


class _Local:
    """This broker's share-state runtime: never asked (the coordinator is broker 2)."""

    def __init__(self, metadata: MetadataCache) -> None:
        self._metadata = metadata

    def ensure_topic(self) -> TopicInfo | None:
        return self._metadata.topic(SHARE_STATE_TOPIC)

    def partition_for(self, _key: str) -> int:
        return 0

    def handle_request(self, request: Request, api_version: int) -> Any:
        raise AssertionError(f"asked locally: {request}")


class _Client:
    """Broker 2, answering each request with the next of ``answers`` (ErrorCode per request)."""

    def __init__(self, answer: Callable[[Request], ErrorCode]) -> None:
        self.sent: list[tuple[int, Request]] = []
        self._answer = answer
        self.gate: asyncio.Event | None = None

    async def send(self, node_id: int, request: Request, version: int, **_kw: Any) -> Response:
        self.sent.append((node_id, request))
        if self.gate is not None:
            await self.gate.wait()
        error = self._answer(request)
        if isinstance(request, WriteShareGroupStateRequest):
            return WriteShareGroupStateResponse(
                results=[
                    WriteShareGroupStateResponse.WriteStateResult(
                        topic_id=JOBS,
                        partitions=[
                            WriteShareGroupStateResponse.PartitionResult(partition=0, error_code=error)
                        ],
                    )
                ]
            )
        return ReadShareGroupStateResponse(
            results=[
                ReadShareGroupStateResponse.ReadStateResult(
                    topic_id=JOBS,
                    partitions=[
                        ReadShareGroupStateResponse.PartitionResult(
                            partition=0, error_code=error, start_offset=42
                        )
                    ],
                )
            ]
        )


def _persister(client: _Client, timeout_ms: int = 5000) -> SharePersister:
    metadata = MetadataCache(1, "c")
    metadata.put_topic(TopicInfo(SHARE_STATE_TOPIC, uuid.uuid4(), (PartitionInfo(0, 2, 0, (2, 1), (2, 1)),)))
    metadata.put_topic(TopicInfo("jobs", JOBS, (PartitionInfo(0, 1, 7, (1, 2), (1, 2)),)))
    return SharePersister(
        local=_Local(metadata),  # type: ignore[arg-type]
        metadata=metadata,
        replicas=_Replicas(),  # type: ignore[arg-type]
        client=client,  # type: ignore[arg-type]
        retry_backoff_ms=5,
        timeout_ms=timeout_ms,
    )


def _write(start: int) -> WriteShareGroupStateRequest:
    return WriteShareGroupStateRequest(
        group_id=GROUP,
        topics=[
            WriteShareGroupStateRequest.WriteStateData(
                topic_id=JOBS,
                partitions=[WriteShareGroupStateRequest.PartitionData(partition=0, start_offset=start)],
            )
        ],
    )


def _starts(client: _Client) -> list[int]:
    return [
        r.topics[0].partitions[0].start_offset
        for _n, r in client.sent
        if isinstance(r, WriteShareGroupStateRequest)
    ]


def test_a_write_is_retried_until_committed_and_carries_the_leader_epoch() -> None:
    answers = iter([ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NONE])
    client = _Client(lambda _r: next(answers))

    async def scenario() -> None:
        answer = _persister(client).handle_request(_write(5), 0)
        assert not isinstance(answer, Response)
        await answer
        assert [n for n, _r in client.sent] == [2, 2, 2]
        assert {r.topics[0].partitions[0].leader_epoch for _n, r in client.sent} == {7}  # type: ignore[attr-defined]

    asyncio.run(scenario())


def test_writes_of_one_share_partition_are_sent_in_order() -> None:
    client = _Client(lambda _r: ErrorCode.NONE)

    async def scenario() -> None:
        persister = _persister(client)
        client.gate = asyncio.Event()
        first = persister.handle_request(_write(1), 0)
        second = persister.handle_request(_write(2), 0)
        for _ in range(5):
            await asyncio.sleep(0)
        assert _starts(client) == [1]  # the second waits for the first's answer
        client.gate.set()
        await asyncio.gather(first, second)  # type: ignore[arg-type]
        assert _starts(client) == [1, 2]

    asyncio.run(scenario())


def test_a_write_fails_after_its_timeout_and_at_once_when_fenced() -> None:
    async def scenario() -> None:
        stuck = _persister(_Client(lambda _r: ErrorCode.NOT_COORDINATOR), timeout_ms=100)
        with pytest.raises(ShareStateWriteError, match="no committed answer in time"):
            await stuck.handle_request(_write(1), 0)  # type: ignore[misc]
        fenced_client = _Client(lambda _r: ErrorCode.FENCED_LEADER_EPOCH)
        fenced = _persister(fenced_client)
        with pytest.raises(ShareStateWriteError, match="newer share-partition leader"):
            await fenced.handle_request(_write(1), 0)  # type: ignore[misc]
        assert len(fenced_client.sent) == 1

    asyncio.run(scenario())


def test_a_loaded_state_is_read_once() -> None:
    client = _Client(lambda _r: ErrorCode.NONE)
    read = ReadShareGroupStateRequest(
        group_id=GROUP,
        topics=[
            ReadShareGroupStateRequest.ReadStateData(
                topic_id=JOBS, partitions=[ReadShareGroupStateRequest.PartitionData(partition=0)]
            )
        ],
    )

    async def scenario() -> None:
        persister = _persister(client)
        await persister.load([(GROUP, JOBS, 0)])
        assert persister.is_loaded((GROUP, JOBS, 0))
        loaded = persister.handle_request(read, 0)
        assert isinstance(loaded, ReadShareGroupStateResponse)
        assert loaded.results[0].partitions[0].start_offset == 42
        again = persister.handle_request(read, 0)  # not loaded any more: a load starts, the runtime retries
        assert isinstance(again, ReadShareGroupStateResponse)
        assert again.results[0].partitions[0].error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        sent_reads = [r for _n, r in client.sent if isinstance(r, ReadShareGroupStateRequest)]
        assert sent_reads[0].topics[0].partitions[0].leader_epoch == 7

    asyncio.run(scenario())
