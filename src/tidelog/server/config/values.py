"""Typed config values: Kafka's config types, parsing a raw string into one, rendering it back.

Invariants:

- A raw string parses into exactly one Python type per :class:`ConfigType` (:data:`PYTHON_TYPES`), as
  Kafka's ``ConfigDef.parseType`` parses it (the raw value is trimmed first); a value that does not parse
  raises :class:`~tidelog.server.config.errors.ConfigError` naming the key.
- :func:`render` is the inverse Kafka writes (``ConfigDef.convertToString``): ``render(parse(x))`` is the
  normalised form of ``x``.
- ``ConfigType`` numbers are the ones DescribeConfigs puts on the wire.
"""

from __future__ import annotations

import math
import re
from enum import IntEnum
from typing import Final

from .errors import invalid_value

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "LONG_MAX",
    "LONG_MIN",
    "PYTHON_TYPES",
    "SHORT_MAX",
    "SHORT_MIN",
    "ConfigType",
    "ConfigValue",
    "parse_typed",
    "render",
]

INT_MIN: Final = -(2**31)
INT_MAX: Final = 2**31 - 1
SHORT_MIN: Final = -(2**15)
SHORT_MAX: Final = 2**15 - 1
LONG_MIN: Final = -(2**63)
LONG_MAX: Final = 2**63 - 1


class ConfigType(IntEnum):
    """Kafka's ``DescribeConfigsResponse.ConfigType`` (the ``ConfigType`` field, v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


PYTHON_TYPES: Final[dict[ConfigType, str]] = {
    ConfigType.BOOLEAN: "bool",
    ConfigType.STRING: "str",
    ConfigType.INT: "int",
    ConfigType.SHORT: "int",
    ConfigType.LONG: "int",
    ConfigType.DOUBLE: "float",
    ConfigType.LIST: "tuple[str, ...]",
    ConfigType.CLASS: "str",
    ConfigType.PASSWORD: "str",
}

ConfigValue = bool | int | float | str | tuple[str, ...] | None

_COMMA_WITH_WHITESPACE = re.compile(r"\s*,\s*")
_INT_RE = re.compile(r"[+-]?\d+")


def parse_typed(name: str, config_type: ConfigType, raw: str) -> ConfigValue:
    """Parse ``raw`` as Kafka's ``ConfigDef.parseType`` does (values are trimmed first)."""
    trimmed = raw.strip()
    if config_type is ConfigType.BOOLEAN:
        lowered = trimmed.lower()
        if lowered == "true":
            return True
        if lowered == "false":
            return False
        raise invalid_value(name, raw, "Expected value to be either true or false")
    if config_type in (ConfigType.STRING, ConfigType.CLASS, ConfigType.PASSWORD):
        return trimmed
    if config_type in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        lo, hi = {
            ConfigType.INT: (INT_MIN, INT_MAX),
            ConfigType.SHORT: (SHORT_MIN, SHORT_MAX),
            ConfigType.LONG: (LONG_MIN, LONG_MAX),
        }[config_type]
        if _INT_RE.fullmatch(trimmed) is None or not lo <= int(trimmed) <= hi:
            raise invalid_value(name, raw, f"Not a number of type {config_type.name}")
        return int(trimmed)
    if config_type is ConfigType.DOUBLE:
        try:
            number = float(trimmed)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise invalid_value(name, raw, "Not a number of type DOUBLE")
        return number
    if config_type is ConfigType.LIST:
        if not trimmed:
            return ()
        items = tuple(_COMMA_WITH_WHITESPACE.split(trimmed))
        if any(not item for item in items):
            raise invalid_value(name, raw, "List contains an empty element")
        return items
    raise invalid_value(name, raw, f"Unsupported config type {config_type.name}")  # pragma: no cover


def render(config_type: ConfigType, value: ConfigValue) -> str | None:
    """A parsed value back to Kafka's string form (``ConfigDef.convertToString``)."""
    if value is None:
        return None
    if config_type is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if config_type is ConfigType.LIST:
        assert isinstance(value, tuple)
        return ",".join(value)
    if config_type is ConfigType.DOUBLE:
        assert isinstance(value, float | int)
        return repr(float(value))
    return str(value)
