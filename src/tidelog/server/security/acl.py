"""Kafka's ACL model: resource patterns, ACL entries, bindings and the filters that match them.

The codes are Kafka's wire codes (``AclOperation``, ``ResourceType``, ``PatternType``,
``AclPermissionType``), so a binding goes to and from CreateAcls / DescribeAcls / DeleteAcls unchanged.

Invariants:

- A :class:`AclBinding` is concrete: a resource type other than ANY/UNKNOWN, a pattern type LITERAL or
  PREFIXED, an operation other than ANY/UNKNOWN, a permission ALLOW or DENY, a principal ``Type:name`` and a
  host. :func:`binding_error` says why a binding is not (Kafka's ``AclControlManager.validateNewAcl``), and
  refuses DELEGATION_TOKEN resources, which tidelog does not serve.
- An :class:`AclBindingFilter` matches bindings as Kafka's ``AclBindingFilter.matches``: ANY (or a null
  field) matches everything; the pattern type MATCH matches every pattern that would apply to the named
  resource (LITERAL of that name, LITERAL ``*``, PREFIXED of a prefix of it). :func:`filter_error` says why a
  filter is unusable (UNKNOWN anywhere), answered as INVALID_REQUEST.
- Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CLUSTER_NAME",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourceType",
    "binding_error",
    "filter_error",
    "parse_principal",
]

WILDCARD: Final = "*"
"""The LITERAL resource name (and host) that matches every name."""
WILDCARD_PRINCIPAL: Final = "User:*"
CLUSTER_NAME: Final = "kafka-cluster"
"""The name of the one CLUSTER resource."""


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15
    """KIP-939: on a TransactionalId, InitProducerId with Enable2Pc (besides WRITE)."""


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_CONCRETE_TYPES: Final = frozenset(
    {ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID}
)


def parse_principal(text: str) -> tuple[str, str] | None:
    """``Type:name`` split at the first colon, or None when there is no type or no colon."""
    kind, sep, name = text.partition(":")
    if not sep or not kind:
        return None
    return kind, name


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: ``principal`` is ``permission``-ed ``operation`` from ``host`` on the resource pattern."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


def binding_error(binding: AclBinding) -> str | None:
    """Why ``binding`` cannot be stored, or None."""
    if binding.resource_type == ResourceType.DELEGATION_TOKEN:
        return (
            "ACLs on DELEGATION_TOKEN resources are not supported: tidelog does not serve delegation tokens"
        )
    if binding.resource_type not in _CONCRETE_TYPES:
        return f"Invalid resource type {binding.resource_type.name}"
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {binding.pattern_type.name}"
    if not binding.resource_name:
        return "Resource name should not be empty"
    if binding.resource_type == ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if binding.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        return f"Invalid operation {binding.operation.name}"
    if binding.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permission type {binding.permission.name}"
    if parse_principal(binding.principal) is None:
        return f"Could not parse principal from `{binding.principal}` (no colon is present separating the principal type from the principal name)"
    if not binding.host:
        return "Invalid null host"
    return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A filter over bindings (DescribeAcls, DeleteAcls); ``None`` fields and ANY codes match everything."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches_pattern(self, resource_type: ResourceType, name: str, pattern_type: PatternType) -> bool:
        if self.resource_type not in (ResourceType.ANY, resource_type):
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is None:
                return True
            if pattern_type == PatternType.LITERAL:
                return name in (self.resource_name, WILDCARD)
            return self.resource_name.startswith(name)
        if self.pattern_type not in (PatternType.ANY, pattern_type):
            return False
        return self.resource_name is None or self.resource_name == name

    def matches(self, binding: AclBinding) -> bool:
        if not self.matches_pattern(binding.resource_type, binding.resource_name, binding.pattern_type):
            return False
        if self.principal is not None and self.principal != binding.principal:
            return False
        if self.host is not None and self.host != binding.host:
            return False
        if self.operation not in (AclOperation.ANY, binding.operation):
            return False
        return self.permission in (AclPermissionType.ANY, binding.permission)


def filter_error(acl_filter: AclBindingFilter) -> str | None:
    """Why ``acl_filter`` cannot be used (an UNKNOWN code), or None."""
    for label, value in (
        ("resource type", acl_filter.resource_type),
        ("pattern type", acl_filter.pattern_type),
        ("operation", acl_filter.operation),
        ("permission type", acl_filter.permission),
    ):
        if value == 0:
            return f"Invalid {label} UNKNOWN in the filter"
    return None
