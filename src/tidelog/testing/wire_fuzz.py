"""Structure-aware request frames for fuzzing a live broker, generated from the message schemas.

:class:`FrameGenerator` turns a seed and the broker's ApiVersions answer into an endless stream of
:class:`FuzzFrame`: well-formed requests of every advertised key and version with random field values
(random tagged fields included), the same at versions and keys the broker does not advertise, byte-level
mutations of well-formed frames (size prefix kept consistent), frames whose size prefix lies, truncated
frames and size prefixes beyond ``socket.request.max.bytes``.

Invariants:

* Deterministic: the same seed and advertised versions give the same frames, byte for byte.
* Pure: no I/O, no clock; the runner (:mod:`tidelog.testing.wire_fuzz_run`) sends them.
* Values are biased towards what reaches deep code: small ints, edge ints (-1, 0, the type's min and max),
  the names of a few real topics and groups, and well-formed record batches (every codec) in ``records``
  fields; arrays hold at most three elements, so a frame stays small (a few KiB at most) unless it is an
  oversize-prefix frame, which sends only its prefix.
* ``FuzzFrame.ends_stream`` marks a frame after which the byte stream is no longer frame-aligned (a lying
  or oversize size prefix, a truncated frame): the runner closes the connection after sending it.
"""

from __future__ import annotations

import random
import struct
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tidelog.protocol.codec import encode_request
from tidelog.protocol.compression import Compression
from tidelog.protocol.messages import REQUEST_TYPES, RequestHeader
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.protocol.schema import FieldSpec, Message, Struct, in_range

__all__ = ["FrameGenerator", "FuzzFrame", "TOPICS", "GROUPS"]

TOPICS: Final = ("fuzz-a", "fuzz-b", "__consumer_offsets", "fuzz-compact")
"""Topic names the generator favours (the runner creates the ``fuzz-*`` ones before fuzzing)."""
GROUPS: Final = ("fuzz-group", "")
_INT_RANGES: Final = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}
_SIZE: Final = struct.Struct(">i")
_KINDS: Final = (
    ("valid", 45),
    ("tagged", 10),
    ("unadvertised", 8),
    ("mutated", 22),
    ("wrong_length", 6),
    ("truncated", 5),
    ("oversize", 2),
    ("garbage", 2),
)


@dataclass(frozen=True, slots=True)
class FuzzFrame:
    """Bytes to send as one unit, what they are, and whether the stream is misaligned after them."""

    kind: str
    api_key: int
    api_version: int
    data: bytes
    ends_stream: bool = False


