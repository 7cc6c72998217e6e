"""Micro-benchmarks of the hot-path codec operations (never asserted by tests).

.venv/bin/python bench/bench_codec.py
"""

from __future__ import annotations

import timeit

from tidelog.protocol import codec
from tidelog.protocol.messages import (
    FetchRequest,
    FetchResponse,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
    RequestHeader,
)


class Region:
    """Stands in for storage's FileRegion."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


def produce_frame(version: int, partitions: int, batch: bytes) -> bytes:
    body = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="bench-topic",
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=i, records=batch) for i in range(partitions)
                ],
            )
        ],
    )
    header = RequestHeader(
        request_api_key=0, request_api_version=version, correlation_id=1, client_id="bench"
    )
    return codec.encode_request(header, body)[4:]


def fetch_response(partitions: int, records: object) -> FetchResponse:
    return FetchResponse(
        throttle_time_ms=0,
        session_id=0,
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="bench-topic",
                partitions=[
                    FetchResponse.PartitionData(
                        partition_index=i,
                        high_watermark=1000,
                        last_stable_offset=1000,
                        log_start_offset=0,
                        records=records,  # type: ignore[arg-type]
                    )
                    for i in range(partitions)
                ],
            )
        ],
    )


def metadata_response(topics: int, partitions: int) -> MetadataResponse:
    return MetadataResponse(
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9092)],
        cluster_id="cluster",
        controller_id=1,
        topics=[
            MetadataResponse.MetadataResponseTopic(
                name=f"topic-{t}",
                partitions=[
                    MetadataResponse.MetadataResponsePartition(
                        partition_index=p, leader_id=1, replica_nodes=[1], isr_nodes=[1]
                    )
                    for p in range(partitions)
                ],
            )
            for t in range(topics)
        ],
    )


def bench(label: str, func: object, number: int = 20000) -> None:
    seconds = min(timeit.repeat(func, number=number, repeat=5))  # type: ignore[arg-type]
    print(f"{label:<58} {seconds / number * 1e6:8.2f} us")


def main() -> None:
    batch = bytes(1024)
    header = RequestHeader(request_api_key=1, request_api_version=11, correlation_id=1, client_id="bench")
    for version in (7, 9):
        for partitions in (1, 4, 16):
            frame = produce_frame(version, partitions, batch)
            bench(
                f"decode_request Produce v{version}, {partitions} partitions",
                lambda f=frame: codec.decode_request(f),
            )
    for version in (11, 12):
        header = RequestHeader(
            request_api_key=1, request_api_version=version, correlation_id=1, client_id="b"
        )
        for partitions in (1, 4, 16):
            response = fetch_response(partitions, Region(1 << 20))
            bench(
                f"encode_response Fetch v{version}, {partitions} partitions (regions)",
                lambda r=response, h=header: codec.encode_response(h, r),
            )
        response = fetch_response(4, batch)
        bench(
            f"encode_response Fetch v{version}, 4 partitions (bytes)",
            lambda r=response, h=header: codec.encode_response(h, r),
        )
    fetch_request = FetchRequest(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52428800,
        topics=[
            FetchRequest.FetchTopic(
                topic="bench-topic",
                partitions=[FetchRequest.FetchPartition(partition=i, fetch_offset=100) for i in range(4)],
            )
        ],
    )
    for version in (11, 12):
        header = RequestHeader(
            request_api_key=1, request_api_version=version, correlation_id=1, client_id="b"
        )
        frame = codec.encode_request(header, fetch_request)[4:]
        bench(f"decode_request Fetch v{version}, 4 partitions", lambda f=frame: codec.decode_request(f))
    produce_response = ProduceResponse(
        responses=[
            ProduceResponse.TopicProduceResponse(
                name="bench-topic",
                partition_responses=[
                    ProduceResponse.PartitionProduceResponse(index=i, base_offset=5) for i in range(4)
                ],
            )
        ]
    )
    for version in (7, 9):
        header = RequestHeader(
            request_api_key=0, request_api_version=version, correlation_id=1, client_id="b"
        )
        bench(
            f"encode_response Produce v{version}, 4 partitions",
            lambda h=header: codec.encode_response(h, produce_response),
        )
    for version in (5, 12):
        header = RequestHeader(
            request_api_key=3, request_api_version=version, correlation_id=1, client_id="b"
        )
        response = metadata_response(10, 8)
        bench(
            f"encode_response Metadata v{version}, 10 topics x 8 partitions",
            lambda h=header, r=response: codec.encode_response(h, r),
            number=2000,
        )


if __name__ == "__main__":
    main()
