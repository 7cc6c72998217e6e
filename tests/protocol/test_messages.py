"""Round trips of every generated message at every valid version, with schema-derived strategies."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.protocol.message_strategies import all_message_classes, message_strategy

from tidelog.protocol.codec import (
    decode,
    decode_request,
    decode_response,
    encode,
    encode_request,
    encode_response,
    request_header_version,
)
from tidelog.protocol.messages import REQUEST_TYPES, RESPONSE_TYPES, Message, RequestHeader
from tidelog.protocol.primitives import INT32

ALL_CLASSES = all_message_classes()
# A tenth of the profile's examples per (message, version): ~10 by default, ~200 with "thorough".
FEW = settings(max_examples=max(4, settings().max_examples // 10))


def _versions(cls: type[Message]) -> range:
    lo, hi = cls.VALID_VERSIONS
    return range(lo, hi + 1)


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda cls: cls.NAME)
@FEW
@given(data=st.data())
def test_body_round_trip_at_every_version(cls: type[Message], data: st.DataObject) -> None:
    for version in _versions(cls):
        message = data.draw(message_strategy(cls, version), label=f"{cls.NAME} v{version}")
        encoded = encode(message, version)
        decoded = decode(cls, version, encoded)
        assert decoded == message
        assert encode(decoded, version) == encoded


@pytest.mark.parametrize("cls", REQUEST_TYPES.values(), ids=lambda cls: cls.NAME)
@FEW
@given(
    data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1), client_id=st.none() | st.text(max_size=6)
)
def test_request_frame_round_trip_at_every_version(
    cls: type[Message], data: st.DataObject, correlation_id: int, client_id: str | None
) -> None:
    for version in _versions(cls):
        body: Any = data.draw(message_strategy(cls, version), label=f"{cls.NAME} v{version}")
        header = RequestHeader(
            request_api_key=cls.API_KEY,  # type: ignore[attr-defined]
            request_api_version=version,
            correlation_id=correlation_id,
            client_id=client_id,
        )
        frame = encode_request(header, body)
        assert INT32.unpack_from(frame)[0] == len(frame) - 4
        decoded_header, decoded_body = decode_request(frame[4:])
        if request_header_version(header.request_api_key, version) == 0:
            header.client_id = ""  # header v0 (ControlledShutdown v0) carries no client id
        assert decoded_header == header
        assert decoded_body == body
        assert encode_request(decoded_header, decoded_body) == frame


@pytest.mark.parametrize("cls", RESPONSE_TYPES.values(), ids=lambda cls: cls.NAME)
@FEW
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_response_frame_round_trip_at_every_version(
    cls: type[Message], data: st.DataObject, correlation_id: int
) -> None:
    api_key: int = cls.API_KEY  # type: ignore[attr-defined]
    for version in _versions(cls):
        body: Any = data.draw(message_strategy(cls, version), label=f"{cls.NAME} v{version}")
        request_header = RequestHeader(
            request_api_key=api_key, request_api_version=version, correlation_id=correlation_id
        )
        chunks = encode_response(request_header, body)
        assert len(chunks) == 1
        frame = chunks[0]
        assert isinstance(frame, bytes)
        assert INT32.unpack_from(frame)[0] == len(frame) - 4
        response_header, decoded = decode_response(frame[4:], api_key, version)
        assert response_header.correlation_id == correlation_id
        assert decoded == body