class FrameGenerator:
    """Frames from ``seed``, aimed at a broker advertising ``advertised`` ({api key: (min, max)})."""

    def __init__(
        self, seed: int, advertised: Mapping[int, tuple[int, int]], *, max_request_bytes: int = 104857600
    ) -> None:
        self._random = random.Random(seed)
        self._advertised = dict(advertised)
        self._keys = sorted(k for k in self._advertised if k in REQUEST_TYPES)
        self._unserved = sorted(set(REQUEST_TYPES) - set(self._keys))
        self._max_request_bytes = max_request_bytes
        self._correlation = 0
        kinds, weights = zip(*_KINDS, strict=True)
        self._kinds: tuple[str, ...] = kinds
        self._weights: tuple[int, ...] = weights
        self._batches = [self._batch(codec) for codec in Compression] + [
            self._batch(Compression.NONE, keyless=True)
        ]

    def __iter__(self) -> Iterator[FuzzFrame]:
        while True:
            yield self.next_frame()

    def next_frame(self) -> FuzzFrame:
        kind = self._random.choices(self._kinds, self._weights)[0]
        return getattr(self, f"_{kind}")()  # type: ignore[no-any-return]

    # -- kinds ---------------------------------------------------------------------------------------

    def _valid(self, tagged: bool = False) -> FuzzFrame:
        rnd = self._random
        key = rnd.choice(self._keys)
        low, high = self._advertised[key]
        version = rnd.randint(low, high)
        return FuzzFrame("tagged" if tagged else "valid", key, version, self._encode(key, version, tagged))

    def _tagged(self) -> FuzzFrame:
        return self._valid(tagged=True)

    def _unadvertised(self) -> FuzzFrame:
        rnd = self._random
        if self._unserved and rnd.random() < 0.3:
            key = rnd.choice(self._unserved)
            cls = REQUEST_TYPES[key]
            version = rnd.randint(*cls.VALID_VERSIONS)
            return FuzzFrame("unadvertised", key, version, self._encode(key, version, False))
        key = rnd.choice(self._keys)
        low, high = self._advertised[key]
        cls = REQUEST_TYPES[key]
        version = rnd.randint(*cls.VALID_VERSIONS)
        data = bytearray(self._encode(key, version, False))
        claimed = rnd.choice([high + 1, high + rnd.randint(1, 100), low - 1, -1, 0x7FFF])
        _put_int16(data, 6, max(-(2**15), min(2**15 - 1, claimed)))
        if rnd.random() < 0.2:
            _put_int16(data, 4, rnd.choice([-1, 1000, 0x7FFF, max(REQUEST_TYPES) + 1]))
        return FuzzFrame("unadvertised", key, claimed, bytes(data))

    def _mutated(self) -> FuzzFrame:
        rnd = self._random
        base = self._valid()
        body = bytearray(base.data[4:])
        for _ in range(rnd.randint(1, 4)):
            op = rnd.random()
            if not body:
                break
            pos = rnd.randrange(len(body))
            if op < 0.5:
                body[pos] = rnd.randrange(256)
            elif op < 0.65:
                body[pos] = rnd.choice([0x00, 0xFF, 0x7F, 0x80])
            elif op < 0.8:
                del body[pos : pos + rnd.randint(1, 8)]
            elif op < 0.9:
                body[pos:pos] = rnd.randbytes(rnd.randint(1, 8))
            else:
                # an int32 length field somewhere: make it lie
                _put_int32(
                    body, min(pos, max(len(body) - 4, 0)), rnd.choice([-2, 0x7FFFFFFF, 1 << 20, 65535])
                )
        return FuzzFrame("mutated", base.api_key, base.api_version, _SIZE.pack(len(body)) + bytes(body))

    def _wrong_length(self) -> FuzzFrame:
        rnd = self._random
        base = self._valid()
        size = len(base.data) - 4
        lie = max(0, size + rnd.choice([-1, 1, -4, 4, rnd.randint(-size, size)]))
        return FuzzFrame(
            "wrong_length", base.api_key, base.api_version, _SIZE.pack(lie) + base.data[4:], True
        )

    def _truncated(self) -> FuzzFrame:
        base = self._valid()
        cut = self._random.randint(1, max(1, len(base.data) - 1))
        return FuzzFrame("truncated", base.api_key, base.api_version, base.data[:cut], True)

    def _oversize(self) -> FuzzFrame:
        rnd = self._random
        size = rnd.choice([self._max_request_bytes + 1, 0x7FFFFFFF, -1, -(2**31)])
        return FuzzFrame("oversize", -1, -1, _SIZE.pack(size) + rnd.randbytes(rnd.randint(0, 64)), True)

    def _garbage(self) -> FuzzFrame:
        rnd = self._random
        body = rnd.randbytes(rnd.randint(0, 64))
        return FuzzFrame("garbage", -1, -1, _SIZE.pack(len(body)) + body)

    # -- encoding ------------------------------------------------------------------------------------

    def _encode(self, key: int, version: int, tagged: bool) -> bytes:
        cls = REQUEST_TYPES[key]
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        for _ in range(8):
            body = self._struct(cls, cls, version, tagged, depth=0)
            header = RequestHeader(
                request_api_key=key,
                request_api_version=version,
                correlation_id=self._correlation,
                client_id=self._random.choice(["fuzz", "", "x" * 200, None]),
            )
            if tagged and self._random.random() < 0.5:
                header.unknown_tagged_fields = self._tagged_fields()
            try:
                return encode_request(header, body)
            except Exception:  # noqa: BLE001, S112 - a random value the codec refuses: draw again
                continue
        return encode_request(
            RequestHeader(request_api_key=key, request_api_version=version, correlation_id=self._correlation),
            cls(),
        )

    def _struct(self, root: type[Message], cls: type[Struct], version: int, tagged: bool, depth: int) -> Any:
        values: dict[str, Any] = {}
        for spec in cls.FIELDS:
            if not in_range(spec.versions, version):
                continue
            if spec.tag is not None and self._random.random() < 0.5:
                continue
            values[spec.name] = self._value(root, spec, spec.type, version, tagged, depth)
        instance = cls(**values)
        if tagged and self._random.random() < 0.3 and hasattr(instance, "unknown_tagged_fields"):
            instance.unknown_tagged_fields = self._tagged_fields()
        return instance

    def _value(
        self, root: type[Message], spec: FieldSpec, type_name: str, version: int, tagged: bool, depth: int
    ) -> Any:
        rnd = self._random
        if type_name == spec.type and in_range(spec.nullable_versions, version) and rnd.random() < 0.1:
            return None
        if type_name.startswith("[]"):
            count = rnd.choice([0, 1, 1, 1, 2, 3]) if depth < 3 else 0
            return [self._value(root, spec, type_name[2:], version, tagged, depth + 1) for _ in range(count)]
        if type_name in _INT_RANGES:
            return self._int(spec.name, *_INT_RANGES[type_name])
        if type_name == "bool":
            return rnd.random() < 0.5
        if type_name == "float64":
            return rnd.choice([0.0, 1.5, -1.0, 1e300])
        if type_name == "string":
            return self._string(spec.name)
        if type_name == "bytes":
            return rnd.randbytes(rnd.choice([0, 1, 8, 40]))
        if type_name == "records":
            return rnd.choice(self._batches) if rnd.random() < 0.7 else rnd.randbytes(rnd.randint(0, 80))
        if type_name == "uuid":
            return uuid.UUID(int=rnd.choice([0, 1, rnd.getrandbits(128)]))
        return self._struct(root, getattr(root, type_name), version, tagged, depth + 1)

    def _int(self, name: str, low: int, high: int) -> int:
        rnd = self._random
        if name.endswith("_ms") or "timeout" in name:
            # Waits the broker must honour (a long poll, a rebalance) are kept short: a fuzz frame that
            # legitimately parks its connection for days would stall the run, not find a bug.
            return max(low, min(high, rnd.choice([-1, 0, 1, 10, 100, 500])))
        roll = rnd.random()
        if roll < 0.55:
            return max(low, min(high, rnd.randint(-1, 5)))
        if roll < 0.8:
            return rnd.choice([low, high, -1 if low < 0 else 0, 0, 1])
        return rnd.randint(low, high)

    def _string(self, name: str) -> str:
        rnd = self._random
        roll = rnd.random()
        if "topic" in name or name == "name":
            if roll < 0.9:
                return rnd.choice(TOPICS)
        elif "group" in name and roll < 0.6:
            return rnd.choice(GROUPS)
        roll = rnd.random()
        if roll < 0.4:
            return rnd.choice(["", "a", "fuzz", "..", "x" * 250, "bad name!", "é", "\x00"])
        return "".join(rnd.choice("abcxyz-._019") for _ in range(rnd.randint(1, 20)))

    def _tagged_fields(self) -> dict[int, bytes]:
        rnd = self._random
        return {
            rnd.choice([0, 1, 7, 100, 2**31 - 1]): rnd.randbytes(rnd.randint(0, 12))
            for _ in range(rnd.randint(1, 3))
        }

    def _batch(self, codec: Compression, keyless: bool = False) -> bytes:
        records = [
            SimpleRecord(
                key=None if keyless else f"k{i}".encode(), value=b"v" * (i * 10), timestamp=1_700_000_000_000
            )
            for i in range(3)
        ]
        return encode_batch(records, compression=codec)


def _put_int16(buf: bytearray, pos: int, value: int) -> None:
    struct.pack_into(">h", buf, pos, value)


def _put_int32(buf: bytearray, pos: int, value: int) -> None:
    if pos + 4 <= len(buf):
        struct.pack_into(">i", buf, pos, value)
