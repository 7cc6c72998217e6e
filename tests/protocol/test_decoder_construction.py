"""Generated decoders (and constructors) build structs without calling ``__init__`` (issue 17, per-request cost): checked
against decoders built the reference way, calling each dataclass ``__init__``, at every message and version."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.protocol.message_strategies import all_message_classes, message_strategy

from tidelog.protocol._compiler import Decoder, _build_decoder, byte_view, constructor, decoder
from tidelog.protocol.codec import (
    LocalProtocolError,
    RemoteProtocolError,
    decode_request,
    encode,
    encode_request,
)
from tidelog.protocol.messages import FetchRequest, Message, ProduceRequest, RequestHeader
from tidelog.protocol.schema import Struct

ALL_CLASSES = all_message_classes()
FEW = settings(max_examples=max(4, settings().max_examples // 10))
_REFERENCE: dict[tuple[type[Message], int], Decoder] = {}


def _reference(cls: type[Message], version: int) -> Decoder:
    key = (cls, version)
    if key not in _REFERENCE:
        _REFERENCE[key] = _build_decoder(cls, version, construct="init")
    return _REFERENCE[key]


def _mutables(value: Any) -> list[Any]:
    """Every list, dict and struct reachable from ``value`` (the objects two decodes must not share)."""
    found: list[Any] = []
    if isinstance(value, Struct):
        found.append(value)
        for f in dataclasses.fields(value):
            found += _mutables(getattr(value, f.name))
    elif isinstance(value, list):
        found.append(value)
        for item in value:
            found += _mutables(item)
    elif isinstance(value, dict):
        found.append(value)
    return found


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda cls: cls.NAME)
@FEW
@given(data=st.data())
def test_inline_construction_equals_init_construction(cls: type[Message], data: st.DataObject) -> None:
    lo, hi = cls.VALID_VERSIONS
    for version in range(lo, hi + 1):
        message = data.draw(message_strategy(cls, version), label=f"{cls.NAME} v{version}")
        m = byte_view(encode(message, version))
        inline, end = decoder(cls, version)(m, 0, len(m))
        by_init, init_end = _reference(cls, version)(m, 0, len(m))
        assert end == init_end == len(m)
        assert inline == by_init == message  # dataclass eq: same classes, every field (absent ones too)
        again, _ = decoder(cls, version)(m, 0, len(m))
        shared = {id(x) for x in _mutables(inline)} & {id(x) for x in _mutables(again)}
        assert not shared, "two decodes share a list, dict or struct (a default given twice)"


def test_hot_requests_decode_inline() -> None:
    """The hot requests' decoders store fields directly; the reference calls the class."""
    from tidelog.protocol._compiler import generated_source

    for cls, version in ((ProduceRequest, 9), (FetchRequest, 12)):
        assert "_new(" in generated_source(cls, version)
        source = _reference(cls, version).__globals__["__source__"]
        assert "_new(" not in source


def test_absent_fields_get_their_defaults_and_fresh_factories() -> None:
    """A field absent from the version gets its default; a default_factory's value is new per decode."""
    request = FetchRequest(max_wait_ms=5, topics=[], forgotten_topics_data=[])
    m = byte_view(encode(request, 3))  # v3: no session, rack, cluster id or replica state
    first, _ = decoder(FetchRequest, 3)(m, 0, len(m))
    second, _ = decoder(FetchRequest, 3)(m, 0, len(m))
    assert first == FetchRequest(max_wait_ms=5, topics=[], forgotten_topics_data=[])
    assert first.session_epoch == -1
    assert first.rack_id == ""
    assert first.replica_state == FetchRequest.ReplicaState()
    assert first.replica_state is not second.replica_state


def test_known_tagged_fields_override_their_defaults() -> None:
    request = FetchRequest(max_wait_ms=1, topics=[], forgotten_topics_data=[], cluster_id="c-1")
    m = byte_view(encode(request, 12))
    decoded, _ = decoder(FetchRequest, 12)(m, 0, len(m))
    assert decoded.cluster_id == "c-1"
    assert decoded == request


def test_unknown_construct_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="construct"):
        _build_decoder(FetchRequest, 12, construct="fast")


@pytest.mark.parametrize("version", [3, 9])  # request header v1 and v2: the codec's hand-written fast path
def test_request_header_fast_path_equals_init(version: int) -> None:
    header = RequestHeader(
        request_api_key=0, request_api_version=version, correlation_id=-5, client_id="ç-id"
    )
    request = ProduceRequest(acks=1, timeout_ms=10, topic_data=[])
    decoded, _ = decode_request(encode_request(header, request)[4:])
    assert decoded == header
    assert [getattr(decoded, f.name) for f in dataclasses.fields(RequestHeader)] == [
        0,
        version,
        -5,
        "ç-id",
        None,
    ]


def _structs(cls: type[Struct]) -> list[type[Struct]]:
    """``cls`` and every struct class nested in it."""
    found = [cls]
    for value in vars(cls).values():
        if isinstance(value, type) and issubclass(value, Struct) and value is not cls:
            found += _structs(value)
    return found


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda cls: cls.NAME)
def test_constructor_builds_what_init_builds(cls: type[Message]) -> None:
    for struct in _structs(cls):
        make = constructor(struct)
        built, again = make(), make()
        assert built == struct()
        assert type(built) is struct
        shared = {id(x) for x in _mutables(built)} & {id(x) for x in _mutables(again)}
        assert not shared  # fresh lists, dicts and nested structs, as default factories give
        names = [f.name for f in dataclasses.fields(struct)][:2]
        values = [getattr(struct(), name) for name in names]
        assert constructor(struct, *names)(*values) == struct(**dict(zip(names, values, strict=True)))


def test_constructor_takes_the_named_fields_in_order() -> None:
    make = constructor(FetchRequest.FetchPartition, "fetch_offset", "partition")
    assert make(7, 3) == FetchRequest.FetchPartition(partition=3, fetch_offset=7)
    assert constructor(FetchRequest.FetchPartition, "fetch_offset", "partition") is make  # cached
    with pytest.raises(LocalProtocolError):
        constructor(FetchRequest.FetchPartition, "no_such_field")


@pytest.mark.parametrize("size", [0, 1, 126, 127, 128, 1000, 16382, 16383, 16384, 70_000])
@pytest.mark.parametrize("version", [8, 9, 11])
def test_records_length_in_every_varint_form(size: int, version: int) -> None:
    """A records (or bytes) length is read inline in its two-byte varint form (128 to 16383 bytes, after the
    +1 of a compact length) and by the general reader otherwise: every form decodes to the same records, and
    a frame cut after the varint's first byte is malformed, not an IndexError."""
    records = bytes(range(256)) * (size // 256) + bytes(size % 256)
    body = ProduceRequest(
        acks=1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t", partition_data=[ProduceRequest.PartitionProduceData(index=3, records=records)]
            )
        ],
    )
    frame = encode_request(
        RequestHeader(request_api_key=0, request_api_version=version, correlation_id=1, client_id="c"), body
    )[4:]
    _, decoded = decode_request(frame)
    assert isinstance(decoded, ProduceRequest)
    (partition,) = decoded.topic_data[0].partition_data
    assert (partition.index, bytes(partition.records)) == (3, records)
    assert (
        _reference(ProduceRequest, version)(
            byte_view(frame), len(frame) - len(encode(body, version)), len(frame)
        )[0]
        == decoded
    )
    cut = frame[: frame.index(b"\x00\x00\x00\x03") + 5]  # the partition index, then the length's first byte
    with pytest.raises(RemoteProtocolError):
        decode_request(cut)
