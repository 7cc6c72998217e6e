"""The fuzz frame generator: deterministic per seed, every kind of frame, every advertised key."""

from __future__ import annotations

import struct

from tidelog.protocol.messages import REQUEST_TYPES
from tidelog.testing.wire_fuzz import FrameGenerator

ADVERTISED = {key: cls.VALID_VERSIONS for key, cls in REQUEST_TYPES.items() if key not in (4, 5, 6, 7)}


def test_same_seed_same_frames_other_seed_other_frames() -> None:
    first = [FrameGenerator(5, ADVERTISED).next_frame() for _ in range(1)]
    one, two, other = (
        FrameGenerator(5, ADVERTISED),
        FrameGenerator(5, ADVERTISED),
        FrameGenerator(6, ADVERTISED),
    )
    frames = [one.next_frame() for _ in range(100)]
    assert frames == [two.next_frame() for _ in range(100)]
    assert frames != [other.next_frame() for _ in range(100)]
    assert first[0] == frames[0]


def test_kinds_keys_and_framing() -> None:
    generator = FrameGenerator(1, ADVERTISED)
    frames = [generator.next_frame() for _ in range(1500)]
    assert {f.kind for f in frames} == {
        "valid",
        "tagged",
        "unadvertised",
        "mutated",
        "wrong_length",
        "truncated",
        "oversize",
        "garbage",
    }
    valid = [f for f in frames if f.kind == "valid"]
    assert {f.api_key for f in valid} == set(ADVERTISED)
    for frame in valid:
        (size,) = struct.unpack_from(">i", frame.data)
        assert size == len(frame.data) - 4
        assert struct.unpack_from(">hh", frame.data, 4) == (frame.api_key, frame.api_version)
        low, high = ADVERTISED[frame.api_key]
        assert low <= frame.api_version <= high
    assert all(f.ends_stream for f in frames if f.kind in ("wrong_length", "truncated", "oversize"))
