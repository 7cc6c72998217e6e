"""SCRAM credentials kept as user entity configs (Kafka's ``/config/users/<user>``), and KIP-554's rules.

Invariants:

- A user's credential for a mechanism is the entity config ``SCRAM-SHA-256`` / ``SCRAM-SHA-512`` of
  ``users/<user>``, valued in Kafka's text form (:meth:`ScramCredential.to_config`); this module reads and
  writes only those two keys, so quotas kept on the same entity are untouched.
- :func:`plan_alterations` validates a whole AlterUserScramCredentials request before anything is written,
  per user, with Kafka's error codes and messages: a user whose alterations are not all acceptable has none
  of them applied.
- A value that does not parse is treated as no credential (logged): nobody logs in with it.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    CredentialLookup,
    ScramCredential,
)
from tidelog.server.entity_configs import DEFAULT_ENTITY, EntityConfigs, entity_path, parse_entity_path

__all__ = [
    "MECHANISM_BY_TYPE",
    "Alteration",
    "UserOutcome",
    "credential_lookup",
    "plan_alterations",
    "scram_users",
]

log = logging.getLogger("tidelog.security")

MECHANISM_BY_TYPE = {m.wire_type: m for m in SCRAM_MECHANISMS.values()}
"""KIP-554's mechanism ids: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512."""


def credential_lookup(configs: EntityConfigs) -> CredentialLookup:
    """The broker's ``(user, mechanism) -> credential`` over the user entity configs."""

    def lookup(user: str, mechanism: str) -> ScramCredential | None:
        if user == DEFAULT_ENTITY or mechanism not in SCRAM_MECHANISMS:
            return None
        text = configs.get(entity_path(user=user)).get(mechanism)
        if text is None:
            return None
        try:
            return ScramCredential.from_config(text)
        except ValueError:
            log.warning(
                "the %s credential of user %r is not readable; that login is refused", mechanism, user
            )
            return None

    return lookup


def scram_users(configs: EntityConfigs) -> dict[str, dict[str, ScramCredential]]:
    """Every user with at least one readable SCRAM credential: ``{user: {mechanism: credential}}``."""
    users: dict[str, dict[str, ScramCredential]] = {}
    for path, entity in configs.all().items():
        user, client_id = parse_entity_path(path)
        if user is None or client_id is not None or user == DEFAULT_ENTITY:
            continue
        for mechanism in SCRAM_MECHANISMS:
            text = entity.get(mechanism)
            if text is None:
                continue
            try:
                users.setdefault(user, {})[mechanism] = ScramCredential.from_config(text)
            except ValueError:
                continue
    return users


@dataclass(frozen=True, slots=True)
class Alteration:
    """One upsertion (``salted_password`` set) or deletion (``None``) of a user's credential."""

    user: str
    mechanism_type: int
    iterations: int = 0
    salt: bytes = b""
    salted_password: bytes | None = None


@dataclass(slots=True)
class UserOutcome:
    """What one user's alterations come to: an error, or the keys to set and delete."""

    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    set: dict[str, str] = field(default_factory=dict)
    delete: list[str] = field(default_factory=list)

    def fail(self, code: ErrorCode, message: str) -> None:
        if self.error_code == ErrorCode.NONE:
            self.error_code, self.error_message = code, message


def plan_alterations(
    alterations: Iterable[Alteration], existing: Mapping[str, Mapping[str, ScramCredential]]
) -> dict[str, UserOutcome]:
    """Kafka's checks of one AlterUserScramCredentials request, user by user (in first-mention order)."""
    alterations = list(alterations)
    outcomes: dict[str, UserOutcome] = {}
    counts = Counter((a.user, a.mechanism_type) for a in alterations)
    for alteration in alterations:  # a duplicate fails its user before any other check (as Kafka)
        outcome = outcomes.setdefault(alteration.user, UserOutcome())
        if counts[(alteration.user, alteration.mechanism_type)] > 1:
            outcome.fail(
                ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"
            )
    for alteration in alterations:
        outcome = outcomes[alteration.user]
        if outcome.error_code != ErrorCode.NONE:
            continue
        if not alteration.user:
            outcome.fail(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
            continue
        if alteration.user == DEFAULT_ENTITY:
            outcome.fail(ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Username must not be {DEFAULT_ENTITY}")
            continue
        mechanism = MECHANISM_BY_TYPE.get(alteration.mechanism_type)
        if mechanism is None:
            outcome.fail(ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
            continue
        if alteration.salted_password is None:
            if mechanism.name not in existing.get(alteration.user, {}):
                outcome.fail(
                    ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
                )
                continue
            outcome.delete.append(mechanism.name)
            continue
        if alteration.iterations < MIN_ITERATIONS:
            outcome.fail(ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too few iterations (minimum {MIN_ITERATIONS})")
        elif alteration.iterations > MAX_ITERATIONS:
            outcome.fail(ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too many iterations (maximum {MAX_ITERATIONS})")
        elif not alteration.salt:
            outcome.fail(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt must not be empty")
        elif len(alteration.salted_password) != mechanism.digest_size:
            outcome.fail(
                ErrorCode.UNACCEPTABLE_CREDENTIAL,
                f"Salted password must be {mechanism.digest_size} bytes for {mechanism.name}",
            )
        else:
            credential = ScramCredential.from_salted_password(
                mechanism, alteration.salted_password, alteration.salt, alteration.iterations
            )
            outcome.set[mechanism.name] = credential.to_config()
    return outcomes
