"""Hypothesis strategies derived from the generated schemas (``FIELDS`` of each message class).

``message_strategy(cls, version)`` builds instances whose fields present in ``version`` hold
arbitrary valid values (null only where the version allows it) and whose other fields keep their
defaults, so ``decode(encode(m)) == m`` must hold exactly.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tidelog.protocol.messages import DATA_TYPES, HEADER_TYPES, REQUEST_TYPES, RESPONSE_TYPES, Message, Struct
from tidelog.protocol.schema import FieldSpec, in_range

_INTS = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "uint16": st.integers(0, 2**16 - 1),
    "uint32": st.integers(0, 2**32 - 1),
}
_PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    **_INTS,
    "bool": st.booleans(),
    "float64": st.floats(allow_nan=False),
    "string": st.text(max_size=8),
    "bytes": st.binary(max_size=12),
    "records": st.binary(max_size=24),
    "uuid": st.uuids(),
}


def all_message_classes() -> list[type[Message]]:
    return [
        *REQUEST_TYPES.values(),
        *RESPONSE_TYPES.values(),
        *HEADER_TYPES.values(),
        *DATA_TYPES.values(),
    ]


def _value(
    root: type[Message], version: int, f: FieldSpec, type_name: str, nullable: bool
) -> st.SearchStrategy[Any]:
    if type_name.startswith("[]"):
        element = _value(root, version, f, type_name[2:], False)
        strategy: st.SearchStrategy[Any] = st.lists(element, max_size=3)
    elif type_name in _PRIMITIVES:
        strategy = _PRIMITIVES[type_name]
    else:
        strategy = struct_strategy(root, version, getattr(root, type_name))
    return st.none() | strategy if nullable else strategy


def struct_strategy(root: type[Message], version: int, cls: type[Struct]) -> st.SearchStrategy[Any]:
    fields = {
        f.name: _value(root, version, f, f.type, in_range(f.nullable_versions, version))
        for f in cls.FIELDS
        if in_range(f.versions, version)
    }
    return st.builds(cls, **fields)


_CACHE: dict[tuple[str, int], st.SearchStrategy[Any]] = {}


def message_strategy(cls: type[Message], version: int) -> st.SearchStrategy[Any]:
    key = (cls.NAME, version)
    if key not in _CACHE:
        _CACHE[key] = struct_strategy(cls, version, cls)
    return _CACHE[key]
