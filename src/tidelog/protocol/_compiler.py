"""Compiles a specialised encoder and decoder per (message class, version) from its ``FIELDS``.

Invariants:

- Each function is generated once, on first use, as Python source built only from the committed
  schemas (never from input bytes), compiled with ``compile``/``exec`` and cached.
- A decoder is ``decode(m, p, end) -> (message, p)`` over a flat byte memoryview; it bounds-checks
  every length against ``end`` and raises :class:`RemoteProtocolError` for what it recognises as
  malformed; truncated fixed-width reads surface as ``struct.error``/``IndexError``, which the
  caller (``tidelog.protocol.codec``) turns into :class:`RemoteProtocolError`.
- An encoder is ``encode(message, out, regions)``: it appends bytes-like chunks to ``out`` and
  records in ``regions`` the index of every region object (a non-bytes-like object with
  ``nbytes``) it appends to ``out``.
- Generated code inlines nested structs and arrays, packs runs of fixed-width fields with one
  ``struct`` call, and reads/writes tagged fields only in flexible versions.
- An encoder writes an element of an array of structs whose variable-width fields all take their quiet value
  (nullable ones null, records empty bytes) and whose tagged fields are all at their defaults, with no unknown
  ones, in one ``struct`` call, the same bytes as the general code after it (:func:`_enc_quiet_struct`; issue
  17: a 1,000-partition Fetch answer's idle partitions). ``_build_encoder(..., quiet=False)`` builds the
  encoder without it; tests check the two agree.
- ``generated_source`` returns the source for review and debugging.
- A decoded uuid comes from a bounded cache of the ids seen (:func:`_uuid`): the same topic id arrives in
  every Fetch and Produce, and ``UUID(bytes=...)`` costs more than the rest of a small request's header.
  UUIDs are immutable, so sharing one is safe; the cache never holds more than ``_UUID_CACHE_SIZE``.
- A decoder builds each struct as its dataclass ``__init__`` would, without calling it (issue 17,
  per-request cost: a keyword ``__init__`` cost three times as much as the rest of a small struct's
  decoding): ``object.__new__`` and one attribute store per field, the decoded fields first, then every
  other field of the dataclass given its default exactly as ``__init__`` gives it (the same default
  object, or a fresh one from its ``default_factory``; a nested struct's default from its
  :func:`constructor`, which builds any struct the same way from given fields). The messages have no
  ``__post_init__`` (checked when a decoder is built). ``_build_decoder(..., construct="init")`` builds the same decoder calling
  ``__init__``; tests check the two agree.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar, cast
from uuid import UUID

from tidelog.protocol.primitives import (
    INT16,
    INT32,
    Buffer,
    LocalProtocolError,
    RemoteProtocolError,
    write_tagged_fields,
    write_uvarint,
)
from tidelog.protocol.schema import FieldSpec, Message, Struct, in_range

__all__ = [
    "Decoder",
    "Encoder",
    "byte_view",
    "check_version",
    "constructor",
    "decoder",
    "encoder",
    "generated_source",
]

Decoder: TypeAlias = Callable[[memoryview, int, int], tuple[Any, int]]
Encoder: TypeAlias = Callable[[Any, list[Any], list[int]], None]

_FIXED: dict[str, tuple[str, int]] = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "uint16": ("H", 2),
    "uint32": ("I", 4),
    "float64": ("d", 8),
    "bool": ("?", 1),
    "uuid": ("16s", 16),
}
_UVARINT_1 = tuple(bytes((i,)) for i in range(128))
_MAX_STRING = 0x7FFF


def _uvarint_tail(m: memoryview, p: int, first: int) -> tuple[int, int]:
    """Finish reading an unsigned varint whose first byte (``first`` >= 0x80) is already consumed."""
    result = first & 0x7F
    shift = 7
    while True:
        b = m[p]
        p += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, p
        shift += 7
        if shift > 28:
            raise RemoteProtocolError("varint is too long")


def _read_unknown_tags(m: memoryview, p: int, count: int, end: int) -> tuple[dict[int, bytes], int]:
    if count > end - p:
        raise RemoteProtocolError(f"{count} tagged fields with {end - p} bytes left")
    tags: dict[int, bytes] = {}
    for _ in range(count):
        tag = m[p]
        p += 1
        if tag > 127:
            tag, p = _uvarint_tail(m, p, tag)
        size = m[p]
        p += 1
        if size > 127:
            size, p = _uvarint_tail(m, p, size)
        e = p + size
        if e > end:
            raise RemoteProtocolError("truncated tagged field")
        tags[tag] = bytes(m[p:e])
        p = e
    return tags, p


def _write_tags(known: tuple[tuple[int, bytes], ...], unknown: dict[int, bytes] | None) -> bytes:
    fields: dict[int, bytes] = dict(unknown) if unknown else {}
    fields.update(known)
    return write_tagged_fields(fields)


def byte_view(buf: Buffer) -> memoryview:
    """A flat byte view of any buffer (frames, records given as other buffer types)."""
    if type(buf) is bytes or type(buf) is bytearray:  # a frame: flat bytes already (no format string made)
        return memoryview(buf)
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def _truncated() -> RemoteProtocolError:
    return RemoteProtocolError("truncated field")


def _null(name: str) -> RemoteProtocolError:
    return RemoteProtocolError(f"non-nullable field {name} was serialized as null")


def _bad_length(name: str, n: int) -> RemoteProtocolError:
    return RemoteProtocolError(f"field {name} has invalid length {n}")


def _too_long(name: str, n: int) -> LocalProtocolError:
    return LocalProtocolError(f"field {name} is {n} bytes, longer than {_MAX_STRING}")


_UUID_CACHE_SIZE = 4096
_UUIDS: dict[bytes, UUID] = {}


def _uuid(raw: bytes) -> UUID:
    """The UUID of 16 raw bytes, from the bounded cache (emptied when full: ids repeat, junk does not)."""
    found = _UUIDS.get(raw)
    if found is None:
        if len(_UUIDS) >= _UUID_CACHE_SIZE:
            _UUIDS.clear()
        found = _UUIDS[raw] = UUID(bytes=raw)
    return found


_BASE_NAMESPACE: dict[str, object] = {
    "_str": str,
    "_bytes": bytes,
    "_list": list,
    "_isinstance": isinstance,
    "_BYTESLIKE": (bytes, bytearray),
    "_memoryview": memoryview,
    "_hasattr": hasattr,
    "_byte_view": byte_view,
    "_UUID": UUID,
    "_uuid": _uuid,
    "_unpack_from": struct.unpack_from,
    "_pack": struct.pack,
    "_i8u": struct.Struct(">b").unpack_from,
    "_i16u": INT16.unpack_from,
    "_i32u": INT32.unpack_from,
    "_i16p": INT16.pack,
    "_i32p": INT32.pack,
    "_uvt": _uvarint_tail,
    "_uvw": write_uvarint,
    "_UV1": _UVARINT_1,
    "_tags": _read_unknown_tags,
    "_wtags": write_tagged_fields,
    "_wtags2": _write_tags,
    "_truncated": _truncated,
    "_null": _null,
    "_bad_length": _bad_length,
    "_too_long": _too_long,
    "_RPE": RemoteProtocolError,
    "_new": object.__new__,
    "_setattr": setattr,
}


class _Source:
    """Python source being generated for one (message, version), with its constants."""

    def __init__(self, root: type[Message], version: int, *, inline: bool = True) -> None:
        self.root = root
        self.version = version
        self.inline = inline
        """Decoders build structs without calling ``__init__`` (see the module docstring)."""
        self.flexible = root.is_flexible(version)
        self.quiet = True
        """Encoders write an array's quiet elements in one call (:func:`_enc_quiet_struct`)."""
        self.lines: list[str] = []
        self.namespace: dict[str, object] = dict(_BASE_NAMESPACE)
        self._count = 0
        self._consts: dict[int, str] = {}

    def var(self, prefix: str = "v") -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def const(self, value: object, prefix: str = "K") -> str:
        key = id(value)
        if key in self._consts:
            return self._consts[key]
        name = self.var(f"_{prefix}")
        self.namespace[name] = value
        self._consts[key] = name
        return name

    def add(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def struct_class(self, name: str) -> type[Struct]:
        cls = getattr(self.root, name, None)
        if not (isinstance(cls, type) and issubclass(cls, Struct)):
            raise LocalProtocolError(f"{self.root.__name__} has no struct {name}")
        return cls

    def fields(self, cls: type[Struct]) -> tuple[list[FieldSpec], list[FieldSpec]]:
        """(regular fields, tagged fields) of ``cls`` present in this version."""
        regular: list[FieldSpec] = []
        tagged: list[FieldSpec] = []
        for f in cls.FIELDS:
            if not in_range(f.versions, self.version):
                continue
            if self.flexible and in_range(f.tagged_versions, self.version):
                tagged.append(f)
            else:
                regular.append(f)
        tagged.sort(key=lambda f: f.tag or 0)
        return regular, tagged

    def nullable(self, f: FieldSpec) -> bool:
        return in_range(f.nullable_versions, self.version)

    def compact(self, f: FieldSpec) -> bool:
        return self.flexible and f.flexible

    def compile(self, func_name: str) -> Callable[..., Any]:
        source = "\n".join(self.lines) + "\n"
        filename = f"<tidelog.codec {self.root.__name__} v{self.version} {func_name}>"
        # The source is built here from the committed schemas, never from input bytes.
        exec(compile(source, filename, "exec"), self.namespace)  # noqa: S102
        func = self.namespace[func_name]
        self.namespace["__source__"] = source
        return cast("Callable[..., Any]", func)


def _fixed_runs(fields: list[FieldSpec]) -> list[list[FieldSpec]]:
    """Group consecutive fixed-width fields; every other field is a run of one."""
    runs: list[list[FieldSpec]] = []
    for f in fields:
        if f.type in _FIXED and runs and runs[-1][0].type in _FIXED:
            runs[-1].append(f)
        else:
            runs.append([f])
    return runs


_PACKER_TABLE = 16
_PACKERS: dict[tuple[str, str], tuple[Callable[..., bytes], ...]] = {}


def _array_packers(code: str, prefix: str) -> tuple[Callable[..., bytes], ...]:
    """``pack`` of ``>{prefix}{code * n}`` for n below ``_PACKER_TABLE``."""
    key = (code, prefix)
    if key not in _PACKERS:
        _PACKERS[key] = tuple(struct.Struct(f">{prefix}{code * n}").pack for n in range(_PACKER_TABLE))
    return _PACKERS[key]


def _field_values(obj: Struct) -> list[tuple[str, object]]:
    return [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(cast("Any", obj))]


def _default_of(cls: type[Struct], name: str) -> object:
    for f in dataclasses.fields(cast("Any", cls)):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
    raise LocalProtocolError(f"{cls.__qualname__} has no field {name}")


# -- decoder generation --


def _dec_uvarint(src: _Source, ind: int, var: str, *, two_bytes: bool = False) -> None:
    """Read an unsigned varint into ``var``; ``two_bytes``: its two-byte form (128 to 16383) read inline, not
    by ``_uvt`` (the length of a produce's record batch, once per partition: issue 17)."""
    src.add(ind, f"{var} = m[p]; p += 1")
    if not two_bytes:
        src.add(ind, f"if {var} > 127: {var}, p = _uvt(m, p, {var})")
        return
    src.add(ind, f"if {var} > 127:")
    src.add(ind + 1, "b = m[p]")
    src.add(ind + 1, f"if b < 128: {var} = ({var} & 127) | (b << 7); p += 1")
    src.add(ind + 1, f"else: {var}, p = _uvt(m, p, {var})")


def _dec_length(src: _Source, ind: int, compact: bool, width: int, *, two_bytes: bool = False) -> None:
    """Read a length prefix into ``n`` (-1 means null); ``two_bytes``: see :func:`_dec_uvarint`."""
    if compact:
        _dec_uvarint(src, ind, "n", two_bytes=two_bytes)
        src.add(ind, "n -= 1")
    elif width == 2:
        src.add(ind, "n = _i16u(m, p)[0]; p += 2")
    else:
        src.add(ind, "n = _i32u(m, p)[0]; p += 4")


def _dec_value(src: _Source, ind: int, f: FieldSpec, type_name: str, nullable: bool, var: str) -> None:
    """Emit code decoding one value of ``type_name`` at ``p`` into ``var``."""
    compact = src.compact(f)
    name = repr(f.kafka_name)
    if type_name in _FIXED:
        code, size = _FIXED[type_name]
        packer = src.const(struct.Struct(">" + code).unpack_from, "U")
        src.add(ind, f"{var} = {packer}(m, p)[0]; p += {size}")
        if type_name == "uuid":
            src.add(ind, f"{var} = _uuid({var})")
        return
    if type_name in ("string", "bytes", "records"):
        # bytes and records: often longer than 126
        _dec_length(src, ind, compact, 2 if type_name == "string" else 4, two_bytes=type_name != "string")
        src.add(ind, "if n < 0:")
        src.add(ind + 1, f"{var} = None" if nullable else f"raise _null({name})")
        if type_name == "string":  # an empty one (a rack id, a client id: often) without a slice
            src.add(ind, "elif n == 0:")
            src.add(ind + 1, f'{var} = ""')
        src.add(ind, "else:")
        if type_name == "string" and compact:
            src.add(ind + 1, f"if n > {_MAX_STRING}: raise _bad_length({name}, n)")
        src.add(ind + 1, "e = p + n")
        src.add(ind + 1, "if e > end: raise _truncated()")
        if type_name == "string":
            src.add(ind + 1, f'{var} = _str(m[p:e], "utf-8"); p = e')
        elif type_name == "bytes":
            src.add(ind + 1, f"{var} = _bytes(m[p:e]); p = e")
        else:
            src.add(ind + 1, f"{var} = m[p:e]; p = e")
        return
    if type_name.startswith("[]"):
        element = type_name[2:]
        _dec_length(src, ind, compact, 4)
        src.add(ind, "if n < 0:")
        src.add(ind + 1, f"{var} = None" if nullable else f"raise _null({name})")
        src.add(ind, "else:")
        src.add(ind + 1, f"if n > end - p: raise _bad_length({name}, n)")
        if element in _FIXED and element != "uuid":
            code, size = _FIXED[element]
            src.add(ind + 1, f'{var} = _list(_unpack_from(">%d{code}" % n, m, p)); p += {size} * n')
            return
        src.add(ind + 1, f"{var} = []")
        item = src.var("x")
        src.add(ind + 1, "for _ in range(n):")
        if element in _FIXED or element in ("string", "bytes"):
            _dec_value(src, ind + 2, f, element, False, item)
        else:
            _dec_struct(src, ind + 2, src.struct_class(element), item)
        src.add(ind + 2, f"{var}.append({item})")
        return
    # a struct field
    cls = src.struct_class(type_name)
    if nullable:
        src.add(ind, "n = m[p]; p += 1")
        src.add(ind, "if n > 127:")
        src.add(ind + 1, f"{var} = None")
        src.add(ind, "else:")
        _dec_struct(src, ind + 1, cls, var)
    else:
        _dec_struct(src, ind, cls, var)


def _dec_struct(src: _Source, ind: int, cls: type[Struct], target: str) -> None:
    regular, tagged = src.fields(cls)
    kwargs: list[tuple[str, str]] = []
    for run in _fixed_runs(regular):
        first = run[0]
        if first.type in _FIXED:
            names = [src.var() for _ in run]
            fmt = ">" + "".join(_FIXED[f.type][0] for f in run)
            size = sum(_FIXED[f.type][1] for f in run)
            unpack = src.const(struct.Struct(fmt).unpack_from, "U")
            src.add(ind, f"{', '.join(names)}, = {unpack}(m, p); p += {size}")
            for f, name in zip(run, names, strict=True):
                if f.type == "uuid":
                    src.add(ind, f"{name} = _uuid({name})")
                kwargs.append((f.name, name))
        else:
            name = src.var()
            _dec_value(src, ind, first, first.type, src.nullable(first), name)
            kwargs.append((first.name, name))
    extra = known = ""
    if src.flexible:
        unknown = src.var("u")
        count = src.var("c")
        if not tagged:
            # the common empty section (one zero byte) without storing and comparing its count
            src.add(ind, "if m[p]:")
            _dec_uvarint(src, ind + 1, count)
            src.add(ind + 1, f"{unknown}, p = _tags(m, p, {count}, end)")
            src.add(ind, f"else: {unknown} = None; p += 1")
        else:
            _dec_uvarint(src, ind, count)
            known = src.var("tk")
            src.add(ind, f"{unknown} = {known} = None")
            src.add(ind, f"if {count}:")  # (most structs carry none: no dict, no loop)
            src.add(ind + 1, f"{known} = {{}}")
            src.add(ind + 1, f"if {count} > end - p: raise _bad_length('tagged fields', {count})")
            src.add(ind + 1, f"for _ in range({count}):")
            tag = src.var("t")
            tag_end = src.var("te")
            _dec_uvarint(src, ind + 2, tag)
            _dec_uvarint(src, ind + 2, "n")
            src.add(ind + 2, f"{tag_end} = p + n")
            src.add(ind + 2, f"if {tag_end} > end: raise _truncated()")
            keyword = "if"
            for f in tagged:
                src.add(ind + 2, f"{keyword} {tag} == {f.tag}:")
                value = src.var()
                _dec_value(src, ind + 3, f, f.type, src.nullable(f), value)
                src.add(ind + 3, f"{known}[{f.name!r}] = {value}")
                src.add(ind + 3, f"if p != {tag_end}: raise _bad_length({f.kafka_name!r}, n)")
                keyword = "elif"
            src.add(ind + 2, "else:")
            src.add(ind + 3, f"if {unknown} is None: {unknown} = {{}}")
            src.add(ind + 3, f"{unknown}[{tag}] = _bytes(m[p:{tag_end}]); p = {tag_end}")
            extra = f", **({known} or {{}})"
        kwargs.append(("unknown_tagged_fields", unknown))
    ctor = src.const(cls, "C")
    if not src.inline:
        args = ", ".join(f"{k}={v}" for k, v in kwargs)
        src.add(ind, f"{target} = {ctor}({args}{extra})")
        return
    # As the dataclass __init__ would build it (see the module docstring), without the keyword call.
    if hasattr(cls, "__post_init__"):
        raise LocalProtocolError(f"{cls.__qualname__} has a __post_init__: decoders must call __init__")
    stores = [f"{target} = _new({ctor})"]
    stores += [f"{target}.{k} = {v}" for k, v in kwargs]
    given = {k for k, _ in kwargs}
    for attribute in dataclasses.fields(cast("Any", cls)):
        if attribute.name in given:
            continue
        if attribute.default is not dataclasses.MISSING:
            stores.append(f"{target}.{attribute.name} = {src.const(attribute.default, 'D')}")
        elif attribute.default_factory is not dataclasses.MISSING:
            stores.append(f"{target}.{attribute.name} = {src.const(_fast_factory(attribute), 'F')}()")
        else:
            raise LocalProtocolError(f"{cls.__qualname__}.{attribute.name} has no default")
    src.add(ind, "; ".join(stores))
    if extra:  # the known tagged fields that were present, over their defaults
        src.add(ind, f"if {known}:")
        src.add(ind + 1, f"for k, v in {known}.items(): _setattr({target}, k, v)")


# -- encoder generation --


def _enc_length(src: _Source, ind: int, compact: bool, width: int, length: str, ap: str) -> None:
    if compact:
        src.add(ind, f"n = {length} + 1")
        src.add(ind, f"{ap}(_UV1[n] if n < 128 else _uvw(n))")
    elif width == 2:
        src.add(ind, f"{ap}(_i16p({length}))")
    else:
        src.add(ind, f"{ap}(_i32p({length}))")


def _enc_value(
    src: _Source, ind: int, f: FieldSpec, type_name: str, nullable: bool, var: str, ap: str
) -> None:
    """Emit code encoding the value in ``var`` through the append function ``ap``."""
    compact = src.compact(f)
    null_marker = {2: b"\xff\xff", 4: b"\xff\xff\xff\xff"}
    if type_name in _FIXED:
        code, _ = _FIXED[type_name]
        packer = src.const(struct.Struct(">" + code).pack, "P")
        src.add(ind, f"{ap}({packer}({var}.bytes))" if type_name == "uuid" else f"{ap}({packer}({var}))")
        return
    if type_name in ("string", "bytes", "records"):
        width = 2 if type_name == "string" else 4
        null = b"\x00" if compact else null_marker[width]
        if nullable or type_name == "records":
            src.add(ind, f"if {var} is None:")
            # A null records field in a version where it is not nullable is sent empty.
            empty = null if nullable else (b"\x01" if compact else b"\x00\x00\x00\x00")
            src.add(ind + 1, f"{ap}({empty!r})")
            src.add(ind, "else:")
            ind += 1
        if type_name == "string":
            data = src.var("b")
            src.add(ind, f"{data} = {var}.encode()")
            src.add(ind, f"if len({data}) > {_MAX_STRING}: raise _too_long({f.kafka_name!r}, len({data}))")
            _enc_length(src, ind, compact, 2, f"len({data})", ap)
            src.add(ind, f"{ap}({data})")
        elif type_name == "bytes":
            _enc_length(src, ind, compact, 4, f"len({var})", ap)
            src.add(ind, f"{ap}({var})")
        else:
            # Bytes-like values are appended as they are (other buffers as byte memoryviews);
            # an object with ``nbytes`` that is not bytes-like is a region object, whose index in
            # ``out`` is recorded so it becomes a chunk of its own.
            size = src.var("s")
            src.add(ind, f"if _isinstance({var}, _BYTESLIKE):")
            src.add(ind + 1, f"{size} = len({var})")
            _enc_length(src, ind + 1, compact, 4, size, ap)
            src.add(ind + 1, f"{ap}({var})")
            src.add(ind, f"elif _isinstance({var}, _memoryview) or not _hasattr({var}, 'nbytes'):")
            src.add(ind + 1, f"{var} = _byte_view({var})")
            src.add(ind + 1, f"{size} = len({var})")
            _enc_length(src, ind + 1, compact, 4, size, ap)
            src.add(ind + 1, f"{ap}({var})")
            src.add(ind, "else:")
            src.add(ind + 1, f"{size} = {var}.nbytes")
            _enc_length(src, ind + 1, compact, 4, size, ap)
            src.add(ind + 1, f"if {size}: rg.append(len(out)); {ap}({var})")
        return
    if type_name.startswith("[]"):
        element = type_name[2:]
        if nullable:
            src.add(ind, f"if {var} is None:")
            null = b"\x00" if compact else null_marker[4]
            src.add(ind + 1, f"{ap}({null!r})")
            src.add(ind, "else:")
            ind += 1
        if element in _FIXED and element != "uuid":
            # Count and elements in one struct call; formats for short arrays are precompiled.
            code, _ = _FIXED[element]
            src.add(ind, f"n = len({var})")
            if compact:
                table = src.const(_array_packers(code, ""), "A")
                src.add(ind, f"{ap}(_UV1[n + 1] if n < 127 else _uvw(n + 1))")
                src.add(
                    ind,
                    f'{ap}({table}[n](*{var}) if n < {_PACKER_TABLE} else _pack(">%d{code}" % n, *{var}))',
                )
            else:
                table = src.const(_array_packers(code, "i"), "A")
                src.add(
                    ind,
                    f'{ap}({table}[n](n, *{var}) if n < {_PACKER_TABLE} else _pack(">i%d{code}" % n, n, *{var}))',
                )
            return
        _enc_length(src, ind, compact, 4, f"len({var})", ap)
        item = src.var("x")
        src.add(ind, f"for {item} in {var}:")
        if element in _FIXED or element in ("string", "bytes"):
            _enc_value(src, ind + 1, f, element, False, item, ap)
        else:
            cls = src.struct_class(element)
            if src.quiet:
                _enc_quiet_struct(src, ind + 1, cls, item, ap)
            _enc_struct(src, ind + 1, cls, item, ap)
        return
    cls = src.struct_class(type_name)
    if nullable:
        src.add(ind, f"if {var} is None:")
        src.add(ind + 1, f"{ap}(b'\\xff')")
        src.add(ind, "else:")
        src.add(ind + 1, f"{ap}(b'\\x01')")
        ind += 1
    _enc_struct(src, ind, cls, var, ap)


def _differs(src: _Source, value: str, default: object) -> str:
    """A condition true when ``value`` differs from a tagged field's ``default``: ``is not None`` for a None
    default (no value of a message field equals None without being it), a literal for a number, string or
    bytes default (a constant, not a global, in each struct's test: issue 17, 1,000 partitions' three default
    tagged structs in a Fetch answer), else the default object itself."""
    if default is None:
        return f"{value} is not None"
    if type(default) in (int, bool, str, bytes):
        return f"{value} != {default!r}"
    return f"{value} != {src.const(default, 'D')}"


def _same(src: _Source, value: str, default: object) -> str:
    """The negation of :func:`_differs`."""
    if default is None:
        return f"{value} is None"
    if type(default) in (int, bool, str, bytes):
        return f"{value} == {default!r}"
    return f"{value} == {src.const(default, 'D')}"


def _enc_quiet_struct(src: _Source, ind: int, cls: type[Struct], obj: str, ap: str) -> None:
    """In the loop over an array of ``cls``, before :func:`_enc_struct`'s code: an element whose every
    variable-width field takes its quiet value (a nullable field null, records empty bytes) and, in a flexible
    version, whose tagged fields are all their defaults with no unknown ones, is written by one ``struct``
    call (fixed fields, null markers, empty lengths and the empty tagged section) and the loop continues;
    any other element falls through to the general code, which writes the same bytes. Issue 17: a
    1,000-partition Fetch answer's idle partitions (six chunks each otherwise). Emitted only where it merges
    a variable-width field or a tagged section into the fixed fields' call; nothing when a field has no quiet
    value (a non-nullable string or array, a nested struct)."""
    regular, tagged = src.fields(cls)
    codes: list[str] = []
    args: list[str] = []
    checks: list[str] = []
    merged = False
    for f in regular:
        value = f"{obj}.{f.name}"
        compact = src.compact(f)
        if f.type in _FIXED:
            codes.append(_FIXED[f.type][0])
            args.append(f"{value}.bytes" if f.type == "uuid" else value)
            continue
        merged = True
        if f.type == "records":  # empty bytes: a zero length
            checks.append(f"{value}.__class__ is _bytes and not {value}")
            codes.append("B" if compact else "i")
            args.append("1" if compact else "0")
        elif src.nullable(f) and (f.type in ("string", "bytes") or f.type.startswith("[]")):
            checks.append(f"{value} is None")
            if compact:
                codes.append("x")  # a zero: null
            else:
                codes.append("h" if f.type == "string" else "i")
                args.append("-1")
        else:
            return
    if src.flexible:
        merged = True
        for f in tagged:
            value = f"{obj}.{f.name}"
            default = _default_of(cls, f.name)
            if f.is_array:
                checks.append(f"{value} is None" if default is None else f"not {value}")
            elif isinstance(default, Struct):
                held = src.var("q")  # the struct, named by its first test
                same = [_same(src, f"{held}.{name}", item) for name, item in _field_values(default)]
                if f.nullable_versions is not None:
                    checks.append(f"(({held} := {value}) is None or {' and '.join(same)})")
                else:
                    checks.append(" and ".join([same[0].replace(held, f"({held} := {value})", 1), *same[1:]]))
            else:
                checks.append(_same(src, value, default))
        checks.append(f"not {obj}.unknown_tagged_fields")
        codes.append("x")  # no tagged fields
    if not merged or not checks:
        return
    pack = src.const(struct.Struct(">" + "".join(codes)).pack, "P")
    src.add(ind, f"if {' and '.join(checks)}:")
    src.add(ind + 1, f"{ap}({pack}({', '.join(args)}))")
    src.add(ind + 1, "continue")


def _enc_struct(src: _Source, ind: int, cls: type[Struct], obj: str, ap: str) -> None:
    regular, tagged = src.fields(cls)
    for run in _fixed_runs(regular):
        first = run[0]
        if first.type in _FIXED:
            fmt = ">" + "".join(_FIXED[f.type][0] for f in run)
            pack = src.const(struct.Struct(fmt).pack, "P")
            args = ", ".join(f"{obj}.{f.name}.bytes" if f.type == "uuid" else f"{obj}.{f.name}" for f in run)
            src.add(ind, f"{ap}({pack}({args}))")
        else:
            value = src.var()
            src.add(ind, f"{value} = {obj}.{first.name}")
            _enc_value(src, ind, first, first.type, src.nullable(first), value, ap)
    if not src.flexible:
        return
    unknown = src.var("u")
    src.add(ind, f"{unknown} = {obj}.unknown_tagged_fields")
    if not tagged:
        src.add(ind, f"{ap}(_wtags({unknown}) if {unknown} else b'\\x00')")
        return
    known = src.var("tg")
    # a tuple, grown only by a field away from its default: no list made per struct for the common case
    src.add(ind, f"{known} = ()")
    for f in tagged:
        value = src.var()
        src.add(ind, f"{value} = {obj}.{f.name}")
        default = _default_of(cls, f.name)
        if f.is_array:
            condition = f"{value} is not None" if default is None else value
        elif isinstance(default, Struct):
            # Field by field: much cheaper than building and comparing whole dataclasses.
            compared = [_differs(src, f"{value}.{name}", item) for name, item in _field_values(default)]
            condition = f"({' or '.join(compared)})"
            if f.nullable_versions is not None:
                condition = f"{value} is not None and {condition}"
        else:
            condition = _differs(src, value, default)
        src.add(ind, f"if {condition}:")
        parts = src.var("tl")
        src.add(ind + 1, f"{parts} = []")
        _enc_value(src, ind + 1, f, f.type, src.nullable(f), value, f"{parts}.append")
        src.add(ind + 1, f"{known} += (({f.tag}, b''.join({parts})),)")
    src.add(ind, f"{ap}(_wtags2({known}, {unknown}) if {known} or {unknown} else b'\\x00')")


_DECODERS: dict[tuple[type[Message], int], Decoder] = {}
_ENCODERS: dict[tuple[type[Message], int], Encoder] = {}


def check_version(cls: type[Message], version: int) -> None:
    if not cls.supports(version):
        lo, hi = cls.VALID_VERSIONS
        raise LocalProtocolError(f"{cls.NAME} has no version {version} (valid {lo}-{hi})")


def _build_decoder(cls: type[Message], version: int, *, construct: str = "inline") -> Decoder:
    """The decoder of ``cls`` at ``version``; ``construct="init"`` builds each struct by calling its
    ``__init__`` (the reference the tests check the inline construction against)."""
    if construct not in ("inline", "init"):
        raise ValueError(f"construct must be 'inline' or 'init', not {construct!r}")
    src = _Source(cls, version, inline=construct == "inline")
    src.add(0, "def decode(m, p, end):")
    _dec_struct(src, 1, cls, "o")
    src.add(1, "return o, p")
    return cast("Decoder", src.compile("decode"))


def _build_encoder(cls: type[Message], version: int, *, quiet: bool = True) -> Encoder:
    """``quiet=False``: without :func:`_enc_quiet_struct`'s one-call elements (tests compare the two)."""
    src = _Source(cls, version)
    src.quiet = quiet
    src.add(0, "def encode(o, out, rg):")
    src.add(1, "a = out.append")
    _enc_struct(src, 1, cls, "o", "a")
    return cast("Encoder", src.compile("encode"))


def decoder(cls: type[Message], version: int) -> Decoder:
    try:
        return _DECODERS[cls, version]
    except KeyError:
        check_version(cls, version)
        decoder = _DECODERS[cls, version] = _build_decoder(cls, version)
        return decoder


def encoder(cls: type[Message], version: int) -> Encoder:
    try:
        return _ENCODERS[cls, version]
    except KeyError:
        check_version(cls, version)
        encoder = _ENCODERS[cls, version] = _build_encoder(cls, version)
        return encoder


def generated_source(cls: type[Message], version: int, *, encoder: bool = False) -> str:
    """The Python source of the generated decoder (or encoder), for debugging and review."""
    check_version(cls, version)
    build = _build_encoder if encoder else _build_decoder
    func = build(cls, version)
    return cast("str", func.__globals__["__source__"])


# -- constructors --


def _fast_factory(f: dataclasses.Field[Any]) -> Callable[[], Any]:
    """A field's default factory, or, when it makes a struct of its class's defaults (a nested struct's
    default), that struct's :func:`constructor` (the same value without the keyword ``__init__``)."""
    factory = f.default_factory
    assert factory is not dataclasses.MISSING
    sample: object = factory()
    nested: type[Any] = type(sample)
    if isinstance(sample, Struct) and sample == nested():
        return constructor(nested)
    return factory


_T = TypeVar("_T")
_CONSTRUCTORS: dict[tuple[type[Any], tuple[str, ...]], Callable[..., Any]] = {}


def constructor(cls: type[_T], *names: str) -> Callable[..., _T]:
    """A function building a ``cls`` (a dataclass: a message struct, or any other) from the values of the
    fields ``names``, given positionally in that order, every other field its default: what
    ``cls(name=value, ...)`` builds, without the keyword ``__init__`` (issue 17: a struct built per answered
    partition costs a third as much). A default factory
    that makes a struct of its class's defaults (a nested struct's default) is built the same way. Cached
    per (class, names); the source is built from the dataclass fields only."""
    key = (cls, names)
    made = _CONSTRUCTORS.get(key)
    if made is not None:
        return cast("Callable[..., _T]", made)
    if hasattr(cls, "__post_init__"):
        raise LocalProtocolError(f"{cls.__qualname__} has a __post_init__: build it with __init__")
    fields = {f.name: f for f in dataclasses.fields(cast("Any", cls)) if f.init}
    unknown = [name for name in names if name not in fields]
    if unknown or len(set(names)) != len(names):
        raise LocalProtocolError(f"{cls.__qualname__}: no such fields, or twice: {names}")
    namespace: dict[str, object] = {"_new": object.__new__, "_C": cls}
    stores = ["o = _new(_C)"] + [f"o.{name} = {name}" for name in names]
    for count, (name, f) in enumerate(fields.items()):
        if name in names:
            continue
        const = f"_K{count}"
        if f.default is not dataclasses.MISSING:
            namespace[const] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            namespace[const] = _fast_factory(f)
            const += "()"
        else:
            raise LocalProtocolError(f"{cls.__qualname__}.{name} has no default: name it")
        stores.append(f"o.{name} = {const}")
    source = f"def make({', '.join(names)}):\n    " + "\n    ".join([*stores, "return o"]) + "\n"
    exec(compile(source, f"<tidelog.codec {cls.__qualname__} constructor>", "exec"), namespace)  # noqa: S102
    made = cast("Callable[..., _T]", namespace["make"])
    _CONSTRUCTORS[key] = made
    return made
