"""Kafka's ``server.properties`` format: Java's ``Properties.load`` syntax, and ``--set key=value``.

Invariants:

- Text is read as Java's ``Properties.load`` reads it (``#``/``!`` comments, ``key=value``, ``key: value``
  or ``key value``, backslash line continuations, ``\\t \\n \\r \\f \\uXXXX`` escapes), in UTF-8.
- Entries come back in file order, duplicates kept, each with where it started (``file:line`` or
  ``--set``); deciding which duplicate wins is the caller's job.
- A malformed escape, an unreadable or non-UTF-8 file, or a ``--set`` without ``key=`` raises
  :class:`~tidelog.server.config.errors.ConfigError` saying where.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError

__all__ = ["PropertyEntry", "parse_properties", "parse_set_option", "read_properties_file"]


@dataclass(frozen=True, slots=True)
class PropertyEntry:
    """One ``key=value`` with where it came from (``server.properties:12`` or ``--set``)."""

    key: str
    value: str
    where: str


_NATURAL_LINES = re.compile(r"\r\n|\r|\n")
_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str, *, source: str = "<properties>") -> list[PropertyEntry]:
    """Parse Java ``.properties`` text into entries in file order (duplicates kept; the caller decides)."""
    lines = _NATURAL_LINES.split(text)
    entries: list[PropertyEntry] = []
    i = 0
    while i < len(lines):
        lineno = i + 1
        line = lines[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue  # blank or comment line (a comment never continues onto the next line)
        while _ends_with_escaped_newline(line):
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(_WHITESPACE)
            i += 1
        where = f"{source}:{lineno}"
        key, value = _split_key_value(line)
        entries.append(PropertyEntry(_unescape(key, where), _unescape(value, where), where))
    return entries


def _ends_with_escaped_newline(line: str) -> bool:
    backslashes = len(line) - len(line.rstrip("\\"))
    return backslashes % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    pos = 0
    while pos < len(line):
        ch = line[pos]
        if ch == "\\":
            pos += 2
            continue
        if ch in "=:" or ch in _WHITESPACE:
            break
        pos += 1
    key = line[:pos]
    rest = line[pos:].lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def _unescape(text: str, where: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch != "\\":
            out.append(ch)
            pos += 1
            continue
        if pos + 1 >= len(text):  # a lone trailing backslash (continuation at end of file): dropped
            break
        nxt = text[pos + 1]
        if nxt == "u":
            digits = text[pos + 2 : pos + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError(f"{where}: malformed \\uxxxx encoding")
            out.append(chr(int(digits, 16)))
            pos += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        pos += 2
    return "".join(out)


def read_properties_file(path: Path) -> list[PropertyEntry]:
    """Read and parse a properties file; an unreadable or non-UTF-8 file raises :class:`ConfigError`."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid UTF-8 (byte offset {exc.start})") from exc
    return parse_properties(text, source=str(path))


def parse_set_option(option: str) -> tuple[str, str]:
    """``"key=value"`` (as given to ``--set``) -> ``(key, value)``; the key must be non-empty."""
    key, sep, value = option.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set expects key=value, got {option!r}")
    return key, value
