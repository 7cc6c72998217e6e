"""Encode and decode Kafka requests, responses and headers: bytes in, typed messages out.

Invariants:

- Sans-I/O: no sockets, no asyncio, no clock. A *frame* is the bytes after the 4-byte size
  prefix; the ``encode_*`` functions return whole frames, size prefix included.
- For every (message class, version) a specialised encoder and decoder are compiled once from the
  class's ``FIELDS`` by ``tidelog.protocol._compiler`` (no per-call walking of the schema).
- Header versions follow Kafka: request header v2 for flexible versions, v1 otherwise (v0 only for
  ControlledShutdown v0); response header v1 for flexible versions, except ApiVersions, whose
  response header is always v0.
- Decoding never leaks ``IndexError``/``struct.error``/``UnicodeDecodeError``: malformed bytes raise
  :class:`RemoteProtocolError` (error code INVALID_REQUEST); an unknown api key or unsupported
  version raises :class:`UnsupportedVersionError` carrying the request header parsed so far.
  Unknown tagged fields are kept in ``unknown_tagged_fields`` and re-encoded. Bytes after a body
  are ignored (as Kafka does).
- ``records`` fields decode as zero-copy ``memoryview`` slices of the frame. When encoding they
  accept bytes-like objects or a *region object* (any object with an int ``nbytes`` that is not
  bytes-like), which :func:`encode_response` emits as its own chunk for ``os.sendfile``.
- Fields absent from the encoded version are skipped silently, whatever their value (Kafka would
  refuse non-ignorable ones); decoded messages carry defaults for them.
- A response body handed to :func:`freeze_response` is one its owner promises not to change (an answer
  shared by many requests, issue 17): :func:`encode_response` encodes it once per version and reuses those
  body bytes (a body with a region object is encoded each time) until :func:`thaw_response`. The frame is
  the one encoding it each time gives.
"""

from __future__ import annotations

import struct
from typing import Any, TypeAlias, TypeVar, cast

from tidelog.protocol._compiler import (
    Encoder,
    byte_view,
    check_version,
    constructor,
    decoder,
    encoder,
    generated_source,
)
from tidelog.protocol._generated.messages import REQUEST_TYPES, RESPONSE_TYPES, RequestHeader, ResponseHeader
from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.primitives import (
    INT16,
    INT32,
    Buffer,
    LocalProtocolError,
    RemoteProtocolError,
    read_tagged_fields,
    write_tagged_fields,
)
from tidelog.protocol.schema import Message, RecordsRegion, Request, Response

__all__ = [
    "Chunk",
    "LocalProtocolError",
    "RemoteProtocolError",
    "UnsupportedVersionError",
    "constructor",
    "decode",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "decode_versioned",
    "encode",
    "encode_chunks",
    "encode_request",
    "encode_response",
    "encode_versioned",
    "freeze_response",
    "generated_source",
    "request_header_version",
    "response_header_version",
    "thaw_response",
]

M = TypeVar("M", bound=Message)
Chunk: TypeAlias = bytes | RecordsRegion
"""One piece of an encoded frame: bytes, or a region object to be sent with ``os.sendfile``."""


API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7
_REQUEST_HEADER = struct.Struct(">hhi")
_new = object.__new__
_LOW_LEVEL_ERRORS = (struct.error, IndexError, ValueError, TypeError, OverflowError, KeyError)


class UnsupportedVersionError(KafkaProtocolError):
    """The request's api key is unknown or its version is outside the supported range.

    ``header`` holds what could be parsed (api key, version, correlation id and, when readable,
    client id) so the server can answer; for ApiVersions it answers error 35 in the v0 layout.
    """

    error_code = ErrorCode.UNSUPPORTED_VERSION

    def __init__(self, message: str, header: RequestHeader) -> None:
        super().__init__(message, ErrorCode.UNSUPPORTED_VERSION)
        self.header = header


# -- header versions ---------------------------------------------------------------------------


