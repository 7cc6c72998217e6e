"""The principal of a TLS client: its certificate's subject DN, as Java prints it, mapped by Kafka's
``ssl.principal.mapping.rules`` (``SslPrincipalMapper``).

Invariants:

- :func:`subject_dn` renders a subject as Java's ``X500Principal.getName()`` (RFC 2253): relative names
  in reverse certificate order (most specific first, ``CN=alice,OU=eng,O=acme``), the attribute types Java
  names (CN, C, L, ST, O, OU, STREET, DC, UID) by keyword, ``emailAddress`` as its OID with the hex of its
  IA5String encoding (``1.2.840.113549.1.9.1=#16...``, what Java prints), a multi-valued name joined by
  ``+``, and RFC 2253's escapes (``,+"\\<>;``, a leading ``#`` or space, a trailing space).
- The rules parse exactly as Kafka splits and parses them (the same regular expressions): ``DEFAULT``
  (the DN unchanged) and ``RULE:pattern/replacement/[LU]``; an unparsable rule is a ``ValueError`` naming
  it. The first rule whose pattern matches the *whole* DN gives the name: Java's ``replaceAll`` of the
  pattern by the replacement (``$n`` is group n when the pattern has it, else the literal text; ``\\x``
  is ``x``), then lower- or upper-cased. No rule matching is :class:`NoMatchingRuleError` (Kafka fails the
  authentication).
- Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["NoMatchingRuleError", "SslPrincipalMapper", "subject_dn"]

_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)

# OpenSSL's long names (what ssl.getpeercert() reports) -> Java's RFC 2253 keywords
_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_EMAIL_OID = "1.2.840.113549.1.9.1"
_SPECIAL = frozenset(',+"\\<>;')


class NoMatchingRuleError(ValueError):
    """No ``ssl.principal.mapping.rules`` rule applies to a DN."""


def _escape(value: str) -> str:
    out = []
    for i, char in enumerate(value):
        if char in _SPECIAL or (i == 0 and char in "# ") or (i == len(value) - 1 and char == " "):
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def _ia5_hex(value: str) -> str:
    data = value.encode("ascii", "replace")
    if len(data) < 0x80:
        length = bytes([len(data)])
    else:
        size = len(data).to_bytes((len(data).bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(size)]) + size
    return "#" + (b"\x16" + length + data).hex()


def _attribute(name: str, value: str) -> str:
    keyword = _KEYWORDS.get(name)
    if keyword is not None:
        return f"{keyword}={_escape(value)}"
    if name == "emailAddress":
        return f"{_EMAIL_OID}={_ia5_hex(value)}"
    return f"{name}={_escape(value)}"


def subject_dn(subject: Iterable[Sequence[tuple[str, str]]]) -> str:
    """The RFC 2253 DN of a subject as ``ssl.SSLSocket.getpeercert()['subject']`` gives it (relative names
    in certificate order, each a sequence of ``(long name, value)``)."""
    rdns = ["+".join(_attribute(name, value) for name, value in rdn) for rdn in subject]
    return ",".join(reversed(rdns))


def _java_replacement(replacement: str, group_count: int) -> list[str | int]:
    """Java's ``replaceAll`` replacement as literal pieces and group numbers (Kafka escapes a ``$n`` beyond
    the pattern's groups into literal text before calling it)."""
    parts: list[str | int] = []
    literal: list[str] = []
    i = 0
    while i < len(replacement):
        char = replacement[i]
        if char == "\\" and i + 1 < len(replacement):
            literal.append(replacement[i + 1])
            i += 2
            continue
        if char == "$":
            match = re.match(r"\d+", replacement[i + 1 :])
            if match is not None and int(match.group()) <= group_count:
                digits = match.group()
                if literal:
                    parts.append("".join(literal))
                    literal = []
                parts.append(int(digits))
                i += 1 + len(digits)
                continue
        literal.append(char)
        i += 1
    if literal:
        parts.append("".join(literal))
    return parts


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    to_lower: bool = False
    to_upper: bool = False

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        parts = _java_replacement(self.replacement, self.pattern.groups)

        def expand(match: re.Match[str]) -> str:
            return "".join(p if isinstance(p, str) else (match.group(p) or "") for p in parts)

        result = self.pattern.sub(expand, dn)
        if self.to_lower:
            return result.lower()
        if self.to_upper:
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        case = "L" if self.to_lower else "U" if self.to_upper else ""
        return f"RULE:{self.pattern.pattern}/{self.replacement}/{case}"


class SslPrincipalMapper:
    """Kafka's ``SslPrincipalMapper`` for one ``ssl.principal.mapping.rules`` value."""

    def __init__(self, rules: str | None = "DEFAULT") -> None:
        parsed = (_parse(rule) for rule in _split(rules if rules is not None else "DEFAULT"))
        self._rules = tuple(rule for rule in parsed if rule is not None)

    def name(self, dn: str) -> str:
        """The principal name for ``dn``; raises :class:`NoMatchingRuleError` when no rule applies."""
        for rule in self._rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRuleError(f"No rules apply to {dn}, rules [{', '.join(map(str, self._rules))}]")


def _split(rules: str) -> list[str]:
    return [match.group(1) for match in _RULE_SPLITTER.finditer(rules.strip()) if match.group(1) is not None]


def _parse(rule: str) -> _Rule | None:
    match = _RULE_PARSER.match(rule)
    if match is None:
        raise ValueError(f"Invalid rule: {rule}")
    if match.end() != len(rule):
        raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[match.end() :]}`")
    if match.group(1) is not None:
        return _Rule(None)
    if match.group(2) is not None:
        try:
            pattern = re.compile(match.group(2))
        except re.error as exc:
            raise ValueError(f"Invalid rule: {rule}: {exc}") from None
        return _Rule(pattern, match.group(4), match.group(6) == "L", match.group(6) == "U")
    return None  # an empty rule is ignored
