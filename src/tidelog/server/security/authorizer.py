"""The ACL authorizer (Kafka's ``StandardAuthorizer`` semantics): may this principal, from this host, do
this operation on this resource?

Invariants (Kafka's rules, ``StandardAuthorizerData`` / ``AclAuthorizer``):

- A super user (``super.users``) may do everything, whatever the ACLs say.
- The ACLs that apply to a resource are the LITERAL ones of its name, the LITERAL ones named ``*``, and the
  PREFIXED ones whose prefix starts its name; of those, an ACL counts for the request when its principal is
  the request's or ``User:*`` and its host is the client's address or ``*``.
- DENY wins: one counting DENY ACL of the operation (or ALL) refuses, whatever ALLOWs there are. Otherwise a
  counting ALLOW of the operation, of ALL, or of an operation that implies it allows: DESCRIBE is implied by
  READ, WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS.
- When no ACL at all applies to the resource (whatever its principal, host or operation), the answer is
  ``allow.everyone.if.no.acl.found`` (default false).
- Cost: :meth:`AclAuthorizer.authorize` never scans every ACL. ACLs are indexed by (resource type, name) for
  LITERAL and by (resource type, prefix) for PREFIXED, with the set of prefix lengths in use per type, and
  then by principal, so one check is a handful of dict lookups (one per distinct prefix length) plus the
  ACLs of that principal and of ``User:*`` on the resource.
- Pure: no I/O, no clock. The ACL set changes only through :meth:`AclAuthorizer.replace`, :meth:`add` and
  :meth:`remove`, which the store calls after the change is durable.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, TypeAlias

from tidelog.server.dispatch import RequestContext

from .acl import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

__all__ = [
    "AUTHORIZER_CLASS_NAMES",
    "OMITTED_OPERATIONS",
    "SUPPORTED_OPERATIONS",
    "AclAuthorizer",
    "authorizer_enabled",
    "parse_super_users",
]

AUTHORIZER_CLASS_NAMES: Final = frozenset(
    {
        "tidelog",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
        "kafka.security.auth.SimpleAclAuthorizer",
    }
)
"""``authorizer.class.name`` values that turn the ACL authorizer on (Kafka's own, so its config carries over)."""

OMITTED_OPERATIONS: Final = -2147483648
"""The authorized-operations field when the client did not ask for it (Kafka's ``Integer.MIN_VALUE``)."""

_O = AclOperation
_ALLOWED_BY: Final[dict[AclOperation, frozenset[AclOperation]]] = {
    op: frozenset({op, _O.ALL}) for op in AclOperation
}
_ALLOWED_BY[_O.DESCRIBE] = frozenset({_O.DESCRIBE, _O.READ, _O.WRITE, _O.DELETE, _O.ALTER, _O.ALL})
_ALLOWED_BY[_O.DESCRIBE_CONFIGS] = frozenset({_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.ALL})

SUPPORTED_OPERATIONS: Final[dict[ResourceType, tuple[AclOperation, ...]]] = {
    ResourceType.TOPIC: (
        _O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
    ResourceType.CLUSTER: (
        _O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE, _O.ALTER,
        _O.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (_O.DESCRIBE, _O.WRITE),
}  # fmt: skip
"""The operations Kafka reports in an authorized-operations bit field, per resource type."""


def authorizer_enabled(class_name: str | None) -> bool:
    """Whether ``authorizer.class.name`` turns the ACL authorizer on; raises ValueError for an unknown class."""
    if not class_name:
        return False
    if class_name.strip() in AUTHORIZER_CLASS_NAMES:
        return True
    raise ValueError(
        f"authorizer.class.name {class_name!r} is not supported; use one of {', '.join(sorted(AUTHORIZER_CLASS_NAMES))}"
    )


def parse_super_users(value: str | None) -> frozenset[str]:
    """``super.users``: semicolon-separated principals (``User:alice;User:bob``)."""
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


_ByPrincipal: TypeAlias = dict[str, list[AclBinding]]
"""One resource pattern's ACLs by principal (``User:*`` is a key of its own)."""


class AclAuthorizer:
    """ACLs in memory, indexed for per-request checks."""

    def __init__(
        self, *, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._bindings: set[AclBinding] = set()
        self._literal: dict[tuple[ResourceType, str], _ByPrincipal] = {}
        self._prefixed: dict[tuple[ResourceType, str], _ByPrincipal] = {}
        self._by_principal: dict[tuple[ResourceType, str], set[AclBinding]] = {}
        """(resource type, principal) -> its ACLs, for :meth:`authorize_any`."""
        self._prefix_lengths: dict[ResourceType, dict[int, int]] = {}
        """Per type: prefix length -> how many distinct prefixes of that length hold ACLs."""

    # -- the ACL set ----------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._bindings)

    def bindings(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """The ACLs ``acl_filter`` matches (all without one), in a stable order."""
        found = self._bindings if acl_filter is None else [b for b in self._bindings if acl_filter.matches(b)]
        return sorted(found, key=_order)

    def replace(self, bindings: Iterable[AclBinding]) -> None:
        for binding in list(self._bindings):
            self._remove(binding)
        self.add(bindings)

    def add(self, bindings: Iterable[AclBinding]) -> None:
        for binding in bindings:
            if binding in self._bindings:
                continue
            self._bindings.add(binding)
            self._by_principal.setdefault((binding.resource_type, binding.principal), set()).add(binding)
            key = (binding.resource_type, binding.resource_name)
            if binding.pattern_type == PatternType.PREFIXED:
                entries = self._prefixed.setdefault(key, {})
                if not entries:
                    lengths = self._prefix_lengths.setdefault(binding.resource_type, {})
                    size = len(binding.resource_name)
                    lengths[size] = lengths.get(size, 0) + 1
            else:
                entries = self._literal.setdefault(key, {})
            entries.setdefault(binding.principal, []).append(binding)

    def remove(self, bindings: Iterable[AclBinding]) -> None:
        for binding in bindings:
            if binding in self._bindings:
                self._remove(binding)

    def _remove(self, binding: AclBinding) -> None:
        self._bindings.discard(binding)
        of_type = self._by_principal[(binding.resource_type, binding.principal)]
        of_type.discard(binding)
        if not of_type:
            del self._by_principal[(binding.resource_type, binding.principal)]
        key = (binding.resource_type, binding.resource_name)
        index = self._prefixed if binding.pattern_type == PatternType.PREFIXED else self._literal
        entries = index[key]
        of_principal = entries[binding.principal]
        of_principal.remove(binding)
        if not of_principal:
            del entries[binding.principal]
        if entries:
            return
        del index[key]
        if binding.pattern_type == PatternType.PREFIXED:
            lengths = self._prefix_lengths[binding.resource_type]
            size = len(binding.resource_name)
            lengths[size] -= 1
            if not lengths[size]:
                del lengths[size]

    # -- checks ---------------------------------------------------------------------------------------

    def _applicable(self, resource_type: ResourceType, name: str) -> list[_ByPrincipal]:
        """The ACLs that apply to the resource (by pattern only), by principal; empty maps left out."""
        found = []
        literal = self._literal.get((resource_type, name))
        if literal:
            found.append(literal)
        if name != WILDCARD:
            wildcard = self._literal.get((resource_type, WILDCARD))
            if wildcard:
                found.append(wildcard)
        lengths = self._prefix_lengths.get(resource_type)
        if lengths:
            for size in lengths:
                if size <= len(name):
                    prefixed = self._prefixed.get((resource_type, name[:size]))
                    if prefixed:
                        found.append(prefixed)
        return found

    def authorize(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        """Whether ``principal`` (``Type:name``) from ``host`` may do ``operation`` on the resource."""
        if principal in self.super_users:
            return True
        applicable = self._applicable(resource_type, name)
        if not applicable:
            return self.allow_everyone_if_no_acl_found
        allowing = _ALLOWED_BY[operation]
        allowed = False
        for by_principal in applicable:
            for acl in (*by_principal.get(principal, ()), *by_principal.get(WILDCARD_PRINCIPAL, ())):
                if acl.host not in (host, WILDCARD):
                    continue
                if acl.permission == AclPermissionType.DENY:
                    if acl.operation in (operation, _O.ALL):
                        return False
                elif acl.operation in allowing:
                    allowed = True
        return allowed

    def authorize_any(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether ``principal`` may do ``operation`` on some resource of the type (Kafka's
        ``authorizeByResourceType``: an ALLOW on any name or prefix that no DENY of the same or a shorter
        name/prefix shadows; a DENY on the LITERAL ``*`` refuses all)."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        allowing = _ALLOWED_BY[operation]
        denied_literal: set[str] = set()
        denied_prefixes: set[str] = set()
        allows: list[AclBinding] = []
        candidates = (
            *self._by_principal.get((resource_type, principal), ()),
            *self._by_principal.get((resource_type, WILDCARD_PRINCIPAL), ()),
        )
        for binding in candidates:
            if binding.host not in (host, WILDCARD):
                continue
            if binding.permission == AclPermissionType.DENY:
                if binding.operation in (operation, _O.ALL):
                    if binding.pattern_type == PatternType.LITERAL:
                        if binding.resource_name == WILDCARD:
                            return False
                        denied_literal.add(binding.resource_name)
                    else:
                        denied_prefixes.add(binding.resource_name)
            elif binding.operation in allowing:
                allows.append(binding)
        for allow in allows:
            name = allow.resource_name
            if any(name.startswith(prefix) for prefix in denied_prefixes):
                continue
            if allow.pattern_type == PatternType.LITERAL and name in denied_literal:
                continue
            return True
        return False

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """Kafka's authorized-operations bit field: bit ``op`` set for each supported operation allowed."""
        bits = 0
        for operation in SUPPORTED_OPERATIONS[resource_type]:
            if self.authorize(principal, host, operation, resource_type, name):
                bits |= 1 << operation
        return bits

    # -- request-context shorthands ---------------------------------------------------------------------

    def permits(
        self, ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        return self.authorize(str(ctx.principal), ctx.client_host, operation, resource_type, name)

    def permits_any(self, ctx: RequestContext, operation: AclOperation, resource_type: ResourceType) -> bool:
        return self.authorize_any(str(ctx.principal), ctx.client_host, operation, resource_type)

    def operations_for(self, ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
        return self.authorized_operations(str(ctx.principal), ctx.client_host, resource_type, name)


def _order(binding: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    return (
        binding.resource_type,
        binding.resource_name,
        binding.pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission,
    )