def request_header_version(api_key: int, api_version: int) -> int:
    """Request header version Kafka uses for this request (2 flexible, 1 classic, 0 legacy)."""
    cls = REQUEST_TYPES.get(api_key)
    if cls is not None and cls.is_flexible(api_version):
        return 2
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    return 1


def response_header_version(api_key: int, api_version: int) -> int:
    """Response header version: 1 for flexible versions, except ApiVersions (always 0)."""
    if api_key == API_VERSIONS_KEY:
        return 0
    cls = RESPONSE_TYPES.get(api_key)
    return 1 if cls is not None and cls.is_flexible(api_version) else 0


# -- running generated code --


def _malformed(cls: type[Message], version: int, exc: Exception) -> RemoteProtocolError:
    """What a decoder's low-level failure (or a nesting too deep for the stack) is reported as."""
    if isinstance(exc, RecursionError):
        return RemoteProtocolError(f"malformed {cls.NAME} v{version}: nesting too deep")
    return RemoteProtocolError(f"malformed {cls.NAME} v{version}: {type(exc).__name__}: {exc}")


def _run_decoder(cls: type[Message], version: int, m: memoryview, pos: int) -> tuple[Any, int]:
    decode_body = decoder(cls, version)
    try:
        return decode_body(m, pos, len(m))
    except RemoteProtocolError:
        raise
    except (*_LOW_LEVEL_ERRORS, RecursionError) as exc:
        raise _malformed(cls, version, exc) from None


