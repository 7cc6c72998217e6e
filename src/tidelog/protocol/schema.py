"""The schema model behind the generated Kafka message classes.

Invariants:

- A version range is a ``(lowest, highest)`` pair of inclusive ints; an open range ("3+") ends at
  :data:`OPEN` (0x7FFF, the largest int16 version).
- Every generated class is a slotted, keyword-only dataclass deriving from :class:`Struct`; its
  ``FIELDS`` lists the spec's fields in wire order (including tagged ones), each a :class:`FieldSpec`.
- A ``FieldSpec.type`` is the spec's type string verbatim: a primitive (``int32``, ``string``,
  ``records`` ...), ``[]T`` for arrays, or a struct name, resolved with ``getattr`` on the top-level
  message class (all structs of one message, common structs included, are nested in it).
- Defaults live in the dataclass only; this module and the codec read them from there.

This module is stdlib only and is imported by ``tidelog.protocol._generated.messages``.
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple, Protocol, TypeAlias
from uuid import UUID

__all__ = [
    "OPEN",
    "PRIMITIVE_TYPES",
    "ZERO_UUID",
    "ApiMessage",
    "FieldSpec",
    "Message",
    "Records",
    "RecordsRegion",
    "Request",
    "Response",
    "Struct",
    "VersionRange",
    "in_range",
]

OPEN = 0x7FFF
"""Upper bound of an open-ended version range such as ``"3+"``."""

ZERO_UUID = UUID(int=0)
"""Kafka's ``Uuid.ZERO_UUID``: the default of every uuid field."""

PRIMITIVE_TYPES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint16",
        "uint32",
        "float64",
        "string",
        "bytes",
        "uuid",
        "records",
    }
)

VersionRange: TypeAlias = tuple[int, int]


def in_range(versions: VersionRange | None, version: int) -> bool:
    """Whether ``version`` lies in ``versions`` (``None`` is the empty range)."""
    return versions is not None and versions[0] <= version <= versions[1]


class RecordsRegion(Protocol):
    """A slice of a file that the server sends with ``os.sendfile``; only its size matters here."""

    @property
    def nbytes(self) -> int: ...


Records: TypeAlias = bytes | bytearray | memoryview | RecordsRegion
"""What a ``records`` field holds: record-batch bytes (decoded as a zero-copy memoryview of the
frame) or, when encoding, a region object emitted as its own chunk."""


class FieldSpec(NamedTuple):
    """One field of a Kafka message spec, as the generator read it."""

    name: str
    """Python attribute name: the spec name in snake_case."""
    kafka_name: str
    """The spec's name (CamelCase)."""
    type: str
    """The spec's type string, e.g. ``int32``, ``[]string``, ``[]TopicData``, ``LeaderIdAndEpoch``."""
    versions: VersionRange
    nullable_versions: VersionRange | None = None
    tag: int | None = None
    tagged_versions: VersionRange | None = None
    ignorable: bool = False
    flexible: bool = True
    """False when the spec says ``"flexibleVersions": "none"`` (RequestHeader.ClientId): the field
    keeps its classic encoding even in flexible versions."""

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        """The element type of an array, or the type itself."""
        return self.type[2:] if self.type.startswith("[]") else self.type

    @property
    def is_struct(self) -> bool:
        """Whether the (element) type is a struct rather than a primitive."""
        return self.element_type not in PRIMITIVE_TYPES


class Struct:
    """Base of every generated struct: the message classes and the structs nested in them."""

    __slots__ = ()
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = ()


class Message(Struct):
    """A top-level schema: a request, response, header or data (e.g. ConsumerProtocolSubscription)."""

    __slots__ = ()
    NAME: ClassVar[str] = ""
    KIND: ClassVar[str] = ""
    VALID_VERSIONS: ClassVar[VersionRange] = (0, 0)
    FLEXIBLE_VERSIONS_FROM: ClassVar[int | None] = None
    """First flexible version (compact encodings, tagged fields); ``None`` if never flexible."""
    LATEST_VERSION_UNSTABLE: ClassVar[bool] = False
    DEPRECATED_VERSIONS: ClassVar[VersionRange | None] = None

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return cls.FLEXIBLE_VERSIONS_FROM is not None and version >= cls.FLEXIBLE_VERSIONS_FROM

    @classmethod
    def supports(cls, version: int) -> bool:
        return cls.VALID_VERSIONS[0] <= version <= cls.VALID_VERSIONS[1]


class ApiMessage(Message):
    """A request or response body of one API key."""

    __slots__ = ()
    API_KEY: ClassVar[int] = -1
    LISTENERS: ClassVar[tuple[str, ...]] = ()


class Request(ApiMessage):
    __slots__ = ()


class Response(ApiMessage):
    __slots__ = ()
