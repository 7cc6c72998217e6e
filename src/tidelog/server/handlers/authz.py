"""The handlers' side of authorization: what a handler holds (an authorizer or ``None``) and the checks it
makes, each a no-op returning "allowed" when no authorizer is configured.

Invariant: with ``authorizer.class.name`` unset the handlers get ``None``, and every check below is one
``is None`` test: authorization costs nothing then.
"""

from __future__ import annotations

from typing import TypeAlias

from tidelog.server.dispatch import RequestContext
from tidelog.server.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from tidelog.server.security.authorizer import OMITTED_OPERATIONS, SUPPORTED_OPERATIONS, AclAuthorizer

__all__ = [
    "Authz",
    "allowed",
    "cluster_allowed",
    "group_allowed",
    "operations",
    "topic_allowed",
    "txn_allowed",
]

Authz: TypeAlias = AclAuthorizer | None
"""What a handler is given: the ACL authorizer, or None when authorization is off."""


def allowed(authz: Authz, ctx: RequestContext, op: AclOperation, kind: ResourceType, name: str) -> bool:
    return authz is None or authz.permits(ctx, op, kind, name)


def topic_allowed(authz: Authz, ctx: RequestContext, op: AclOperation, topic: str) -> bool:
    return authz is None or authz.permits(ctx, op, ResourceType.TOPIC, topic)


def group_allowed(authz: Authz, ctx: RequestContext, op: AclOperation, group: str) -> bool:
    return authz is None or authz.permits(ctx, op, ResourceType.GROUP, group)


def txn_allowed(authz: Authz, ctx: RequestContext, op: AclOperation, transactional_id: str) -> bool:
    return authz is None or authz.permits(ctx, op, ResourceType.TRANSACTIONAL_ID, transactional_id)


def cluster_allowed(authz: Authz, ctx: RequestContext, op: AclOperation) -> bool:
    return authz is None or authz.permits(ctx, op, ResourceType.CLUSTER, CLUSTER_NAME)


_ALL_BITS = {kind: sum(1 << op for op in ops) for kind, ops in SUPPORTED_OPERATIONS.items()}
"""Every supported operation's bit: what Kafka answers without an authorizer."""


def operations(authz: Authz, ctx: RequestContext, kind: ResourceType, name: str, requested: bool) -> int:
    """An authorized-operations field: the bits the principal holds on the resource when ``requested``
    (every supported operation without an authorizer), else Kafka's "omitted" value."""
    if not requested:
        return OMITTED_OPERATIONS
    if authz is None:
        return _ALL_BITS[kind]
    return authz.operations_for(ctx, kind, name)