def _run_encoder(message: Message, version: int, out: list[Any], regions: list[int]) -> None:
    cls = type(message)
    encode_body = encoder(cls, version)
    try:
        encode_body(message, out, regions)
    except KafkaProtocolError:
        raise
    except (struct.error, AttributeError, TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot encode {cls.__qualname__} v{version}: {exc}") from None


def _join(out: list[Any], regions: list[int]) -> list[Chunk]:
    """Join adjacent bytes-like chunks; region objects stay chunks of their own."""
    if not regions:
        return [b"".join(out)]
    chunks: list[Chunk] = []
    start = 0
    for index in regions:
        if index > start:
            chunks.append(b"".join(out[start:index]))
        chunks.append(out[index])
        start = index + 1
    if start < len(out):
        chunks.append(b"".join(out[start:]))
    return chunks


def _frame_size(out: list[Any], regions: list[int]) -> int:
    if not regions:
        return sum(map(len, out))
    region_set = set(regions)
    return sum(c.nbytes if i in region_set else len(c) for i, c in enumerate(out))


# -- public API --------------------------------------------------------------------------------


def encode(message: Message, version: int) -> bytes:
    """Encode a message body (no size prefix, no header) at ``version``."""
    out: list[Any] = []
    regions: list[int] = []
    _run_encoder(message, version, out, regions)
    if regions:
        raise LocalProtocolError("a region object cannot be encoded to bytes; use encode_chunks")
    return b"".join(out)


def encode_chunks(message: Message, version: int) -> list[Chunk]:
    """Encode a message body as chunks: bytes, with region objects kept separate."""
    out: list[Any] = []
    regions: list[int] = []
    _run_encoder(message, version, out, regions)
    return _join(out, regions)


def decode(cls: type[M], version: int, buf: Buffer) -> M:
    """Decode a message body of class ``cls`` at ``version``; trailing bytes are ignored."""
    message, _ = _run_decoder(cls, version, byte_view(buf), 0)
    return cast("M", message)


def encode_versioned(message: Message, version: int) -> bytes:
    """An int16 version followed by the body: how ConsumerProtocolSubscription/Assignment (the
    JoinGroup/SyncGroup ``metadata``/``assignment`` bytes) and similar data structs are stored."""
    return INT16.pack(version) + encode(message, version)


def decode_versioned(cls: type[M], buf: Buffer) -> tuple[int, M]:
    """Read an int16 version and the body after it; newer versions than ours are read as our
    newest, as Kafka's ConsumerProtocol does (later versions only append fields)."""
    m = byte_view(buf)
    if len(m) < 2:
        raise RemoteProtocolError(f"truncated {cls.NAME}: no version")
    version = INT16.unpack_from(m, 0)[0]
    lowest, highest = cls.VALID_VERSIONS
    if version < lowest:
        raise RemoteProtocolError(f"{cls.NAME} version {version} is below {lowest}")
    message, _ = _run_decoder(cls, min(version, highest), m, 2)
    return version, cast("M", message)


def _read_client_id(m: memoryview, p: int) -> tuple[str | None, int]:
    if p + 2 > len(m):
        raise RemoteProtocolError("truncated request header (client id)")
    n = INT16.unpack_from(m, p)[0]
    p += 2
    if n < 0:
        return None, p
    e = p + n
    if e > len(m):
        raise RemoteProtocolError("truncated request header (client id)")
    try:
        return str(m[p:e], "utf-8"), e
    except UnicodeDecodeError:
        raise RemoteProtocolError("request header client id is not UTF-8") from None


_SUPPORTED_REQUESTS: dict[tuple[int, int], tuple[type[Request], int]] = {}
"""(api key, version) -> (request class, request header version), filled as requests come in."""


def _supported_request(api_key: int, api_version: int) -> tuple[type[Request], int] | None:
    cls = REQUEST_TYPES.get(api_key)
    if cls is None or not cls.supports(api_version):
        return None
    known = _SUPPORTED_REQUESTS[api_key, api_version] = (cls, request_header_version(api_key, api_version))
    return known


def _common_request_header(
    m: memoryview,
    api_key: int,
    api_version: int,
    correlation_id: int,
    header_version: int,
    cls: type[Request],
) -> tuple[RequestHeader, int, type[Request]] | None:
    """The common case in one step: a client id and, in header v2, no tagged fields (None otherwise)."""
    if header_version == 0 or len(m) < 10:
        return None
    n = INT16.unpack_from(m, 8)[0]
    e = 10 + n
    if n < 0 or not (e <= len(m) if header_version == 1 else e < len(m) and m[e] == 0):
        return None
    try:
        client_id = str(m[10:e], "utf-8")
    except UnicodeDecodeError:
        raise RemoteProtocolError("request header client id is not UTF-8") from None
    # RequestHeader(...) without its keyword __init__ (three times the cost of the stores, as in the generated
    # decoders); every field is stored: tests compare these headers with ones built by __init__.
    header = _new(RequestHeader)
    header.request_api_key = api_key
    header.request_api_version = api_version
    header.correlation_id = correlation_id
    header.client_id = client_id
    header.unknown_tagged_fields = None
    return header, e if header_version == 1 else e + 1, cls


def _decode_request_header(m: memoryview) -> tuple[RequestHeader, int, type[Request] | None]:
    if len(m) < 8:
        raise RemoteProtocolError(f"request header needs 8 bytes, frame has {len(m)}")
    api_key, api_version, correlation_id = _REQUEST_HEADER.unpack_from(m, 0)
    known = _SUPPORTED_REQUESTS.get((api_key, api_version)) or _supported_request(api_key, api_version)
    cls: type[Request] | None
    if known is not None:
        cls, header_version = known
        common = _common_request_header(m, api_key, api_version, correlation_id, header_version, cls)
        if common is not None:
            return common
    else:
        cls, header_version = REQUEST_TYPES.get(api_key), 1
    supported = known is not None
    client_id: str | None = ""  # the spec's default, for header v0 (no client id on the wire)
    p = 8
    if header_version >= 1:
        try:
            client_id, p = _read_client_id(m, 8)
        except RemoteProtocolError:
            if supported:
                raise
            client_id = None
    unknown: dict[int, bytes] | None = None
    if header_version >= 2:
        try:
            tags, p = read_tagged_fields(m, p)
        except RemoteProtocolError as exc:
            raise RemoteProtocolError(f"malformed request header: {exc}") from None
        unknown = tags or None
    header = RequestHeader(
        request_api_key=api_key,
        request_api_version=api_version,
        correlation_id=correlation_id,
        client_id=client_id,
        unknown_tagged_fields=unknown,
    )
    if not supported:
        what = f"api key {api_key}" if cls is None else f"{cls.NAME} version {api_version}"
        raise UnsupportedVersionError(f"unsupported {what}", header)
    return header, p, cls


def decode_request_header(frame: Buffer) -> RequestHeader:
    """Decode only the request header (raises like :func:`decode_request`)."""
    header, _, _ = _decode_request_header(byte_view(frame))
    return header


def decode_request(frame: Buffer) -> tuple[RequestHeader, Request]:
    """Decode a request frame (the bytes after the size prefix) into its header and body."""
    m = memoryview(frame) if type(frame) is bytearray or type(frame) is bytes else byte_view(frame)
    header, p, cls = _decode_request_header(m)
    assert cls is not None
    version = header.request_api_version
    body: Request  # (what the decoder of a request class builds: no cast call per request)
    try:  # _run_decoder's work, inline (one call less per request)
        body, _ = decoder(cls, version)(m, p, len(m))
    except RemoteProtocolError:
        raise
    except (*_LOW_LEVEL_ERRORS, RecursionError) as exc:
        raise _malformed(cls, version, exc) from None
    return header, body


def _encode_request_header(header: RequestHeader, header_version: int) -> bytes:
    parts = [_REQUEST_HEADER.pack(header.request_api_key, header.request_api_version, header.correlation_id)]
    if header_version >= 1:
        client_id = header.client_id
        if client_id is None:
            parts.append(b"\xff\xff")
        else:
            data = client_id.encode()
            parts.append(INT16.pack(len(data)))
            parts.append(data)
    if header_version >= 2:
        parts.append(write_tagged_fields(header.unknown_tagged_fields))
    return b"".join(parts)


def encode_request(header: RequestHeader, body: Request) -> bytes:
    """Encode a whole request frame, size prefix included, at ``header.request_api_version``."""
    if header.request_api_key != body.API_KEY:
        raise LocalProtocolError(f"header api key {header.request_api_key} does not match {body.NAME}")
    version = header.request_api_version
    header_version = request_header_version(body.API_KEY, version)
    try:
        out: list[Any] = [b"", _encode_request_header(header, header_version)]
    except (struct.error, AttributeError) as exc:
        raise LocalProtocolError(f"cannot encode request header: {exc}") from None
    regions: list[int] = []
    _run_encoder(body, version, out, regions)
    if regions:
        raise LocalProtocolError("region objects are only supported in responses")
    out[0] = INT32.pack(sum(map(len, out)))
    return b"".join(out)


def encode_response(header: RequestHeader, body: Response, version: int | None = None) -> list[Chunk]:
    """Encode a whole response frame (size prefix, response header, body) answering ``header``.

    ``version`` defaults to the request's version; pass 0 to answer an unsupported ApiVersions
    request in the v0 layout. Returns bytes chunks with region objects as chunks of their own.
    """
    api_key = header.request_api_key
    if api_key != body.API_KEY:
        raise LocalProtocolError(f"request api key {api_key} does not match {body.NAME}")
    if version is None:
        version = header.request_api_version
    if _FROZEN:
        frozen = _FROZEN.get(id(body))
        if frozen is not None and frozen[0] is body:
            tail = frozen[1].get(version, _UNKNOWN)
            if tail is _UNKNOWN:
                tail = _frozen_tail(frozen, body, version)
            if tail is not None:
                try:
                    return [_SIZE_AND_ID.pack(4 + len(tail), header.correlation_id) + tail]
                except struct.error as exc:
                    raise LocalProtocolError(f"cannot encode correlation id: {exc}") from None
    cls = type(body)
    known = _RESPONSE_ENCODERS.get((cls, version))
    if known is None:
        known = _response_encoder(body, version)
    encode_body, header_tags = known
    try:
        # size, correlation id and (header v1) an empty tagged-field section, packed once the body is known
        out: list[Any] = [b"", INT32.pack(header.correlation_id), header_tags]
    except struct.error as exc:
        raise LocalProtocolError(f"cannot encode correlation id: {exc}") from None
    regions: list[int] = []
    try:  # _run_encoder's work, with the encoder looked up above
        encode_body(body, out, regions)
    except KafkaProtocolError:
        raise
    except (struct.error, AttributeError, TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot encode {cls.__qualname__} v{version}: {exc}") from None
    if not regions:  # the common case of _frame_size and _join, inline
        frame = b"".join(out)  # (out[0] is the empty placeholder of the size)
        # its size prefix: one copy of the frame, never more than joining the chunks again (a 1,000-partition
        # Fetch answer is ~6,000 chunks of 37 KB: the copy 2-3 us, a second join ~40 us; issue 17)
        return [INT32.pack(len(frame)) + frame]
    out[0] = INT32.pack(_frame_size(out, regions))
    return _join(out, regions)


_FROZEN: dict[int, tuple[Response, dict[int, bytes | None]]] = {}
"""Bodies handed to :func:`freeze_response`, by id: the body (its id is only valid while it lives, and it
lives while it is here) and, by version, what follows the correlation id in its frame (the response header's
tagged fields and the body; None: it carries a region, encoded each time)."""
_SIZE_AND_ID = struct.Struct(">ii")
_UNKNOWN = b"(not encoded yet)"


def freeze_response(body: Response) -> None:
    """``body`` will not change any more (its owner's promise): :func:`encode_response` may encode it once per
    version and reuse the bytes, until :func:`thaw_response`. The owner keeps the number it freezes bounded."""
    _FROZEN[id(body)] = (body, {})


def thaw_response(body: Response) -> None:
    """Forget ``body``'s encodings (its owner drops it, or may change it again)."""
    frozen = _FROZEN.get(id(body))
    if frozen is not None and frozen[0] is body:
        del _FROZEN[id(body)]


def _response_encoder(body: Response, version: int) -> tuple[Encoder, bytes]:
    """The encoder of ``body``'s class at ``version`` and its response header's tagged-field section."""
    cls = type(body)
    known = _RESPONSE_ENCODERS.get((cls, version))
    if known is None:
        flexible = response_header_version(cls.API_KEY, version) >= 1
        known = _RESPONSE_ENCODERS[cls, version] = (encoder(cls, version), b"\x00" if flexible else b"")
    return known


def _frozen_tail(
    frozen: tuple[Response, dict[int, bytes | None]], body: Response, version: int
) -> bytes | None:
    """What follows the correlation id in a frozen body's frame at ``version`` (the response header's tagged
    fields, the body), made now; None: it carries a region, it is encoded each time."""
    encode_body, header_tags = _response_encoder(body, version)
    out: list[Any] = [header_tags]
    regions: list[int] = []
    try:
        encode_body(body, out, regions)
    except KafkaProtocolError:
        raise
    except (struct.error, AttributeError, TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot encode {type(body).__qualname__} v{version}: {exc}") from None
    tail = None if regions else b"".join(out)
    frozen[1][version] = tail
    return tail


_RESPONSE_ENCODERS: dict[tuple[type[Message], int], tuple[Encoder, bytes]] = {}
"""(body class, version) -> its encoder and the response header's tagged-field section (empty in header
v0), filled as responses go out."""


def decode_response(frame: Buffer, api_key: int, version: int) -> tuple[ResponseHeader, Response]:
    """Decode a response frame to a request of ``api_key`` at ``version`` (the client knows both)."""
    cls = RESPONSE_TYPES.get(api_key)
    if cls is None:
        raise LocalProtocolError(f"unknown api key {api_key}")
    check_version(cls, version)
    m = byte_view(frame)
    if len(m) < 4:
        raise RemoteProtocolError("truncated response header")
    correlation_id = INT32.unpack_from(m, 0)[0]
    p = 4
    unknown: dict[int, bytes] | None = None
    if response_header_version(api_key, version) >= 1:
        tags, p = read_tagged_fields(m, p)
        unknown = tags or None
    body, _ = _run_decoder(cls, version, m, p)
    return ResponseHeader(correlation_id=correlation_id, unknown_tagged_fields=unknown), cast(
        "Response", body
    )
