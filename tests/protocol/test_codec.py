"""Codec behaviour beyond round trips: headers, errors, tagged fields, records and region chunks."""

from __future__ import annotations

import array
import contextlib
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.protocol import codec
from tidelog.protocol.codec import (
    UnsupportedVersionError,
    decode,
    decode_request,
    decode_request_header,
    decode_response,
    decode_versioned,
    encode,
    encode_chunks,
    encode_request,
    encode_response,
    encode_versioned,
    freeze_response,
    request_header_version,
    response_header_version,
    thaw_response,
)
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    REQUEST_TYPES,
    ApiKey,
    ApiVersionsRequest,
    ApiVersionsResponse,
    ConsumerGroupHeartbeatResponse,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    RequestHeader,
    ShareFetchResponse,
)
from tidelog.protocol.primitives import INT32, LocalProtocolError, RemoteProtocolError


class Region:
    """A stand-in for storage's FileRegion: not bytes-like, has ``nbytes``."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


def _header(
    api_key: int, version: int, correlation_id: int = 42, client_id: str | None = "c"
) -> RequestHeader:
    return RequestHeader(
        request_api_key=api_key,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    )


def _produce(records: Any = b"batch") -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=1500,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="orders",
                partition_data=[ProduceRequest.PartitionProduceData(index=3, records=records)],
            )
        ],
    )


def _fetch_response(records: Any) -> FetchResponse:
    return FetchResponse(
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="t",
                partitions=[
                    FetchResponse.PartitionData(partition_index=0, high_watermark=10, records=records)
                ],
            )
        ]
    )


# -- header versions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "version", "request_version", "response_version"),
    [
        (ApiKey.PRODUCE, 8, 1, 0),
        (ApiKey.PRODUCE, 9, 2, 1),
        (ApiKey.FETCH, 11, 1, 0),
        (ApiKey.FETCH, 12, 2, 1),
        (ApiKey.METADATA, 9, 2, 1),
        (ApiKey.API_VERSIONS, 2, 1, 0),
        (ApiKey.API_VERSIONS, 3, 2, 0),  # ApiVersions responses always use header v0
        (ApiKey.CONTROLLED_SHUTDOWN, 0, 0, 0),
        (ApiKey.CONTROLLED_SHUTDOWN, 1, 1, 0),
        (ApiKey.SASL_HANDSHAKE, 1, 1, 0),
        (ApiKey.SHARE_FETCH, 1, 2, 1),
    ],
)
def test_header_versions(api_key: int, version: int, request_version: int, response_version: int) -> None:
    assert request_header_version(api_key, version) == request_version
    assert response_header_version(api_key, version) == response_version


def test_request_header_layouts() -> None:
    body = ApiVersionsRequest(client_software_name="tl", client_software_version="1")
    v0 = encode_request(_header(ApiKey.API_VERSIONS, 0, correlation_id=7, client_id="ab"), body)
    assert v0 == b"\x00\x00\x00\x0c" + b"\x00\x12\x00\x00\x00\x00\x00\x07" + b"\x00\x02ab"
    v3 = encode_request(_header(ApiKey.API_VERSIONS, 3, correlation_id=7, client_id=None), body)
    # header v2: classic nullable client id (never compact), then an empty tagged-field section
    assert v3 == b"\x00\x00\x00\x11" + b"\x00\x12\x00\x03\x00\x00\x00\x07" + b"\xff\xff" + b"\x00" + (
        b"\x03tl" + b"\x021" + b"\x00"
    )


def test_response_header_layouts() -> None:
    metadata = encode_response(
        _header(ApiKey.METADATA, 9, correlation_id=5), MetadataResponse(cluster_id=None)
    )
    assert metadata == [
        (
            b"\x00\x00\x00\x15"
            b"\x00\x00\x00\x05\x00"  # correlation id + header tagged fields (v1)
            b"\x00\x00\x00\x00"  # throttle_time_ms
            b"\x01"  # brokers: empty compact array
            b"\x00"  # cluster_id: null
            b"\xff\xff\xff\xff"  # controller_id -1
            b"\x01"  # topics: empty
            b"\x80\x00\x00\x00"  # cluster_authorized_operations (v8-v10), default INT32_MIN
            b"\x00"  # tagged fields
        )
    ]
    [api_versions] = encode_response(_header(ApiKey.API_VERSIONS, 3, correlation_id=5), ApiVersionsResponse())
    assert isinstance(api_versions, bytes)
    assert api_versions[4:8] == b"\x00\x00\x00\x05"
    assert api_versions[8:10] == b"\x00\x00"  # error code follows the correlation id directly (header v0)


# -- unsupported versions and keys -------------------------------------------------------------


def test_unsupported_api_versions_version_carries_header_and_is_answered_in_v0_layout() -> None:
    frame = (
        b"\x00\x12\x00\x63\x00\x00\x01\x00"  # ApiVersions v99, correlation id 256
        b"\x00\x04kcat"  # client id
        b"\x00\x09something\x00"  # some future body
    )
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(frame)
    error = info.value
    assert error.error_code is ErrorCode.UNSUPPORTED_VERSION
    assert error.header == RequestHeader(
        request_api_key=18, request_api_version=99, correlation_id=256, client_id="kcat"
    )
    answer = ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)],
    )
    assert encode_response(error.header, answer, version=0) == [
        (
            b"\x00\x00\x00\x10"
            b"\x00\x00\x01\x00"  # correlation id, response header v0
            b"\x00\x23"  # error code 35
            b"\x00\x00\x00\x01"  # int32 array count (v0 layout)
            b"\x00\x12\x00\x00\x00\x04"  # key 18: versions 0-4
        )
    ]


def test_unknown_api_key_is_unsupported() -> None:
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(b"\x03\xe7\x00\x00\x00\x00\x00\x09\xff\xff")
    assert info.value.header.request_api_key == 999
    assert info.value.header.correlation_id == 9
    assert info.value.header.client_id is None


def test_unsupported_version_with_unreadable_client_id_still_reports_the_header() -> None:
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(b"\x00\x00\x00\x63\x00\x00\x00\x01\x00\x50ab")  # Produce v99, truncated client id
    assert info.value.header.correlation_id == 1
    assert info.value.header.client_id is None


def test_decode_request_header_alone() -> None:
    frame = encode_request(_header(ApiKey.PRODUCE, 9, correlation_id=3), _produce())[4:]
    assert decode_request_header(frame) == _header(ApiKey.PRODUCE, 9, correlation_id=3)


def test_request_header_cut_at_any_byte_is_malformed_in_every_header_version() -> None:
    # Header v2 (Produce 9), v1 (Produce 8): the common case's one-step read falls back to the full one,
    # which reports the cut; a whole header decodes.
    for version, header_size in ((9, 8 + 2 + 3 + 1), (8, 8 + 2 + 3)):
        frame = encode_request(_header(ApiKey.PRODUCE, version, client_id="abc"), _produce())[4:]
        assert decode_request_header(frame[:header_size]).client_id == "abc"
        for cut in range(header_size):
            with pytest.raises(RemoteProtocolError):
                decode_request_header(frame[:cut])


# -- malformed input ---------------------------------------------------------------------------

SAMPLE_FRAMES = [
    encode_request(_header(ApiKey.PRODUCE, 3), _produce())[4:],
    encode_request(_header(ApiKey.PRODUCE, 9), _produce())[4:],
    encode_request(
        _header(ApiKey.METADATA, 12),
        MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="a", topic_id=UUID(int=5))]),
    )[4:],
    encode_request(
        _header(ApiKey.FETCH, 12),
        FetchRequest(
            max_wait_ms=500,
            topics=[
                FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchPartition(partition=1)])
            ],
            cluster_id="tagged",
        ),
    )[4:],
]


@pytest.mark.parametrize(
    "frame", SAMPLE_FRAMES, ids=["produce-v3", "produce-v9", "metadata-v12", "fetch-v12"]
)
def test_every_truncation_is_a_remote_protocol_error(frame: bytes) -> None:
    decode_request(frame)
    for cut in range(len(frame)):
        with pytest.raises(RemoteProtocolError):
            decode_request(frame[:cut])


def test_malformed_errors_are_invalid_request() -> None:
    with pytest.raises(RemoteProtocolError) as info:
        decode_request(SAMPLE_FRAMES[0][:-1])
    assert info.value.error_code is ErrorCode.INVALID_REQUEST


def test_trailing_bytes_after_a_body_are_ignored() -> None:
    header, body = decode_request(SAMPLE_FRAMES[1] + b"\x00\x01\x02")
    assert header.correlation_id == 42
    assert body == _produce()


def test_null_in_a_non_nullable_field_is_rejected() -> None:
    frame = bytearray(encode_request(_header(ApiKey.PRODUCE, 3), _produce())[4:])
    # body: transactional_id (nullable, 2 bytes), acks, timeout, topics count, then the topic name length
    name_at = 11 + 2 + 2 + 4 + 4
    assert frame[name_at : name_at + 2] == b"\x00\x06"
    frame[name_at : name_at + 2] = b"\xff\xff"
    with pytest.raises(RemoteProtocolError, match="Name"):
        decode_request(bytes(frame))


def test_huge_array_count_is_rejected_without_allocating() -> None:
    frame = (
        _header_bytes(ApiKey.PRODUCE, 3)
        + b"\xff\xff"
        + b"\x00\x01"
        + b"\x00\x00\x00\x10"
        + b"\x7f\xff\xff\xff"
    )
    with pytest.raises(RemoteProtocolError, match="TopicData"):
        decode_request(frame)


def _header_bytes(api_key: int, version: int) -> bytes:
    return api_key.to_bytes(2, "big") + version.to_bytes(2, "big") + b"\x00\x00\x00\x01" + b"\x00\x01c"


REQUEST_VERSIONS = [
    (key, v)
    for key, cls in REQUEST_TYPES.items()
    for v in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1)
]


def _typed_outcome(frame: bytes) -> None:
    """Decoding succeeds or raises one of the two typed errors; anything else fails the test."""
    with contextlib.suppress(RemoteProtocolError, UnsupportedVersionError):
        decode_request(frame)


@settings(max_examples=500)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_typed_errors(frame: bytes) -> None:
    _typed_outcome(frame)


@settings(max_examples=1000)
@given(st.sampled_from(REQUEST_VERSIONS), st.binary(max_size=96), st.booleans())
def test_arbitrary_bodies_after_a_valid_header_decode_or_raise_typed_errors(
    key_version: tuple[int, int], body: bytes, flexible_header: bool
) -> None:
    api_key, version = key_version
    header = _header_bytes(api_key, version)
    if request_header_version(api_key, version) >= 2:
        header += b"\x00"
    _typed_outcome(header + body)


@settings(max_examples=500)
@given(
    st.sampled_from(SAMPLE_FRAMES),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
)
def test_corrupted_frames_decode_or_raise_typed_errors(frame: bytes, edits: list[tuple[int, int]]) -> None:
    corrupted = bytearray(frame)
    for position, value in edits:
        corrupted[position % len(corrupted)] = value
    _typed_outcome(bytes(corrupted))


# -- records -----------------------------------------------------------------------------------


def test_records_decode_as_zero_copy_slices_of_the_frame() -> None:
    frame = SAMPLE_FRAMES[1]
    _, body = decode_request(frame)
    assert isinstance(body, ProduceRequest)
    records = body.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview)
    assert records.obj is frame
    assert bytes(records) == b"batch"


def test_null_records_round_trip_as_none() -> None:
    frame = encode_request(_header(ApiKey.PRODUCE, 9), _produce(records=None))[4:]
    _, body = decode_request(frame)
    assert isinstance(body, ProduceRequest)
    assert body.topic_data[0].partition_data[0].records is None


def test_region_objects_become_their_own_chunks() -> None:
    region = Region(1000)
    response = FetchResponse(
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="t",
                partitions=[
                    FetchResponse.PartitionData(partition_index=0, records=region),
                    FetchResponse.PartitionData(partition_index=1, records=b"inline"),
                    FetchResponse.PartitionData(partition_index=2, records=Region(0)),
                ],
            )
        ]
    )
    for version in (4, 11, 12, 16):
        chunks = encode_response(_header(ApiKey.FETCH, version), response)
        assert len(chunks) == 3
        first, middle, last = chunks
        assert middle is region
        assert isinstance(first, bytes)
        assert isinstance(last, bytes)
        assert INT32.unpack_from(first)[0] == len(first) - 4 + 1000 + len(last)
        # the region's length prefix ends the first chunk; the empty region is just a zero length
        length_prefix = b"\x00\x00\x03\xe8" if version < 12 else b"\xe9\x07"  # 1000 (+1 as a compact varint)
        assert first.endswith(length_prefix)
        # substituting the region's bytes gives a frame our decoder reads back
        frame = first + b"r" * 1000 + last
        _, decoded = decode_response(frame[4:], ApiKey.FETCH, version)
        assert isinstance(decoded, FetchResponse)
        partitions = decoded.responses[0].partitions
        assert [bytes(p.records) for p in partitions if isinstance(p.records, memoryview)] == [
            b"r" * 1000,
            b"inline",
            b"",
        ]
    with pytest.raises(LocalProtocolError, match="region"):
        encode(response, 12)
    assert encode_chunks(response, 12)[1] is region


def test_a_frozen_response_is_encoded_once_per_version_until_thawed() -> None:
    """A frozen body's frames are the ones its fields give, for any correlation id and version; its body
    bytes are made once per version (a change after freezing does not show), and again after thawing."""
    response = _fetch_response(b"records")
    fresh = {
        (version, cid): encode_response(_header(ApiKey.FETCH, version, correlation_id=cid), response)
        for version in (4, 12, 16)
        for cid in (7, 2**31 - 1)
    }
    freeze_response(response)
    try:
        for (version, cid), frame in fresh.items():
            assert encode_response(_header(ApiKey.FETCH, version, correlation_id=cid), response) == frame
        response.responses[0].partitions[0].records = b"changed"  # broken promise: the frozen bytes stay
        assert encode_response(_header(ApiKey.FETCH, 12, correlation_id=7), response) == fresh[12, 7]
        header = _header(ApiKey.FETCH, 12, correlation_id=2**31)
        with pytest.raises(LocalProtocolError, match="correlation id"):
            encode_response(header, response)
    finally:
        thaw_response(response)
    [frame] = encode_response(_header(ApiKey.FETCH, 12, correlation_id=7), response)
    assert isinstance(frame, bytes)
    assert frame.endswith(encode(response, 12))  # the change shows now
    assert frame != fresh[12, 7][0]
    assert id(response) not in codec._FROZEN
    thaw_response(response)  # thawing twice is harmless


def test_a_frozen_response_with_a_region_is_encoded_each_time() -> None:
    region = Region(10)
    response = FetchResponse(
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="t", partitions=[FetchResponse.PartitionData(partition_index=0, records=region)]
            )
        ]
    )
    plain = encode_response(_header(ApiKey.FETCH, 12), response)
    freeze_response(response)
    try:
        for _ in range(2):
            chunks = encode_response(_header(ApiKey.FETCH, 12), response)
            assert chunks == plain
            assert chunks[1] is region
    finally:
        thaw_response(response)
    assert id(response) not in codec._FROZEN


@pytest.mark.parametrize("size", [0, 1, 4000, 4096, 4097, 70_000])
def test_a_response_frame_is_its_size_then_header_then_body_either_side_of_the_prefix_copy(size: int) -> None:
    """Small frames get their size prefix by a copy, larger ones by a second join: the same frame."""
    response = _fetch_response(b"r" * size)
    for version in (4, 12, 16):
        [frame] = encode_response(_header(ApiKey.FETCH, version, correlation_id=7), response)
        assert isinstance(frame, bytes)
        assert INT32.unpack_from(frame)[0] == len(frame) - 4
        header = b"\x00\x00\x00\x07" + (b"\x00" if version >= 12 else b"")
        assert frame[4:].startswith(header)
        assert frame[4 + len(header) :] == encode(response, version)


def test_memoryview_records_of_any_format_are_sent_as_bytes() -> None:
    ints = memoryview(b"\x00\x01\x02\x03").cast("i")
    frame = encode_response(_header(ApiKey.FETCH, 11), _fetch_response(ints))
    assert len(frame) == 1
    assert frame[0].endswith(b"\x00\x00\x00\x04\x00\x01\x02\x03")  # type: ignore[union-attr]


def test_null_records_in_a_version_where_they_are_not_nullable_are_sent_empty() -> None:
    response = ShareFetchResponse(
        responses=[
            ShareFetchResponse.ShareFetchableTopicResponse(
                partitions=[ShareFetchResponse.PartitionData(partition_index=0, records=None)]
            )
        ]
    )
    decoded = decode(ShareFetchResponse, 1, encode(response, 1))
    records = decoded.responses[0].partitions[0].records
    assert records is not None
    assert bytes(records) == b""  # type: ignore[arg-type]


# -- tagged fields -----------------------------------------------------------------------------


def test_known_tagged_fields_are_written_only_when_not_default() -> None:
    default = encode(FetchRequest(), 12)
    with_cluster = encode(FetchRequest(cluster_id="c1"), 12)
    assert default.endswith(b"\x01\x00")  # rack id "" then an empty tagged-field section
    assert with_cluster.endswith(b"\x01" + b"\x01" + b"\x00" + b"\x03" + b"\x03c1")  # 1 field: tag 0, size 3
    assert decode(FetchRequest, 12, with_cluster).cluster_id == "c1"
    assert decode(FetchRequest, 12, default).cluster_id is None


def test_tagged_struct_fields_round_trip() -> None:
    partition = FetchResponse.PartitionData(
        partition_index=1, current_leader=FetchResponse.LeaderIdAndEpoch(leader_id=3, leader_epoch=9)
    )
    response = FetchResponse(
        responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=[partition])]
    )
    decoded = decode(FetchResponse, 12, encode(response, 12))
    assert decoded.responses[0].partitions[0].current_leader == FetchResponse.LeaderIdAndEpoch(
        leader_id=3, leader_epoch=9
    )
    assert decoded.responses[0].partitions[0].snapshot_id == FetchResponse.SnapshotId()
    # below the flexible versions the tagged field does not exist and decodes to its default
    assert decode(FetchResponse, 11, encode(response, 11)).responses[0].partitions[0].current_leader == (
        FetchResponse.LeaderIdAndEpoch()
    )


def test_unknown_tagged_fields_are_kept_and_re_encoded() -> None:
    message = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name="a", unknown_tagged_fields={7: b"\x01\x02"})],
        unknown_tagged_fields={0: b"", 300: b"x"},
    )
    encoded = encode(message, 12)
    assert encoded.endswith(b"\x02" + b"\x00\x00" + b"\xac\x02\x01x")  # tags 0 and 300, ascending
    decoded = decode(MetadataRequest, 12, encoded)
    assert decoded == message
    assert encode(decoded, 12) == encoded


def test_unknown_tags_next_to_known_ones() -> None:
    request = FetchRequest(cluster_id="c", unknown_tagged_fields={9: b"\xaa"})
    decoded = decode(FetchRequest, 12, encode(request, 12))
    assert decoded.cluster_id == "c"
    assert decoded.unknown_tagged_fields == {9: b"\xaa"}


def test_unknown_tagged_fields_in_request_header_are_kept() -> None:
    header = _header(ApiKey.METADATA, 12)
    header.unknown_tagged_fields = {3: b"hi"}
    frame = encode_request(header, MetadataRequest())
    decoded_header, _ = decode_request(frame[4:])
    assert decoded_header.unknown_tagged_fields == {3: b"hi"}


def test_tagged_field_with_a_wrong_size_is_rejected() -> None:
    encoded = bytearray(encode(FetchRequest(cluster_id="c1"), 12))
    # tag 0 declared size 3 -> claim 2: the value (compact string of 2 bytes + length) overruns it
    position = len(encoded) - 4
    assert encoded[position] == 3
    encoded[position] = 2
    with pytest.raises(RemoteProtocolError):
        decode(FetchRequest, 12, bytes(encoded))


# -- structs, defaults, absent fields ----------------------------------------------------------


def test_nullable_struct_field_marker() -> None:
    empty = ConsumerGroupHeartbeatResponse(assignment=None)
    present = ConsumerGroupHeartbeatResponse(assignment=ConsumerGroupHeartbeatResponse.Assignment())
    encoded_empty = encode(empty, 0)
    encoded_present = encode(present, 0)
    assert encoded_empty.endswith(b"\xff\x00")  # null marker, then the message's tagged fields
    assert encoded_present.endswith(b"\x01" + b"\x01\x00" + b"\x00")  # marker, empty topics + tags, tags
    assert decode(ConsumerGroupHeartbeatResponse, 0, encoded_empty).assignment is None
    assert decode(ConsumerGroupHeartbeatResponse, 0, encoded_present) == present


def test_fields_absent_from_a_version_are_dropped_and_decode_to_defaults() -> None:
    request = _produce()
    request.transactional_id = "txn"
    decoded = decode(ProduceRequest, 2, encode(request, 2))
    assert decoded.transactional_id is None
    assert decoded.acks == -1


def test_spec_defaults() -> None:
    partition = FetchRequest.FetchPartition()
    assert partition.current_leader_epoch == -1
    assert partition.log_start_offset == -1
    assert FetchRequest().replica_id == -1
    assert FetchRequest().max_bytes == 0x7FFFFFFF
    assert FetchRequest().cluster_id is None
    assert ProduceRequest().transactional_id is None
    assert MetadataResponse.MetadataResponseTopic().topic_authorized_operations == -(2**31)
    assert MetadataRequest.MetadataRequestTopic().topic_id == UUID(int=0)


# -- encoding errors ---------------------------------------------------------------------------


def test_encoding_errors_are_local_protocol_errors() -> None:
    with pytest.raises(LocalProtocolError):
        encode(MetadataResponse(topics=[MetadataResponse.MetadataResponseTopic(name=None)]), 5)
    with pytest.raises(LocalProtocolError):
        encode(ProduceRequest(acks=40000), 3)
    with pytest.raises(LocalProtocolError, match="no version 12"):
        encode(ProduceRequest(), 12)
    with pytest.raises(LocalProtocolError, match="does not match"):
        encode_request(_header(ApiKey.FETCH, 3), _produce())
    with pytest.raises(LocalProtocolError, match="does not match"):
        encode_response(_header(ApiKey.FETCH, 3), MetadataResponse())
    with pytest.raises(LocalProtocolError, match="longer than"):
        encode(ProduceRequest(topic_data=[ProduceRequest.TopicProduceData(name="x" * 0x8000)]), 3)


def test_decode_with_an_unsupported_version_is_a_local_error() -> None:
    with pytest.raises(LocalProtocolError):
        decode(ProduceRequest, 99, b"")
    with pytest.raises(LocalProtocolError):
        decode_response(b"\x00\x00\x00\x00", 9999, 0)


def test_generated_source_is_available_for_review() -> None:
    source = codec.generated_source(ProduceRequest, 9)
    assert source.startswith("def decode(m, p, end):")
    assert "unknown_tagged_fields" in source
    assert codec.generated_source(ProduceRequest, 9, encoder=True).startswith("def encode(o, out, rg):")


def test_records_from_a_bytearray_frame_are_writable_views() -> None:
    frame = bytearray(SAMPLE_FRAMES[1])
    _, body = decode_request(frame)
    assert isinstance(body, ProduceRequest)
    records = body.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview)
    assert not records.readonly
    records[0:1] = b"B"
    assert bytes(frame[-len(b"batch") - 3 : -3]) == b"Batch"  # records, then three empty tag sections


def test_other_buffer_types_are_accepted_as_records() -> None:
    frame = encode_response(_header(ApiKey.FETCH, 11), _fetch_response(array.array("B", b"abc")))
    assert frame[0].endswith(b"\x00\x00\x00\x03abc")  # type: ignore[union-attr]


def test_versioned_data_structs_as_in_join_group_metadata() -> None:
    subscription = ConsumerProtocolSubscription(
        topics=["orders", "payments"], user_data=b"ud", owned_partitions=[], generation_id=4, rack_id="r"
    )
    encoded = encode_versioned(subscription, 1)
    assert encoded == (
        b"\x00\x01"  # version
        b"\x00\x00\x00\x02\x00\x06orders\x00\x08payments"  # topics
        b"\x00\x00\x00\x02ud"  # user data
        b"\x00\x00\x00\x00"  # owned partitions (v1+)
    )
    version, decoded = decode_versioned(ConsumerProtocolSubscription, encoded)
    assert version == 1
    assert decoded.topics == ["orders", "payments"]
    assert decoded.generation_id == -1  # v2+ only: default
    # a newer version than ours is read as our newest (later versions only append fields)
    newer = b"\x00\x63" + encode(subscription, 3) + b"future fields"
    version, decoded = decode_versioned(ConsumerProtocolSubscription, newer)
    assert version == 99
    assert decoded == subscription
    with pytest.raises(RemoteProtocolError):
        decode_versioned(ConsumerProtocolSubscription, b"\xff\xff")
    with pytest.raises(RemoteProtocolError):
        decode_versioned(ConsumerProtocolAssignment, b"\x00")


@given(
    version=st.sampled_from([(ApiKey.CONTROLLED_SHUTDOWN, 0), (ApiKey.PRODUCE, 8), (ApiKey.PRODUCE, 9)]),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    client_id=st.none() | st.text(max_size=8),
    tags=st.none() | st.dictionaries(st.integers(0, 1000), st.binary(max_size=4), min_size=1, max_size=3),
)
def test_hand_written_header_codec_matches_the_generated_request_header_schema(
    version: tuple[int, int], correlation_id: int, client_id: str | None, tags: dict[int, bytes] | None
) -> None:
    api_key, api_version = version
    header_version = request_header_version(api_key, api_version)
    header = RequestHeader(
        request_api_key=api_key,
        request_api_version=api_version,
        correlation_id=correlation_id,
        client_id=client_id if header_version >= 1 else "",
        unknown_tagged_fields=tags if header_version >= 2 else None,
    )
    body = ProduceRequest() if api_key == ApiKey.PRODUCE else REQUEST_TYPES[api_key]()
    frame = encode_request(header, body)
    generic = encode(header, header_version)
    assert frame[4 : 4 + len(generic)] == generic
    assert decode(RequestHeader, header_version, generic) == header
    assert decode_request_header(frame[4:]) == header
