"""Config definitions: what one key is (type, default, validator, documentation, broker synonyms).

Invariants: a definition's default is written as Kafka writes it and satisfies its own validator (checked
when a table is built, :func:`index_by_name`); :meth:`ConfigDef.parse` either returns a value of the
definition's type that passed the validator or raises
:class:`~tidelog.server.config.errors.ConfigError` naming the key. Pure data and parsing: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from .validators import Validator
from .values import ConfigType, ConfigValue, parse_typed

__all__ = ["BrokerSynonym", "ConfigDef", "TopicConfigDef", "index_by_name"]


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One configuration key: its type, default (as Kafka writes it), validator and documentation.

    ``ignored`` marks Kafka keys that tidelog accepts so a Kafka ``server.properties`` loads unchanged,
    but that have no effect here (KRaft controller settings and the like); loading one yields a warning.
    """

    name: str
    type: ConfigType
    default: str | None
    doc: str
    validator: Validator | None = None
    ignored: bool = False

    @property
    def attr(self) -> str:
        """The snake_case attribute name (``log.retention.ms`` -> ``log_retention_ms``)."""
        return self.name.replace(".", "_").replace("-", "_")

    @property
    def sensitive(self) -> bool:
        return self.type is ConfigType.PASSWORD

    def parse(self, raw: str) -> ConfigValue:
        """Parse and validate ``raw``; raises :class:`ConfigError` naming this key."""
        value = parse_typed(self.name, self.type, raw)
        if self.validator is not None:
            self.validator(self.name, value)
        return value

    def default_value(self) -> ConfigValue:
        return None if self.default is None else self.parse(self.default)


@dataclass(frozen=True, slots=True)
class BrokerSynonym:
    """A broker key that supplies a topic config's default; ``multiplier`` converts its unit (hours -> ms)."""

    name: str
    multiplier: int = 1


@dataclass(frozen=True, slots=True)
class TopicConfigDef(ConfigDef):
    """A topic-level config; its default comes from the first set broker synonym, else ``default``."""

    broker_synonyms: tuple[BrokerSynonym, ...] = field(default=())

    @property
    def read_only(self) -> bool:
        return False


Def = TypeVar("Def", bound=ConfigDef)


def index_by_name(items: Sequence[Def]) -> dict[str, Def]:
    """A table of definitions by name; a repeated name or a default its validator refuses is a bug."""
    out: dict[str, Def] = {}
    for item in items:
        assert item.name not in out, item.name
        if item.default is not None:
            item.parse(item.default)  # defaults must satisfy their own validators
        out[item.name] = item
    return out
