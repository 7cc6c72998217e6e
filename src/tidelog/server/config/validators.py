"""Validators of parsed config values: Kafka's ``Range``, ``ValidString``, ``ValidList`` and friends.

Invariants: a validator checks an already-parsed value and raises
:class:`~tidelog.server.config.errors.ConfigError` naming the key, in Kafka's wording; ``None`` (an unset
optional config) always passes. :meth:`Validator.describe` is the valid range DescribeConfigs documents.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import invalid_value
from .values import ConfigValue

__all__ = [
    "GreaterThan",
    "Matches",
    "OneOf",
    "Range",
    "SubsetOf",
    "ThrottledReplicaList",
    "Validator",
    "at_least",
    "between",
]


class Validator:
    """Checks a parsed value; raises :class:`ConfigError` naming the key."""

    def __call__(self, name: str, value: ConfigValue) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Range(Validator):
    """Numeric bounds, inclusive; ``None`` for an open end (Kafka's ``Range.atLeast`` / ``between``)."""

    min: float | None = None
    max: float | None = None

    def __call__(self, name: str, value: ConfigValue) -> None:
        if value is None:
            return
        assert isinstance(value, int | float)
        if self.min is not None and value < self.min:
            raise invalid_value(name, value, f"Value must be at least {_num(self.min)}")
        if self.max is not None and value > self.max:
            raise invalid_value(name, value, f"Value must be no more than {_num(self.max)}")

    def describe(self) -> str:
        if self.max is None:
            return f"[{_num(self.min)},...]"
        if self.min is None:
            return f"[...,{_num(self.max)}]"
        return f"[{_num(self.min)},...,{_num(self.max)}]"


def at_least(minimum: float) -> Range:
    return Range(min=minimum)


def between(minimum: float, maximum: float) -> Range:
    return Range(min=minimum, max=maximum)


@dataclass(frozen=True, slots=True)
class GreaterThan(Validator):
    """An exclusive numeric lower bound (a rate must be positive: zero would mean "never")."""

    bound: float

    def __call__(self, name: str, value: ConfigValue) -> None:
        if value is None:
            return
        assert isinstance(value, int | float)
        if not value > self.bound:
            raise invalid_value(name, value, f"Value must be greater than {_num(self.bound)}")

    def describe(self) -> str:
        return f"({_num(self.bound)},...]"


def _num(x: float | None) -> str:
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else str(x)


@dataclass(frozen=True, slots=True)
class OneOf(Validator):
    """The value must be one of ``choices`` (Kafka's ``ValidString`` / case-insensitive variant)."""

    choices: tuple[str, ...]
    case_sensitive: bool = True

    def __call__(self, name: str, value: ConfigValue) -> None:
        if value is None:
            return
        assert isinstance(value, str)
        ok = (
            value in self.choices
            if self.case_sensitive
            else value.lower() in {c.lower() for c in self.choices}
        )
        if not ok:
            raise invalid_value(name, value, f"String must be one of: {', '.join(self.choices)}")

    def describe(self) -> str:
        return "[" + ", ".join(self.choices) + "]"


@dataclass(frozen=True, slots=True)
class SubsetOf(Validator):
    """Every element of a list value must be one of ``choices`` (Kafka's ``ValidList``)."""

    choices: tuple[str, ...]
    allow_empty: bool = False

    def __call__(self, name: str, value: ConfigValue) -> None:
        if value is None:
            return
        assert isinstance(value, tuple)
        if not value and not self.allow_empty:
            raise invalid_value(name, "", f"Value must be a non-empty list of: {', '.join(self.choices)}")
        for item in value:
            if item not in self.choices:
                raise invalid_value(
                    name, ",".join(value), f"String must be one of: {', '.join(self.choices)}"
                )

    def describe(self) -> str:
        return "[" + ", ".join(self.choices) + "]"


@dataclass(frozen=True, slots=True)
class Matches(Validator):
    """A string value must match ``pattern`` (full match)."""

    pattern: str
    explanation: str

    def __call__(self, name: str, value: ConfigValue) -> None:
        if value is None:
            return
        assert isinstance(value, str)
        if re.fullmatch(self.pattern, value) is None:
            raise invalid_value(name, value, self.explanation)

    def describe(self) -> str:
        return self.explanation


_THROTTLED_REPLICA = re.compile(r"[0-9]+:[0-9]+")


@dataclass(frozen=True, slots=True)
class ThrottledReplicaList(Validator):
    """``*`` alone, or ``partition:broker`` entries (Kafka's ``ThrottledReplicaListValidator``)."""

    def __call__(self, name: str, value: ConfigValue) -> None:
        if value is None:
            return
        assert isinstance(value, tuple)
        items = [item.strip() for item in value]
        if items == ["*"] or all(_THROTTLED_REPLICA.fullmatch(item) for item in items):
            return
        raise invalid_value(name, ",".join(value), self.describe())

    def describe(self) -> str:
        return (
            "Must be the literal '*' or a list of replicas in the following format:"
            " [partitionId]:[brokerId],[partitionId]:[brokerId],..."
        )
