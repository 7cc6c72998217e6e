"""The CRC32C the broker's JSON files carry over their content (topic metadata, dynamic configs, producer
id block).

Invariant: the checksum is over the value's canonical JSON (sorted keys, no spaces, UTF-8), so a value
written and the same value parsed back have the same checksum whatever the file's indentation or key order.
"""

from __future__ import annotations

import json

import crc32c

__all__ = ["json_crc32c"]


def json_crc32c(value: object) -> int:
    """CRC32C of ``value``'s canonical JSON."""
    return crc32c.crc32c(json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8"))
