"""Client quota entities and keys as Kafka names them: who a quota applies to, and which quota.

Invariants:

- A quota entity is a user, a client id, or both (Kafka's ``ClientQuotaEntity`` with ``user`` /
  ``client-id``); either part may be the default (``<default>``), written as ``None`` in a
  :class:`QuotaEntity` part and as ``<default>`` in an entity path. Entity paths are those of
  :mod:`tidelog.server.entity_configs` (Kafka's ``/config/users|clients/...``, names sanitized).
- The quota keys are Kafka's four: ``producer_byte_rate`` and ``consumer_byte_rate`` (whole bytes per
  second), ``request_percentage`` (percent of one request thread per window) and
  ``controller_mutation_rate`` (partitions created or deleted per second). A value must be > 0; the byte
  rates must be whole numbers (KRaft's ``ClientQuotaControlManager`` rules and messages).
- :func:`precedence` lists the entities whose quota applies to a (user, client id), most specific first:
  Kafka's order ``/config/users/<user>/clients/<client-id>`` ... ``/config/clients/<default>``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from tidelog.server.entity_configs import DEFAULT_ENTITY, EntityConfigsError, entity_path, parse_entity_path

__all__ = [
    "CLIENT_ID",
    "EntityName",
    "QUOTA_KEYS",
    "USER",
    "QuotaEntity",
    "QuotaKey",
    "precedence",
    "quota_value_error",
]

USER: Final = "user"
CLIENT_ID: Final = "client-id"


class QuotaKey(enum.StrEnum):
    PRODUCER_BYTE_RATE = "producer_byte_rate"
    CONSUMER_BYTE_RATE = "consumer_byte_rate"
    REQUEST_PERCENTAGE = "request_percentage"
    CONTROLLER_MUTATION_RATE = "controller_mutation_rate"


QUOTA_KEYS: Final = frozenset(k.value for k in QuotaKey)
_WHOLE_KEYS: Final = frozenset({QuotaKey.PRODUCER_BYTE_RATE.value, QuotaKey.CONSUMER_BYTE_RATE.value})
_LONG_MAX: Final = float(2**63 - 1)


@dataclass(frozen=True, slots=True)
class EntityName:
    """One side of an entity: a name, or the default (``name`` None)."""

    name: str | None

    def path_name(self) -> str:
        return DEFAULT_ENTITY if self.name is None else self.name


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A user and/or client id quota entity; ``None`` part = not part of the entity, a part whose
    ``name`` is None = the default of that type."""

    user: EntityName | None = None
    client_id: EntityName | None = None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise ValueError("a quota entity names a user, a client id or both")

    @classmethod
    def of(
        cls,
        *,
        user: str | None = None,
        client_id: str | None = None,
        default_user: bool = False,
        default_client_id: bool = False,
    ) -> QuotaEntity:
        return cls(
            user=EntityName(None) if default_user else (None if user is None else EntityName(user)),
            client_id=EntityName(None)
            if default_client_id
            else (None if client_id is None else EntityName(client_id)),
        )

    @property
    def path(self) -> str:
        """The entity path below ``/config`` (``users/alice/clients/c1``; entity_configs.py)."""
        return entity_path(
            user=None if self.user is None else self.user.path_name(),
            client_id=None if self.client_id is None else self.client_id.path_name(),
        )

    @classmethod
    def from_path(cls, path: str) -> QuotaEntity | None:
        """The entity of a path, or None if the path is no user/client entity."""
        try:
            user, client_id = parse_entity_path(path)
        except EntityConfigsError:
            return None

        def part(name: str | None) -> EntityName | None:
            return None if name is None else EntityName(None if name == DEFAULT_ENTITY else name)

        return cls(part(user), part(client_id))

    def components(self) -> list[tuple[str, str | None]]:
        """(entity type, name or None for the default) pairs, as the wire carries them."""
        out: list[tuple[str, str | None]] = []
        if self.user is not None:
            out.append((USER, self.user.name))
        if self.client_id is not None:
            out.append((CLIENT_ID, self.client_id.name))
        return out

    def __str__(self) -> str:
        return ", ".join(f"{t}={DEFAULT_ENTITY if n is None else n}" for t, n in self.components())


def precedence(user: str, client_id: str) -> tuple[QuotaEntity, ...]:
    """The entities whose quota may apply to ``user`` with ``client_id``, most specific first."""
    u, c, du, dc = EntityName(user), EntityName(client_id), EntityName(None), EntityName(None)
    return (
        QuotaEntity(u, c),
        QuotaEntity(u, dc),
        QuotaEntity(u, None),
        QuotaEntity(du, c),
        QuotaEntity(du, dc),
        QuotaEntity(du, None),
        QuotaEntity(None, c),
        QuotaEntity(None, dc),
    )


def quota_value_error(key: str, value: float) -> str | None:
    """Why ``key`` = ``value`` cannot be a quota (Kafka's message), or None."""
    if key not in QUOTA_KEYS:
        return f"Invalid configuration key {key}"
    if not value > 0.0:
        return f"Quota {key} must be greater than 0"
    if key in _WHOLE_KEYS:
        if value > _LONG_MAX:
            return f"Proposed value for {key} is too large for a LONG."
        if abs(value % 1.0) > 1e-6:
            return f"{key} cannot be a fractional value."
    return None
