"""Generated encoders write an array's quiet elements (nullable fields null, records empty bytes, tagged
fields at their defaults) in one ``struct`` call (issue 17: a 1,000-partition Fetch answer): the bytes equal
the general code's, at every message and version, for elements quiet, partly quiet and not quiet."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.protocol.message_strategies import all_message_classes, message_strategy

from tidelog.protocol._compiler import _build_encoder, _default_of, encoder, generated_source
from tidelog.protocol.messages import FetchResponse, Message
from tidelog.protocol.schema import Struct, in_range

ALL_CLASSES = all_message_classes()
FEW = settings(max_examples=max(4, settings().max_examples // 10))


def _quiet(value: Struct, version: int, flexible: bool, keep: int) -> None:
    """Quiet the struct ``value`` in place, but for the field at index ``keep`` (-1: every field)."""
    for i, f in enumerate(type(value).FIELDS):
        if i == keep or not in_range(f.versions, version):
            continue
        if flexible and in_range(f.tagged_versions, version):
            setattr(value, f.name, _default_of(type(value), f.name))
        elif f.type == "records":
            setattr(value, f.name, b"")
        elif in_range(f.nullable_versions, version) and (f.type in ("string", "bytes") or f.is_array):
            setattr(value, f.name, None)
    if flexible and keep == -1:
        value.unknown_tagged_fields = None


def _quiet_arrays(value: Any, version: int, flexible: bool, counter: list[int]) -> None:
    """Quiet the elements of every array of structs reachable from ``value``: the first of each array
    wholly, the next but for one field (a different one each time), the rest left as drawn."""
    if not isinstance(value, Struct):
        return
    for f in dataclasses.fields(value):
        item = getattr(value, f.name)
        if isinstance(item, list):
            for index, element in enumerate(item):
                _quiet_arrays(element, version, flexible, counter)
                if isinstance(element, Struct) and index < 2:
                    counter[0] += 1
                    keep = -1 if index == 0 else counter[0] % len(type(element).FIELDS)
                    _quiet(element, version, flexible, keep)
        else:
            _quiet_arrays(item, version, flexible, counter)


def _bytes(encode: Any, message: Message) -> bytes:
    out: list[Any] = []
    encode(message, out, [])
    return b"".join(out)


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda cls: cls.NAME)
@FEW
@given(data=st.data())
def test_quiet_elements_encode_as_the_general_code(cls: type[Message], data: st.DataObject) -> None:
    lo, hi = cls.VALID_VERSIONS
    for version in range(lo, hi + 1):
        message = data.draw(message_strategy(cls, version), label=f"{cls.NAME} v{version}")
        general = _build_encoder(cls, version, quiet=False)
        assert _bytes(encoder(cls, version), message) == _bytes(general, message)
        _quiet_arrays(message, version, cls.is_flexible(version), [0])
        assert _bytes(encoder(cls, version), message) == _bytes(general, message)


def test_an_idle_fetch_partition_is_one_call() -> None:
    """A Fetch answer's idle partition (no records, every tagged field at its default): one chunk."""
    partition = FetchResponse.PartitionData(
        partition_index=3, high_watermark=7, aborted_transactions=None, records=b""
    )
    response = FetchResponse(
        responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=[partition])]
    )
    for version in (4, 12, 16):
        out: list[Any] = []
        encoder(FetchResponse, version)(response, out, [])
        general: list[Any] = []
        _build_encoder(FetchResponse, version, quiet=False)(response, general, [])
        assert b"".join(out) == b"".join(general)
        assert len(out) == len(general) - (5 if version >= 12 else 3)  # six chunks (four before v12) made one
        assert "continue" in generated_source(FetchResponse, version, encoder=True)
